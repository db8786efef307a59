"""What an algorithm written in Python costs against the same algorithm built in:
examples/pyring.py (the ring, step for step) against the built-in ring, all-reduce,
float32, in the same processes, shared memory.

    python benchmarks/python_algo_cost.py                    # p = 2 and 4, 8 B-64 MiB
    python benchmarks/python_algo_cost.py --nproc 2 --sizes 8,64K,16M --rounds 9

Steady state (every call after the first at a size): for each size, --rounds
rounds of two blocks, one per algorithm, their order swapped every round so that a
drift of the machine falls on both alike; a block is back-to-back blocking calls
filling about --block-ms (at least 3), after a gloo barrier; its figure is the
slowest rank's mean time per call. A round's ratio is pyring's figure over ring's;
a row gives the median ratio over the rounds and their quartiles, and each
algorithm's median per-call time. (On a machine shared with other work a single
call can wait a scheduler tick, 20 us and more where a small call takes 7: ratios
of rounds, not single calls, carry the comparison.)

First call: for each size and each of --fresh element counts near it that no earlier
call used, every rank times one all-reduce on a ring group, then one on a pyring
group, after a gloo barrier each; the extra cost of the first call is pyring's time
minus ring's (both compile a new plan; pyring also builds every rank's schedule in
Python and proves them with ringcoll.check), the slowest rank's, median and range
over the counts.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

import torch
import torch.distributed as dist

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from ringcoll.bench.records import parse_size  # noqa: E402
from tests import mp  # noqa: E402

PYRING = os.path.join(REPO, "examples", "pyring.py")
ALGOS = ("ring", "pyring")


def _slowest(t: float) -> float:
    x = torch.tensor([t], dtype=torch.float64)
    dist.all_reduce(x, op=dist.ReduceOp.MAX, group=mp.GLOO)
    return float(x)


def world(rank, p, sizes, rounds, block_ms, fresh):
    import ringcoll

    groups = {a: dist.new_group(backend="ringcoll", pg_options=ringcoll.Options(algo=a))
              for a in ALGOS}
    out = {"steady": {}, "first": {}}
    for size in sizes:
        x = torch.ones(max(1, size // 4))
        per = {}
        for a, g in groups.items():  # warm (plan, schedule, pages), then a first estimate
            for _ in range(3):
                dist.all_reduce(x, group=g)
            dist.barrier(group=mp.GLOO)
            t0 = time.perf_counter()
            for _ in range(5):
                dist.all_reduce(x, group=g)
            per[a] = _slowest((time.perf_counter() - t0) / 5)
        calls = max(3, int(block_ms * 1e-3 / max(per.values())))
        rows = []
        for r in range(rounds):
            row = {}
            for a in (ALGOS if r % 2 == 0 else ALGOS[::-1]):
                dist.barrier(group=mp.GLOO)
                t0 = time.perf_counter()
                for _ in range(calls):
                    dist.all_reduce(x, group=groups[a])
                row[a] = _slowest((time.perf_counter() - t0) / calls)
            rows.append(row)
        out["steady"][size] = (calls, rows)
        firsts = []
        for k in range(fresh):
            y = torch.ones(max(1, size // 4) + 1 + k)  # counts no call used before
            row = {}
            for a, g in groups.items():
                dist.barrier(group=mp.GLOO)
                t0 = time.perf_counter()
                dist.all_reduce(y, group=g)
                row[a] = _slowest(time.perf_counter() - t0)
            firsts.append(row)
        out["first"][size] = firsts
    return out


def _q(xs, f):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(f * (len(xs) - 1) + 0.5))]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nproc", default="2,4")
    ap.add_argument("--sizes", default=",".join(str(8 << k) for k in range(0, 24, 2)) + ",64M",
                    help="bytes, comma-separated (default 8 B, 32 B, ..., 32 MiB, 64 MiB)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--block-ms", type=float, default=30.0)
    ap.add_argument("--fresh", type=int, default=5)
    a = ap.parse_args(argv)
    sizes = [parse_size(s) for s in a.sizes.split(",")]
    print(f"# {' '.join(sys.argv)}")
    print(f"# {platform.node()} {platform.machine()} {os.cpu_count()} cores, "
          f"{platform.platform()}, Python {platform.python_version()}, torch "
          f"{torch.__version__}; {time.strftime('%Y-%m-%d %H:%M')}; load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} before the run")
    print("# steady: pyring/ring time ratio per round (median, quartiles, min-max over "
          f"{a.rounds} rounds) and median per-call us; first call: pyring's extra us over "
          "ring's (median, min-max)")
    print(f"{'p':>2} {'bytes':>9} {'calls':>6} {'ratio':>6} {'q1-q3':>11} {'min-max':>11} "
          f"{'ring us':>10} {'pyring us':>10} {'first extra us':>15} {'min-max':>17}")
    for p in (int(x) for x in a.nproc.split(",")):
        res = mp.run_world(p, world, sizes, a.rounds, a.block_ms, a.fresh, timeout=3600,
                           transport="shm", env={"RINGCOLL_ALGO_MODULES": PYRING})[0]
        for size in sizes:
            calls, rows = res["steady"][size]
            ratios = [r["pyring"] / r["ring"] for r in rows]
            ring = statistics.median(r["ring"] for r in rows) * 1e6
            py = statistics.median(r["pyring"] for r in rows) * 1e6
            extra = [(f["pyring"] - f["ring"]) * 1e6 for f in res["first"][size]]
            print(f"{p:>2} {size:>9} {calls:>6} {statistics.median(ratios):6.3f} "
                  f"{_q(ratios, .25):5.3f}-{_q(ratios, .75):5.3f} "
                  f"{min(ratios):5.3f}-{max(ratios):5.3f} {ring:10.1f} {py:10.1f} "
                  f"{statistics.median(extra):15.0f} {min(extra):8.0f}-{max(extra):<8.0f}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
