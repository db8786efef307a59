"""RINGCOLL_ALGO_MODULES: the modules that define algorithms written in Python.

Every process group's creation (ringcoll/_backend.py) and every command-line tool
(ringcoll.check, .sim, .model) imports them before it reads an algorithm's name.
This module knows nothing of schedules, so the checker and the vocabulary above it
(ringcoll.schedules, which re-exports load_modules) both use it without importing
each other.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys

ENV = "RINGCOLL_ALGO_MODULES"


def load_modules(spec: str | None) -> None:
    """Imports the modules of a RINGCOLL_ALGO_MODULES value: comma-separated dotted
    module names (import's rules, sys.path) or paths of .py files (imported under
    their file name, once). Raises ImportError naming the one that failed."""
    for item in (spec or "").split(","):
        item = item.strip()
        if not item:
            continue
        try:
            if item.endswith(".py") or os.sep in item:
                _import_path(item)
            else:
                importlib.import_module(item)
        except Exception as e:  # noqa: BLE001 - reported with the module's name
            raise ImportError(f"RINGCOLL_ALGO_MODULES: cannot import {item!r} "
                              f"({type(e).__name__}: {e})") from e


def _import_path(path: str) -> None:
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no such file: {path}")
    name = os.path.splitext(os.path.basename(path))[0]
    mod = sys.modules.get(name)
    if mod is not None and os.path.abspath(getattr(mod, "__file__", "") or "") == path:
        return
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        del sys.modules[name]
        raise


def load_from_environment() -> None:
    """load_modules() of $RINGCOLL_ALGO_MODULES (the command-line tools' start)."""
    load_modules(os.environ.get(ENV))
