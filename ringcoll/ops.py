"""ringcoll's collectives as torch ops, for code that bypasses torch.distributed's
Python layer (tensor-parallel inference, torch.compile'd graphs).

    import ringcoll.ops
    ringcoll.ops.all_reduce_(x)            # x summed over the default group, in place
    ringcoll.ops.all_reduce_(x, group=tp)  # over a ringcoll group made by new_group

The op is torch.ops.ringcoll.all_reduce_(tensor, group_name) (csrc/backend/ops.cc):
the same collective as dist.all_reduce(x, group=...) on a ringcoll group, so the two
may be mixed as long as every rank makes the same calls in the same order. It has a
fake implementation, so it runs inside torch.compile(fullgraph=True).

In eager code all_reduce_ first offers the call to _C.all_reduce_eager, which runs
the op's body straight from Python where torch's dispatcher would do nothing else
(a plain CPU or CUDA tensor, no mode, subclass or autograd record: csrc/backend/
ops.h) and bumps the tensor's version as the op does: torch.ops' argument
parsing and boxed call cost more than a small all-reduce on shared memory. Anything
else goes through torch.ops.ringcoll.all_reduce_, so modes and subclasses see it.
"""

from __future__ import annotations

import weakref

import torch
import torch.distributed as dist

from . import _C  # registers torch.ops.ringcoll

__all__ = ["all_reduce_"]


# The op itself (not its overload packet, whose __call__ costs about 0.5 us more), and
# the last group resolved with its name: group.group_name and the default group's
# lookup cost about 0.6 us per call, a seventh of a small call at p = 1. One slot, by
# identity, through a weak reference (the slot must not keep a destroyed group, and
# its backend's shared memory and threads, alive): a destroyed group's object keeps
# its old name, and the op then says that the name resolves to nothing.
_op = torch.ops.ringcoll.all_reduce_.default
_last = (lambda: None, "")
_eager = _C.all_reduce_eager
_c10d = dist.distributed_c10d


def _group_name(group) -> str:
    global _last
    if torch.compiler.is_compiling():  # traced: no module state
        if group is None or group is dist.group.WORLD:
            group = dist.distributed_c10d._get_default_group()
        return group.group_name
    if group is None:
        group = dist.group.WORLD
        if group is None:
            group = dist.distributed_c10d._get_default_group()  # raises: not initialized
    if _last[0]() is not group:
        _last = (weakref.ref(group), group.group_name)
    return _last[1]


def all_reduce_(tensor: torch.Tensor, group=None) -> torch.Tensor:
    """Sums `tensor` over `group` (default: the default group) in place and returns it.
    The group's backend for the tensor's device must be ringcoll; dtypes are those
    dist.all_reduce takes on ringcoll (others raise, naming the dtype)."""
    if not torch.compiler.is_compiling():
        g = _c10d._world.default_pg if group is None else group
        if g is not None and _eager(tensor, g):
            return tensor
    _op(tensor, _group_name(group))
    return tensor
