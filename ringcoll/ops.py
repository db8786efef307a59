"""ringcoll's collectives as torch ops, for code that bypasses torch.distributed's
Python layer (tensor-parallel inference, torch.compile'd graphs).

    import ringcoll.ops
    ringcoll.ops.all_reduce_(x)            # x summed over the default group, in place
    ringcoll.ops.all_reduce_(x, group=tp)  # over a ringcoll group made by new_group

The op is torch.ops.ringcoll.all_reduce_(tensor, group_name) (csrc/backend/ops.cc):
the same collective as dist.all_reduce(x, group=...) on a ringcoll group, so the two
may be mixed as long as every rank makes the same calls in the same order. It has a
fake implementation, so it runs inside torch.compile(fullgraph=True).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from . import _C  # noqa: F401 - registers torch.ops.ringcoll

__all__ = ["all_reduce_"]


def _group_name(group) -> str:
    if group is None or group is dist.group.WORLD:
        group = dist.distributed_c10d._get_default_group()
    return group.group_name


def all_reduce_(tensor: torch.Tensor, group=None) -> torch.Tensor:
    """Sums `tensor` over `group` (default: the default group) in place and returns it.
    The group's backend for the tensor's device must be ringcoll; dtypes are those
    dist.all_reduce takes on ringcoll (others raise, naming the dtype)."""
    torch.ops.ringcoll.all_reduce_(tensor, _group_name(group))
    return tensor
