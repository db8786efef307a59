"""Side-by-side benchmark: ringcoll against the stock backend on this machine.

    python -m ringcoll.bench                      # defaults: CPU, 2 and 4 processes
    python -m ringcoll.bench --nproc 3 --sizes 8,1048576 --iters 20

Spawns local processes; in each world both a ringcoll group and a gloo group run
the same all-reduce on the same float32 tensors, alternating, so both see the same
machine noise. Reports the slowest rank's median time per size, algbw and busbw
(nccl-tests conventions: busbw = algbw x 2(p-1)/p for all-reduce), the ratio
gloo_time / ringcoll_time (> 1: ringcoll faster), and checks every result exactly.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import timedelta

DEFAULT_SIZES = [8, 1 << 10, 1 << 16, 1 << 20, 1 << 24]


def _fmt_size(b: int) -> str:
    for unit, k in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= k:
            return f"{b / k:g} {unit}"
    return f"{b} B"


def _worker(rank, p, store_path, sizes, iters, warmup, results):
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    import torch
    import torch.distributed as dist

    import ringcoll  # noqa: F401

    torch.set_num_threads(1)
    dist.init_process_group("ringcoll", init_method=f"file://{store_path}", rank=rank,
                            world_size=p, timeout=timedelta(seconds=120))
    groups = {"ringcoll": None, "gloo": dist.new_group(backend="gloo")}
    rows = []
    for size in sizes:
        n = max(1, size // 4)
        # Small integers: the expected sum is exact whatever the reduction order.
        base = (torch.arange(n, dtype=torch.float32) % 7) + rank
        expect = (torch.arange(n, dtype=torch.float32) % 7) * p + p * (p - 1) / 2
        times = {name: [] for name in groups}
        wrong = {name: 0 for name in groups}
        for _ in range(warmup):
            for g in groups.values():
                dist.all_reduce(base.clone(), group=g)
        for _ in range(iters):
            for name, g in groups.items():
                x = base.clone()
                dist.barrier(group=g)
                t0 = time.perf_counter()
                dist.all_reduce(x, group=g)
                times[name].append(time.perf_counter() - t0)
                wrong[name] += int((x != expect).sum())
        rows.append((size, {k: statistics.median(v) for k, v in times.items()}, wrong))
    results.put((rank, rows))
    dist.destroy_process_group()


def run(p, sizes, iters, warmup):
    import multiprocessing as mp
    import tempfile

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        procs = [ctx.Process(target=_worker, args=(r, p, os.path.join(tmp, "store"), sizes,
                                                   iters, warmup, q)) for r in range(p)]
        for pr in procs:
            pr.start()
        per_rank = dict(q.get(timeout=1800) for _ in range(p))
        for pr in procs:
            pr.join()
    out = []
    for i, size in enumerate(sizes):
        # The slowest rank's median, as nccl-tests reports.
        t = {b: max(per_rank[r][i][1][b] for r in range(p)) for b in ("ringcoll", "gloo")}
        wrong = {b: sum(per_rank[r][i][2][b] for r in range(p)) for b in ("ringcoll", "gloo")}
        out.append((size, t, wrong))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nproc", default="2,4", help="world sizes, comma separated")
    ap.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)),
                    help="message sizes in bytes, comma separated")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    bad = 0
    for p in [int(x) for x in args.nproc.split(",")]:
        print(f"\nall-reduce float32 SUM, {p} processes, CPU, median of {args.iters} "
              f"(slowest rank)")
        print(f"{'size':>10} | {'ringcoll us':>12} {'busbw GB/s':>10} {'#wrong':>6} | "
              f"{'gloo us':>12} {'busbw GB/s':>10} {'#wrong':>6} | {'gloo/ringcoll':>13}")
        for size, t, wrong in run(p, sizes, args.iters, args.warmup):
            nbytes = max(4, size // 4 * 4)
            bus = {b: nbytes / t[b] * 2 * (p - 1) / p / 1e9 for b in t}
            print(f"{_fmt_size(nbytes):>10} | {t['ringcoll'] * 1e6:12.1f} "
                  f"{bus['ringcoll']:10.3f} {wrong['ringcoll']:6d} | "
                  f"{t['gloo'] * 1e6:12.1f} {bus['gloo']:10.3f} {wrong['gloo']:6d} | "
                  f"{t['gloo'] / t['ringcoll']:13.2f}", flush=True)
            bad += wrong["ringcoll"] + wrong["gloo"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
