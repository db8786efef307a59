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


def _installed_copy(here):
    """The folder of another ringcoll package with a built extension that an import
    from anywhere but this checkout's root would find (pip install . puts one in
    site-packages; an editable install's finder maps to its checkout), or None."""
    import glob
    import importlib.machinery
    import os
    import sys

    root = os.path.dirname(here)
    path = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != root]
    for finder in sys.meta_path:
        try:
            spec = finder.find_spec("ringcoll", path if finder is importlib.machinery.PathFinder
                                    else None)
        except Exception:  # noqa: BLE001 - a finder that cannot answer is no copy
            continue
        for loc in (spec.submodule_search_locations or []) if spec else []:
            if os.path.abspath(loc) != here and glob.glob(os.path.join(loc, "_C.*")):
                return loc
    return None


def _not_importable(e, here):
    """Raises the ImportError that says why the extension in `here` did not load."""
    import glob
    import os

    if not glob.glob(os.path.join(here, "_C.*")):
        # A checkout whose extension was never built (or whose build failed), imported
        # from its root: Python finds this folder before any installed ringcoll.
        raise ImportError(
            f"ringcoll's C++ extension is not built in {here}: build it from the checkout "
            f"with `pip install --no-build-isolation -e .` (in {os.path.dirname(here)}, "
            "with the venv that has torch active; README, Set-up)") from None
    # The usual cause: the extension was built against another torch.
    try:
        from ._built_for import TORCH_VERSION as built
    except ImportError:
        built = None
    if built is not None and built != torch.__version__:
        raise ImportError(
            f"ringcoll was built for torch {built}, but torch {torch.__version__} is "
            "installed: rebuild it (pip install --no-build-isolation -e . in its checkout, "
            f"or reinstall its wheel) against this torch ({e})") from e
    raise e


try:
    from . import _C
except ImportError as _e:
    import glob as _glob
    import os as _os

    _here = _os.path.dirname(_os.path.abspath(__file__))
    _other = None if _glob.glob(_os.path.join(_here, "_C.*")) else _installed_copy(_here)
    if _other is None:
        _not_importable(_e, _here)
    # A checkout imported from its root (python -m ringcoll.check there) while
    # ringcoll is installed from it (pip install .): the checkout's folder comes first
    # on sys.path but has no extension. Its submodules are taken from the installed
    # copy, which has one (this __init__ is the checkout's: the same file unless the
    # checkout changed since it was installed).
    __path__[:] = [_other]
    from . import _C
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
