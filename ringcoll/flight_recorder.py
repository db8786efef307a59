"""torch's flight recorder for ringcoll groups: what each rank's last collectives
were, in the dump format `torchfrtrace` reads (csrc/backend/flight_recorder.h).

    TORCH_FR_BUFFER_SIZE=2000 TORCH_FR_DUMP_TEMP_FILE=/tmp/fr/rank_ torchrun ... train.py
    torchfrtrace /tmp/fr --prefix rank_        # after a hang: who is missing where

With TORCH_FR_BUFFER_SIZE > 0 every ringcoll collective is recorded (group,
sequence number, op, sizes, dtypes, state, and the peer it was waiting for when
it failed); each process dumps once when a collective times out, to <TORCH_FR_DUMP_TEMP_FILE><global
rank> (torch's default: ~/.cache/torch/comm_lib_trace_rank_<rank>). dump() dumps
on demand, e.g. from a rank that is itself stuck elsewhere. From torch 2.15 torch
records every backend itself (a hook on each group; buffer 2000 unless
TORCH_FR_BUFFER_SIZE says otherwise) and this recorder stays off: ringcoll runs
c10d's completion hooks (entries reach "completed") and abort hooks (torch's hook
dumps from one when a collective fails), and entries()/dump() read torch's.
"""

from __future__ import annotations

import pickle

import torch.distributed as dist

from . import _C


def _torch_records() -> bool:
    """torch 2.15+: torch's own flight-recorder hook records ringcoll groups."""
    return hasattr(dist.distributed_c10d, "_maybe_attach_flight_recorder")


def enabled() -> bool:
    """Whether ringcoll's own recorder records (TORCH_FR_BUFFER_SIZE > 0, torch
    before 2.15; from 2.15 torch's recorder does, and this is False)."""
    return _C.flight_recorder_enabled()


def entries(only_active: bool = False) -> dict:
    """The dump as a dict (torch's format: version, pg_config, pg_status, entries):
    ringcoll's recorder, or torch's for ringcoll groups from 2.15."""
    if _torch_records():
        from torch._C._distributed_c10d import _dump_fr_trace

        return pickle.loads(_dump_fr_trace(True, False, only_active, backend="ringcoll"))
    return pickle.loads(_C.flight_recorder_dump(only_active))


def dump(global_rank: int | None = None) -> bool:
    """Writes this process's dump to torch's dump file for `global_rank` (this
    process's rank in the default group by default). False when not recording."""
    if global_rank is None:
        global_rank = dist.get_rank()
    if _torch_records():
        from torch._C._distributed_c10d import _dump_fr_trace_file

        _dump_fr_trace_file(global_rank, True, False, False, backend="ringcoll")
        return True
    return _C.flight_recorder_write(global_rank)
