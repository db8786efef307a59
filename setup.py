"""Builds ringcoll and its extension ringcoll._C.

    pip install --no-build-isolation -e .

The build imports torch (it compiles against torch's headers), hence
--no-build-isolation. The package's metadata (name, version, Python, dependencies)
is in pyproject.toml; this file adds the extension and the entry points.

CPU or CUDA variant (_cuda_config below): the CUDA variant (CUDA kernels, NCCL
transport) is built when torch is a CUDA build, nvcc is found (CUDA_HOME, else
/usr/local/cuda) and NCCL's headers and library are present (the nvidia-nccl wheel
CUDA torch depends on). RINGCOLL_CUDA=0 forces the CPU variant; RINGCOLL_CUDA=1
forces CUDA and fails, naming what is missing, if it cannot. Architectures: sm_80
and sm_90 plus PTX unless TORCH_CUDA_ARCH_LIST says otherwise.

Sanitizers (_sanitize_flags below): RINGCOLL_SANITIZE=address,undefined builds the
extension with AddressSanitizer and UndefinedBehaviorSanitizer, RINGCOLL_SANITIZE=thread
with ThreadSanitizer (a comma-separated list of gcc's -fsanitize= names; thread goes
with neither of the others). Such a build has line tables (-g1), frame pointers and
-O1, and UBSan does not recover: its first report aborts the process, as ASan's does.
The variant is the CPU one unless RINGCOLL_CUDA=1 says otherwise. Python itself is
not sanitized, so the runtime must be loaded first, and libstdc++ before it (or ASan's
__cxa_throw interceptor finds no real __cxa_throw and the first C++ throw aborts):

    RINGCOLL_CUDA=0 RINGCOLL_SANITIZE=address,undefined pip install --no-build-isolation -e .
    LD_PRELOAD=$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libstdc++.so) \
      ASAN_OPTIONS=detect_leaks=0:alloc_dealloc_mismatch=0 python -m pytest -q tests/test_stream.py

.ci/run does this on its first lane; .ci/sanitizers has the runtime options and
the reason for each, and .ci/tsan is the ThreadSanitizer recipe (docs/TESTS.md).
"""

import glob
import os
import sys

from setuptools import find_packages, setup

try:
    import torch
    from torch.utils import cpp_extension
except ImportError:
    sys.exit(
        "ringcoll: the build cannot import torch, which it compiles against. Install torch "
        "first (the README's first set-up command), then build with "
        "`pip install --no-build-isolation -e .`: without --no-build-isolation pip builds "
        "in an environment of its own, where the installed torch is not visible."
    )

HERE = os.path.dirname(os.path.abspath(__file__))
CSRC = os.path.join(HERE, "csrc")
# Files that need CUDA (or NCCL) to compile; everything else builds in both variants.
CUDA_ONLY = {"csrc/backend/cuda_device.cc", "csrc/transport/nccl_transport.cc",
             "csrc/transport/nccl_comm.cc"}


def _sources(pattern):
    return sorted(os.path.relpath(p, HERE)
                  for p in glob.glob(os.path.join(CSRC, pattern), recursive=True))


def _nccl_home():
    """(include dir, lib dir) of NCCL from the nvidia-nccl wheel, or None."""
    try:
        import nvidia.nccl as nccl_pkg
    except ImportError:
        return None
    for base in list(getattr(nccl_pkg, "__path__", [])):
        inc, lib = os.path.join(base, "include"), os.path.join(base, "lib")
        if os.path.exists(os.path.join(inc, "nccl.h")) and os.path.exists(
                os.path.join(lib, "libnccl.so.2")):
            return inc, lib
    return None


def _cuda_home():
    """(the CUDA toolkit to build with, None) or (None, why there is none): CUDA_HOME
    if set, else torch's guess and then /usr/local/cuda, the first that has nvcc and
    the runtime's headers. torch guesses from `which nvcc`, and a wrapper script in
    /usr/local/bin makes that /usr/local, which has no headers."""
    def usable(home):
        return (os.path.exists(os.path.join(home, "bin", "nvcc"))
                and os.path.exists(os.path.join(home, "include", "cuda_runtime_api.h")))

    if os.environ.get("CUDA_HOME"):
        home = os.environ["CUDA_HOME"]
        if usable(home):
            return home, None
        return None, f"CUDA_HOME={home} has no bin/nvcc with include/cuda_runtime_api.h"
    tried = [h for h in dict.fromkeys([cpp_extension.CUDA_HOME, "/usr/local/cuda"]) if h]
    for home in tried:
        if usable(home):
            return home, None
    return None, (f"no CUDA toolkit (bin/nvcc and include/cuda_runtime_api.h) in "
                  f"{' or '.join(tried)}; set CUDA_HOME")


def _cuda_config():
    """None for the CPU variant, else (nvcc path, nccl include, nccl lib)."""
    want = os.environ.get("RINGCOLL_CUDA", "").strip()
    if want not in ("", "0", "1"):
        sys.exit(f"ringcoll: RINGCOLL_CUDA='{want}' must be 0 or 1")
    if want == "0":
        return None
    missing = []
    if torch.version.cuda is None:
        missing.append(f"torch {torch.__version__} is not a CUDA build")
    cuda_home, why = _cuda_home()
    if why:
        missing.append(why)
    nccl = _nccl_home()
    if nccl is None:
        missing.append("NCCL headers/library not found (the nvidia-nccl wheel)")
    if missing:
        if want == "1":
            sys.exit("ringcoll: RINGCOLL_CUDA=1 but the CUDA variant cannot be built: "
                     + "; ".join(missing))
        print("ringcoll: building the CPU variant (" + "; ".join(missing) + ")")
        return None
    os.environ["CUDA_HOME"] = cuda_home
    cpp_extension.CUDA_HOME = cuda_home
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "8.0;9.0+PTX")
    return os.path.join(cuda_home, "bin", "nvcc"), nccl[0], nccl[1]


SANITIZERS = ("address", "undefined", "thread")


def _sanitize_flags():
    """(compile flags, link flags) for RINGCOLL_SANITIZE (the docstring above), or
    ([], []) when it is unset or empty."""
    want = os.environ.get("RINGCOLL_SANITIZE", "").strip()
    names = [n.strip() for n in want.split(",") if n.strip()]
    if not names:
        return [], []
    bad = [n for n in names if n not in SANITIZERS]
    if bad or ("thread" in names and len(names) > 1):
        sys.exit(f"ringcoll: RINGCOLL_SANITIZE='{want}' must be a comma-separated list of "
                 f"{', '.join(SANITIZERS)}, with thread alone")
    flags = [f"-fsanitize={','.join(names)}", "-fno-omit-frame-pointer",
             # Line tables for the reports' stacks, at a fraction of -g's compile time;
             # -O1 keeps the frames the reports name and compiles faster than -O3.
             "-g1", "-O1"]
    link = [f"-fsanitize={','.join(names)}"]
    if "undefined" in names:
        # Every UBSan report aborts (the default prints and goes on, and a test would
        # pass over it).
        flags.append("-fno-sanitize-recover=all")
        # gcc's UBSan runtime linked into the extension, its symbols kept local: as
        # a library of its own beside the preloaded libasan, its reports ignored
        # UBSAN_OPTIONS' log_path (its start-up sets the report file through the
        # exported __sanitizer_set_report_path, which resolves to libasan's) and went
        # to stderr only, where CI does not look (.ci/sanitizer_canary.py checks it).
        link += ["-static-libubsan", "-Wl,--exclude-libs,libubsan.a"]
    print(f"ringcoll: building with -fsanitize={','.join(names)}")
    return flags, link


def _extension():
    # -g0: no debug info; it halves compile time on 2 cores.
    cxx = ["-O3", "-g0", "-Wall", "-Wno-unused-function", "-Wno-attributes"]
    sanitize, sanitize_link = _sanitize_flags()
    cxx += sanitize  # later flags win: -g1 -O1 over -g0 -O3
    cuda = _cuda_config()
    if cuda is None:
        sources = [s for s in _sources("**/*.cc") if s not in CUDA_ONLY]
        return cpp_extension.CppExtension(
            name="ringcoll._C", sources=sources, include_dirs=[CSRC],
            extra_compile_args={"cxx": cxx}, extra_link_args=sanitize_link)
    _, nccl_inc, nccl_lib = cuda
    sources = _sources("**/*.cc") + _sources("**/*.cu")
    print(f"ringcoll: building the CUDA variant (archs {os.environ['TORCH_CUDA_ARCH_LIST']}, "
          f"NCCL from {nccl_lib})")
    return cpp_extension.CUDAExtension(
        name="ringcoll._C", sources=sources, include_dirs=[CSRC, nccl_inc],
        extra_compile_args={"cxx": cxx + ["-DRINGCOLL_WITH_CUDA=1"],
                            "nvcc": ["-O3", "-DRINGCOLL_WITH_CUDA=1"]},
        # The wheel ships libnccl.so.2 only (no libnccl.so): link it by file name
        # and find it at run time through an rpath.
        extra_link_args=[f"-L{nccl_lib}", "-l:libnccl.so.2", f"-Wl,-rpath,{nccl_lib}"]
        + sanitize_link)


def _record_torch_version():
    """ringcoll/_built_for.py: the torch this build compiles against, so that an
    import under another torch says so instead of failing on an undefined symbol."""
    with open(os.path.join(HERE, "ringcoll", "_built_for.py"), "w") as f:
        f.write("# Written by setup.py at build time.\n"
                f"TORCH_VERSION = {torch.__version__!r}\n")


_record_torch_version()


def _entry_points():
    """Both autoload groups (ringcoll_autoload.py), except that a torch which loads
    backends lazily (torch.distributed.backends, 2.14+) gets only that group: torch
    loads every `torch.backends` entry point at `import torch` and fails the import
    when one cannot be found (an editable install whose checkout was moved or
    deleted), which a lazy entry point cannot do to scripts that never name
    ringcoll. The extension is built for one torch (ringcoll/_built_for.py), so the
    build's torch decides."""
    import torch.distributed as dist

    groups = {"torch.distributed.backends": ["ringcoll = ringcoll_autoload:register"]}
    if not hasattr(dist.Backend, "_ensure_backend_registered"):
        groups["torch.backends"] = ["ringcoll = ringcoll_autoload:at_torch_import"]
    return groups

# name, version, Python and dependencies: pyproject.toml.
setup(
    packages=find_packages(include=["ringcoll", "ringcoll.*"]),
    # Outside the package: torch loads it even where the package cannot load.
    py_modules=["ringcoll_autoload"],
    # torch registers the backend by itself (ringcoll_autoload.py says how).
    entry_points=_entry_points(),
    ext_modules=[_extension()],
    cmdclass={"build_ext": cpp_extension.BuildExtension.with_options(use_ninja=True)},
)
