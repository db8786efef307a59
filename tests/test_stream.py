"""The GPU path's stream semantics, emulated on the CPU (RINGCOLL_TRANSPORT=stream,
csrc/transport/cpu_stream_transport.h): the executor's waves, StreamTransport's
batching, ordering and staging, the reducer's work on a compute stream, the device
fingerprint check and the join at a job's end run here exactly as they run over
NCCL, on CI's machines with no GPU. RINGCOLL_STREAM_DELAY_US makes every task of the
emulated streams start after a random pause, so work that is not ordered after
what it depends on reads the wrong bytes and these tests fail.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

import ringcoll
from tests import mp
from tests.test_algorithms import algorithms_matrix

# Small pauses for the whole grid (it runs thousands of collectives), long ones
# where a test looks for one race.
GRID_DELAY_US = "20"
RACE_DELAY_US = "3000"


@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 5])
def test_every_algorithm_on_streams(world_size):
    """Every algorithm x every collective it provides, exact references (and gloo),
    counts 0, 1, p-1, p+1 and large, every root, 64-byte segments (p <= 4)."""
    mp.run_checks(world_size, algorithms_matrix, timeout=600, transport="stream",
                  env={"RINGCOLL_STREAM_DELAY_US": GRID_DELAY_US})


def _pattern(rank, n, salt):
    return ((torch.arange(n, dtype=torch.int64) * 7 + rank * 13 + salt) % 101).float()


def reuse_world(rank, p, n):
    """Right after wait(), every rank overwrites its inputs and runs another
    collective (which reuses the workspace): the peers' results must be exact. A
    rank whose last waves only send (broadcast's root, reduce's non-roots, a
    gather's senders) finishes its Work before its sends ran unless the job's end
    joins the transfer stream."""
    failures = []
    group = dist.new_group(backend="ringcoll", timeout=timedelta(seconds=60),
                           pg_options=ringcoll.Options(chunk_bytes=4096))
    for it in range(4):
        root = it % p
        # broadcast: the root only sends.
        x = _pattern(root, n, it) if rank == root else torch.zeros(n)
        dist.broadcast(x, src=root, group=group, async_op=True).wait()
        if rank == root:
            x.fill_(-1.0)
        elif not torch.equal(x, _pattern(root, n, it)):
            failures.append(f"broadcast #{it} root {root}: rank {rank} got "
                            f"{(x != _pattern(root, n, it)).sum().item()} wrong elements")
        # reduce: the non-roots only send, from the workspace.
        y = _pattern(rank, n, it + 100)
        dist.reduce(y, dst=root, group=group, async_op=True).wait()
        want = sum(_pattern(r, n, it + 100) for r in range(p))
        if rank != root:
            y.fill_(-1.0)
        elif not torch.equal(y, want):
            failures.append(f"reduce #{it} root {root}: {(y != want).sum().item()} wrong "
                            f"elements")
        # the next collective reuses the workspace the reduce's sends read from
        z = torch.full((n,), float(rank))
        dist.all_reduce(z, group=group)
        if not torch.equal(z, torch.full((n,), float(p * (p - 1) // 2))):
            failures.append(f"all_reduce after #{it}: wrong")
    dist.destroy_process_group(group)
    return failures


@pytest.mark.parametrize("world_size", [2, 3])
def test_inputs_reused_right_after_wait(world_size):
    mp.run_checks(world_size, reuse_world, 64 * 1024, timeout=300, transport="stream",
                  env={"RINGCOLL_STREAM_DELAY_US": RACE_DELAY_US})


def mismatch_world(rank, p):
    """Ranks that disagree (a count) are caught by the check on the compute stream,
    before anything is written; every rank raises naming both calls, and the group
    is broken afterwards."""
    n = 1000 if rank == 0 else 1001
    x = torch.ones(n)
    try:
        dist.all_reduce(x)
    except dist.DistBackendError as e:
        msg = str(e)
    else:
        return ["the mismatched all_reduce did not raise"]
    out = []
    if "disagree" not in msg or "1000 elements" not in msg or "1001 elements" not in msg:
        out.append(f"rank {rank}: error does not name both calls: {msg}")
    if not torch.equal(x, torch.ones(n)):
        out.append(f"rank {rank}: the input was written")
    try:
        dist.all_reduce(torch.ones(4))
        out.append(f"rank {rank}: the next call did not raise")
    except dist.DistBackendError as e:
        if "unusable" not in str(e) and "disagree" not in str(e):
            out.append(f"rank {rank}: next call raised {e}")
    return out


@pytest.mark.parametrize("world_size", [2, 3])
def test_device_fingerprint_mismatch(world_size):
    mp.run_checks(world_size, mismatch_world, timeout=120, transport="stream",
                  pg_timeout_s=30)
