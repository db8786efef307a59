"""ringcoll: collective algorithms you can read, change and measure, as a
torch.distributed backend.

    import torch.distributed as dist
    dist.init_process_group("ringcoll")

Importing this package loads the C++ extension and registers the "ringcoll"
backend for cpu tensors, and for cuda tensors when the extension was built with
CUDA (ringcoll.build_info()["cuda"]). A script need not import it: torch does,
through the entry points of ringcoll_autoload.py, once ringcoll is installed.
"""

from __future__ import annotations

try:
    import torch
    import torch.distributed as dist
except ImportError as e:
    import sys as _sys

    # The usual cause: a Python other than the virtual environment's.
    raise ImportError(
        f"ringcoll needs torch, which this Python ({_sys.executable}) cannot import: "
        "activate the virtual environment ringcoll was installed in (. .venv/bin/activate "
        "in the checkout), or install torch into this one") from e

try:
    from . import _C
except ImportError as e:
    import glob as _glob
    import os as _os

    _here = _os.path.dirname(_os.path.abspath(__file__))
    if not _glob.glob(_os.path.join(_here, "_C.*")):
        # A checkout whose extension was never built (or whose build failed), imported
        # from its root: Python finds this folder before any installed ringcoll.
        raise ImportError(
            f"ringcoll's C++ extension is not built in {_here}: build it from the checkout "
            f"with `pip install --no-build-isolation -e .` (in {_os.path.dirname(_here)}, "
            "with the venv that has torch active; README, Set-up)") from None
    # The usual cause: the extension was built against another torch.
    try:
        from ._built_for import TORCH_VERSION as _built
    except ImportError:
        _built = None
    if _built is not None and _built != torch.__version__:
        raise ImportError(
            f"ringcoll was built for torch {_built}, but torch {torch.__version__} is "
            "installed: rebuild it (pip install --no-build-isolation -e . in its checkout, "
            f"or reinstall its wheel) against this torch ({e})") from e
    raise
from . import schedules
from ._backend import create_backend as _create_backend
from .options import Options

__all__ = ["Options", "build_info", "algorithms", "schedules", "BACKEND_NAME"]

BACKEND_NAME = "ringcoll"


def build_info() -> dict:
    """What this build of the extension contains (cuda, nccl_version)."""
    return dict(_C.build_info())


def algorithms() -> list[str]:
    """The algorithm names RINGCOLL_ALGO accepts: the built-in ones, then those
    written in Python (ringcoll.schedules: swing, bruck and twolevel, then any a
    module registered)."""
    return list(_C.algorithms())


def _devices() -> list[str]:
    # A list, not a string: torch 2.13 mis-handles a plain string here.
    return ["cpu", "cuda"] if _C.build_info()["cuda"] else ["cpu"]


dist.Backend.register_backend(
    BACKEND_NAME, _create_backend, extended_api=True, devices=_devices()
)
