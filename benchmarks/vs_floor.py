"""Small collectives through c10d against c10d's own per-call floor: all-reduce,
reduce-scatter, all-gather and broadcast of a few bytes, ringcoll against torch's
FakeProcessGroup (which returns at once: what the same `dist.*` call costs with no
backend work at all), in the same processes, blocks alternating.

    python benchmarks/vs_floor.py                      # p = 2, 8 B per rank
    python benchmarks/vs_floor.py --nproc 2 --bytes 8 --calls 5000 --rounds 5

Each rank times blocks of --calls back-to-back calls (async_op=False, as a script
makes them) after a gloo barrier, backend by backend, --rounds times; a row is the
slowest rank's per-call time for that block. The ratio column is ringcoll / floor,
per round, min-median-max. ringcoll runs its small-collective path here
(RINGCOLL_SMALL_BYTES); OMP_NUM_THREADS=1.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests import mp  # noqa: E402


def world(rank, p, n_bytes, calls, rounds):
    """One rank; tests/mp.py has made the ringcoll group (WORLD) and a gloo one."""
    import torch.testing._internal.distributed.fake_pg  # noqa: F401  (registers "fake")

    floor = dist.new_group(backend="fake")  # as benchmarks/vs_deepspeed.py's floor
    n = max(1, n_bytes // 4)
    x = torch.ones(n)
    part = torch.empty(n)
    full = torch.empty(n * p)
    calls_of = {
        "all_reduce": lambda g: dist.all_reduce(x, group=g),
        "reduce_scatter": lambda g: dist.reduce_scatter_tensor(part, full, group=g),
        "all_gather": lambda g: dist.all_gather_into_tensor(full, x, group=g),
        "broadcast": lambda g: dist.broadcast(x, 0, group=g),
    }
    groups = {"ringcoll": dist.group.WORLD, "floor": floor}
    times = {(c, b): [] for c in calls_of for b in groups}
    for fn in calls_of.values():  # warm-up
        for g in groups.values():
            for _ in range(200):
                fn(g)
    for _ in range(rounds):
        for cname, fn in calls_of.items():
            for bname, g in groups.items():
                dist.barrier(group=mp.GLOO)
                t0 = time.perf_counter()
                for _ in range(calls):
                    fn(g)
                times[(cname, bname)].append((time.perf_counter() - t0) / calls)
    every = [None] * p
    dist.all_gather_object(every, times, group=mp.GLOO)
    if rank != 0:
        return None
    return {k: [max(r[k][i] for r in every) for i in range(rounds)] for k in times}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--bytes", type=int, default=8, help="bytes per rank (float32)")
    ap.add_argument("--calls", type=int, default=5000, help="calls per timed block")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    res = mp.run_world(args.nproc, world, args.bytes, args.calls, args.rounds, timeout=600)[0]
    print(f"p = {args.nproc}, {args.bytes} B per rank, float32; per call, slowest rank, "
          f"{args.rounds} rounds of {args.calls} calls")
    print(f"{'collective':>15} {'ringcoll us':>16} {'floor us':>16} {'ringcoll/floor':>20}")
    for cname in ("all_reduce", "reduce_scatter", "all_gather", "broadcast"):
        rc, fl = res[(cname, "ringcoll")], res[(cname, "floor")]
        ratio = sorted(a / b for a, b in zip(rc, fl))
        print(f"{cname:>15} {min(rc) * 1e6:7.2f}-{max(rc) * 1e6:7.2f}"
              f" {min(fl) * 1e6:7.2f}-{max(fl) * 1e6:7.2f}"
              f" {ratio[0]:6.2f} {statistics.median(ratio):6.2f} {ratio[-1]:6.2f}")


if __name__ == "__main__":
    main()
