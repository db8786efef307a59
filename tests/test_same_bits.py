"""Every rank ends an all-reduce with the same bits, for every algorithm.

Floating-point sums are not associative: a rank that folds the inputs in an order
of its own ends a few ulps away from its peers, and DDP's replicas, which apply
the same all-reduced gradients, drift apart step by step. Every algorithm must
leave the same bits on every rank: the ones that reduce each block on one rank and
copy it (ring, rhd, tree, twoshot, biring) by construction, one-shot by folding in
rank order on every rank (csrc/schedules/oneshot.cc).

Inputs are random floats of mixed magnitudes (rounding differs with the order for
almost every element), in float32, float64, bfloat16 and float16, for SUM, AVG
and PREMUL_SUM, counts 1, p+1, 1000 and 70,000 (more than one segment), and with
256-byte segments, at world sizes 3-5; at 6-9, float32 and bfloat16, SUM and AVG,
counts p+1 and 70,000. Each rank's result goes through a gloo
group to every rank, which compares the bytes. `ringcoll.check` proves the same
property of the schedules themselves for p = 1..64 (tests/test_schedule.py); this
is the running executor, reducer and transports.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

import ringcoll
from ringcoll import _C
from tests import mp

# The built-in ones; those written in Python run it at a few world sizes
# (tests/test_python_algorithms.py), the checker proving the property for p = 1..64.
ALGOS = [a for a in ringcoll.algorithms() if "allreduce" in _C.provides(a) and _C.is_builtin(a)]
DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
COUNTS = [1, "p+1", 1000, 70_000]
# Every world size 3-9 on shared memory; gloo between ranks at 3 and 5; the CPU
# emulation of the GPU path (waves on streams, tests/test_stream.py) at 4.
GRID = [(p, "shm") for p in range(3, 10)] + [(3, "gloo"), (5, "gloo"), (4, "stream")]


def _input(rank, n, dtype):
    """Mixed magnitudes and signs: sums of these round differently in another order."""
    g = torch.Generator().manual_seed(1000 + rank)
    x = torch.randn(n, generator=g, dtype=torch.float64)
    scale = 10.0 ** torch.randint(-3, 4, (n,), generator=g).double()
    return (x * scale).to(dtype)


def _bits(t):
    return t.view(torch.uint8) if t.numel() else t.to(torch.uint8)


def same_bits_world(rank, p, algos=None):
    failures = []
    gloo = dist.new_group(backend="gloo")
    for algo in algos or ALGOS:
        for chunk in (None, 256):
            group = dist.new_group(backend="ringcoll", timeout=timedelta(seconds=60),
                                   pg_options=ringcoll.Options(algo=algo, chunk_bytes=chunk))
            big = p > 5  # fewer cases where 6-9 processes share CI's 2 cores
            for dtype in DTYPES[::2] if big else DTYPES:
                for op in ("SUM", "AVG") if big else ("SUM", "AVG", "PREMUL_SUM"):
                    for count in ([1000] if chunk else ["p+1", 70_000] if big else COUNTS):
                        n = p + 1 if count == "p+1" else count
                        x = _input(rank, n, dtype)
                        red = (dist._make_nccl_premul_sum(0.5) if op == "PREMUL_SUM"
                               else getattr(dist.ReduceOp, op))
                        dist.all_reduce(x, op=red, group=group)
                        got = [torch.empty_like(x) for _ in range(p)]
                        dist.all_gather(got, x, group=gloo)
                        differ = [q for q in range(p) if not torch.equal(_bits(got[q]), _bits(x))]
                        if differ:
                            bad = int((got[differ[0]] != x).sum())
                            failures.append(f"{algo} chunk={chunk} {dtype} {op} n={n}: ranks "
                                            f"{differ} differ from rank {rank} in {bad} elements")
            dist.destroy_process_group(group)
    return failures


@pytest.mark.parametrize("world_size, transport", GRID)
def test_every_rank_ends_with_the_same_bits(world_size, transport):
    mp.run_checks(world_size, same_bits_world, timeout=600, transport=transport, limit=20)
