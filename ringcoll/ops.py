"""ringcoll's collectives as torch ops, for code that bypasses torch.distributed's
Python layer (tensor-parallel inference, torch.compile'd graphs).

    import ringcoll.ops
    ringcoll.ops.all_reduce_(x)            # x summed over the default group, in place
    ringcoll.ops.all_reduce_(x, group=tp)  # over a ringcoll group made by new_group

The op is torch.ops.ringcoll.all_reduce_(tensor, group_name) (csrc/backend/ops.cc):
the same collective as dist.all_reduce(x, group=...) on a ringcoll group, so the two
may be mixed as long as every rank makes the same calls in the same order. It has a
fake implementation, so it runs inside torch.compile(fullgraph=True).

In eager code all_reduce_ first offers the call to _C.all_reduce_eager, a plain C
function that runs the op's body straight from Python where torch's dispatcher would
do nothing else (a plain CPU or CUDA tensor, no mode, subclass or autograd record:
csrc/backend/ops.h) and bumps the tensor's version as the op does: torch.ops' argument
parsing and boxed call cost more than a small all-reduce on shared memory. Anything
else goes through torch.ops.ringcoll.all_reduce_, so modes and subclasses see it;
under torch.compile, is_dynamo_compiling() is True and the op is traced.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from . import _C  # registers torch.ops.ringcoll

__all__ = ["all_reduce_"]


# The op itself (not its overload packet, whose __call__ costs about 0.5 us more); the
# eager entry remembers the last group itself (csrc/bindings.cc), so the op's route,
# taken by modes, subclasses and compiled code, looks the group's name up each call.
_op = torch.ops.ringcoll.all_reduce_.default
_eager = _C.all_reduce_eager
_c10d = dist.distributed_c10d
# Dynamo reads it as True and traces the op; in eager code it is a plain False (about
# a tenth of torch.compiler.is_compiling's cost, which the entry paid on every call).
# Other tracers (export's, make_fx) pass subclass or fake tensors, which _eager turns
# down.
_dynamo_compiling = torch.compiler.is_dynamo_compiling


def _group_name(group) -> str:
    if group is None or group is dist.group.WORLD:
        group = _c10d._get_default_group()  # raises when not initialized
    return group.group_name


def all_reduce_(tensor: torch.Tensor, group=None) -> torch.Tensor:
    """Sums `tensor` over `group` (default: the default group) in place and returns it.
    The group's backend for the tensor's device must be ringcoll; dtypes are those
    dist.all_reduce takes on ringcoll (others raise, naming the dtype)."""
    if not _dynamo_compiling() and _eager(tensor, group):
        return tensor
    _op(tensor, _group_name(group))
    return tensor
