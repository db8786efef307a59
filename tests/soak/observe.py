"""What a program sees of a call, written down the same way on every backend so that
two runs of one program can be compared field by field (judge.py).

Every observation is plain data (str, bool, int, None, lists and dicts of them): an
exception is its type's name (never its text: backends word their errors
differently), a tensor is its dtype, shape and which of the call's own tensors it
shares storage with, and a Future is whether it is done and what value() gave or
raised. Nothing timing-dependent is recorded (is_completed() before a wait, how long
a call took): only what torch's contract fixes."""

from __future__ import annotations


def etype(e: BaseException) -> str:
    return type(e).__name__


def attempt(f):
    """(True, f()) or (False, the exception's type name)."""
    try:
        return True, f()
    except Exception as e:  # noqa: BLE001 - what raised is the observation
        return False, etype(e)


def summarize(value, storages: dict) -> object:
    """A future's value as structure: lists stay lists, a tensor becomes
    "dtype[shape]@where" (where: the call's tensor it shares storage with, "out0",
    "in1", or "new"; an empty tensor has no storage to share)."""
    import torch

    if isinstance(value, torch.Tensor):
        where = "empty" if value.numel() == 0 else storages.get(
            value.untyped_storage().data_ptr(), "new")
        return f"{str(value.dtype).replace('torch.', '')}{list(value.shape)}@{where}"
    if isinstance(value, (list, tuple)):
        return [summarize(v, storages) for v in value]
    return type(value).__name__


def work_state(w) -> dict:
    """is_completed() and is_success() of a Work after it was completed (a Future
    standing for a Work has no is_success())."""
    out = {"completed": attempt(w.is_completed)}
    if hasattr(w, "is_success"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (torch deprecates is_success)
            out["success"] = attempt(w.is_success)
    return out


def future_state(fut, storages: dict) -> dict:
    """done(), and value() or what it raised."""
    ok, done = attempt(fut.done)
    out = {"done": done if ok else f"raised {done}"}
    ok, value = attempt(fut.value)
    out["value"] = summarize(value, storages) if ok else f"raised {value}"
    return out


def work_future(w, storages: dict) -> dict:
    """The Work's future after the Work completed: get_future() may raise (gloo's
    reduce-scatter and point-to-point Works have none)."""
    ok, fut = attempt(w.get_future)
    if not ok:
        return {"get_future": f"raised {fut}"}
    return future_state(fut, storages)
