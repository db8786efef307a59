"""What an algorithm written in Python costs against the same algorithm built in:
examples/pyring.py (the ring, step for step) against the built-in ring, all-reduce,
float32, in the same processes.

    python benchmarks/python_algo_cost.py                  # p = 2 and 4
    python benchmarks/python_algo_cost.py --nproc 2 --sizes 8,64K,16M --fresh 20

The steady state is measured by python -m ringcoll.bench with both as backends of
one run (ringcoll+algo=pyring beside ringcoll --algo ring; benchmarks/results/
README.md has the command). This script measures the first call: for each size
and each of --fresh element counts near it that no earlier call used, every rank
times one all-reduce on a ring group, then one on a pyring group, after a gloo
barrier each; a row is the slowest rank's time, and the extra cost of the first
call is pyring's first call minus ring's (both compile a new plan; pyring also
builds every rank's schedule in Python and proves them with ringcoll.check). The
steady columns are the mean of --calls back-to-back calls at the last count (one
block each, slowest rank), for reference only: ringcoll.bench measures that.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from tests import mp  # noqa: E402
from ringcoll.bench.records import parse_size  # noqa: E402

PYRING = os.path.join(REPO, "examples", "pyring.py")


def world(rank, p, sizes, fresh, calls):
    import ringcoll

    groups = {a: dist.new_group(backend="ringcoll", pg_options=ringcoll.Options(algo=a))
              for a in ("ring", "pyring")}
    for g in groups.values():  # connections made, code paths warm
        dist.all_reduce(torch.ones(7), group=g)
    rows = []
    for size in sizes:
        base = max(1, size // 4)
        for k in range(fresh):
            n = base + 1 + k  # counts no call used before
            x = torch.ones(n)
            row = {"size": size, "n": n}
            for a, g in groups.items():
                dist.barrier(group=mp.GLOO)
                t0 = time.perf_counter()
                dist.all_reduce(x, group=g)
                row[a] = time.perf_counter() - t0
            rows.append(row)
        x = torch.ones(base + fresh)
        for a, g in groups.items():
            dist.barrier(group=mp.GLOO)
            t0 = time.perf_counter()
            for _ in range(calls):
                dist.all_reduce(x, group=g)
            rows.append({"size": size, "steady": a, "t": (time.perf_counter() - t0) / calls})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nproc", default="2,4")
    ap.add_argument("--sizes", default="8,64K,1M,16M,64M")
    ap.add_argument("--fresh", type=int, default=10)
    ap.add_argument("--calls", type=int, default=50)
    a = ap.parse_args(argv)
    sizes = [parse_size(s) for s in a.sizes.split(",")]
    print("# first all-reduce at a new element count: pyring (examples/pyring.py) and the "
          "built-in ring, float32, slowest rank, median of --fresh counts (min-max); us")
    print(f"{'p':>3} {'size':>9} {'ring first':>12} {'pyring first':>13} {'extra':>9} "
          f"{'extra min-max':>17} {'ring steady':>12} {'pyring steady':>14}")
    for p in (int(x) for x in a.nproc.split(",")):
        per_rank = mp.run_world(p, world, sizes, a.fresh, a.calls, timeout=1800,
                                transport="shm", env={"RINGCOLL_ALGO_MODULES": PYRING})
        for size in sizes:
            firsts = [[r for r in rows if r["size"] == size and "n" in r] for rows in per_rank]
            ring = [max(f[i]["ring"] for f in firsts) for i in range(a.fresh)]
            py = [max(f[i]["pyring"] for f in firsts) for i in range(a.fresh)]
            extra = [y - x for x, y in zip(ring, py)]
            steady = {s["steady"]: max(r["t"] for rows in per_rank for r in rows
                                       if r.get("steady") == s["steady"] and r["size"] == size)
                      for s in per_rank[0] if "steady" in s and s["size"] == size}
            us = 1e6
            print(f"{p:>3} {size:>9} {statistics.median(ring) * us:12.1f} "
                  f"{statistics.median(py) * us:13.1f} {statistics.median(extra) * us:9.1f} "
                  f"{min(extra) * us:8.1f}-{max(extra) * us:<8.1f} "
                  f"{steady['ring'] * us:12.1f} {steady['pyring'] * us:14.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
