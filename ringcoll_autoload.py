"""How torch finds ringcoll without `import ringcoll`: the entry points setup.py
declares, so that a script written for NCCL or gloo switches by the backend's name
alone (`init_process_group("ringcoll")`, plain or under torchrun).

- `torch.distributed.backends` (torch 2.14 and later): torch calls `register()` the
  first time a script names a backend it does not know; ringcoll is imported then,
  and only then.
- `torch.backends` (torch 2.5 and later, unless TORCH_DEVICE_BACKEND_AUTOLOAD=0):
  torch calls `at_torch_import()` at the end of `import torch`; it imports
  ringcoll, which registers the backend. setup.py declares it only for a torch
  without the group above: torch fails `import torch` when such an entry point's
  module is gone (an editable install whose checkout was deleted), and a lazy one
  never runs for scripts that do not name ringcoll. Where it is declared anyway
  (a build for 2.13 later run under 2.14), it does nothing on a torch that has the
  lazy group.

This module lives outside the `ringcoll` package so that torch can load it even
when the package cannot be imported (an extension built for another torch): then
`import torch` still works, one warning says what is wrong, and naming "ringcoll"
raises that reason.
"""

from __future__ import annotations

import warnings

_failure: str | None = None  # why ringcoll could not be imported, once it was tried


def _import_ringcoll() -> str | None:
    """Imports ringcoll (registering the backend); the reason if it failed."""
    global _failure
    if _failure is not None:
        return _failure
    try:
        import ringcoll  # noqa: F401  registers the backend
    except Exception as e:  # noqa: BLE001  a broken install must not break torch
        _failure = f"{type(e).__name__}: {e}"
        warnings.warn(f"ringcoll is installed but cannot be loaded, so the 'ringcoll' "
                      f"backend is unavailable ({_failure})", RuntimeWarning, stacklevel=3)
        return _failure
    return None


def _torch_registers_lazily() -> bool:
    import torch.distributed as dist

    return hasattr(dist.Backend, "_ensure_backend_registered")


def at_torch_import() -> None:
    """The `torch.backends` entry point. Never raises: `import torch` must work for
    scripts that do not use ringcoll."""
    try:
        if _torch_registers_lazily():
            return
    except Exception:  # noqa: BLE001  a torch without distributed: nothing to register
        return
    _import_ringcoll()


def register() -> None:
    """The `torch.distributed.backends` entry point: a script named "ringcoll"."""
    failure = _import_ringcoll()
    if failure is not None:
        raise RuntimeError(f"the ringcoll backend cannot be loaded: {failure}")
