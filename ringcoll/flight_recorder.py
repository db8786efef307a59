"""torch's flight recorder for ringcoll groups: what each rank's last collectives
were, in the dump format `torchfrtrace` reads (csrc/backend/flight_recorder.h).

    TORCH_FR_BUFFER_SIZE=2000 TORCH_FR_DUMP_TEMP_FILE=/tmp/fr/rank_ torchrun ... train.py
    torchfrtrace /tmp/fr --prefix rank_        # after a hang: who is missing where

With TORCH_FR_BUFFER_SIZE > 0 every ringcoll collective is recorded (group,
sequence number, op, sizes, dtypes, state, and the peer it was waiting for when
it failed); each process dumps once when a collective fails (timeout, a peer that
exited, a mismatch) or a group is aborted, to <TORCH_FR_DUMP_TEMP_FILE><global
rank> (torch's default: ~/.cache/torch/comm_lib_trace_rank_<rank>). dump() dumps
on demand, e.g. from a rank that is itself stuck elsewhere. From torch 2.15 torch
records every backend itself and this recorder stays off: use torch's
`torch._C._distributed_c10d._dump_fr_trace(..., backend="ringcoll")` there.
"""

from __future__ import annotations

import pickle

import torch.distributed as dist

from . import _C


def enabled() -> bool:
    """Whether ringcoll records (TORCH_FR_BUFFER_SIZE > 0, torch before 2.15)."""
    return _C.flight_recorder_enabled()


def entries(only_active: bool = False) -> dict:
    """The dump as a dict (torch's format: version, pg_config, pg_status, entries)."""
    return pickle.loads(_C.flight_recorder_dump(only_active))


def dump(global_rank: int | None = None) -> bool:
    """Writes this process's dump to torch's dump file for `global_rank` (this
    process's rank in the default group by default). False when not recording."""
    if global_rank is None:
        global_rank = dist.get_rank()
    return _C.flight_recorder_write(global_rank)
