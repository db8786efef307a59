"""Where a small all-reduce's time goes: ringcoll (each variant) against the stock
backend in the same processes, both views of a call, and ringcoll's own breakdown.

    python benchmarks/gpu_host_cost.py                 # CUDA: ranks share GPU 0
    python benchmarks/gpu_host_cost.py --nproc 2 4 --variants ringcoll,ringcoll+gpu_algo=ring
    python benchmarks/gpu_host_cost.py --device cpu    # ringcoll vs gloo (a dry run)

Two views of one call, taken in the same processes, backends alternating by round:
  bench:   what `python -m ringcoll.bench` reports: CUDA events on the caller's
           stream around `dist.all_reduce(x)` (issue and wait), the host then
           synchronizing before the next call; calls back to back, no barrier, so a
           rank that finished first waits inside its next call for the others;
  barrier: every rank finishes the previous call, meets the others at a gloo
           barrier, then times on the host clock
             enqueue  `dist.all_reduce(x, async_op=True)` returning (what the call
                      costs the host before the caller can go on), and
             total    the same through `wait()` and `torch.cuda.synchronize()` (so
                      it includes the host waking from the synchronize).
A figure is the median over calls, the slowest rank's.

For ringcoll it also prints, per call, what the call enqueued (the stream path's
counts: batches = NCCL groups, kernels, markers = CUDA events recorded, stream
waits, host waits) and where its host time went (StreamStats parts, timed only in
the barrier view's calls: launch = the whole StreamPath::launch; inside it ready =
the comm stream ordered after the caller's, batch = ncclGroupStart..End, marker =
events and stream waits, kernel = kernel launches, end = the job's end and future,
other = the rest of launch: the body's torch calls, schedule, plan and executor;
python = enqueue - launch: torch.distributed's Python and c10d dispatch, the Work).
On one shared GPU the ranks reach each other over NCCL's socket transport
(ringcoll/gpu.py), the same for both backends.
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
from ringcoll.gpu import share_gpu_env  # noqa: E402
from tests import mp  # noqa: E402

PARTS = ("launch", "ready", "batch", "marker", "kernel", "end")
COUNTS = ("batches", "batches_on_compute", "kernels", "markers", "stream_waits", "host_waits")


def world(rank, p, device, sizes, variants, calls, rounds):
    """One rank; tests/mp.py made WORLD (ringcoll, unused here) and a gloo group."""
    from ringcoll.bench.runner import ringcoll_variant

    if device == "cuda":
        torch.cuda.set_device(0)
    meet = mp.GLOO
    groups = {v: dist.new_group(backend="ringcoll", pg_options=ringcoll_variant(v))
              for v in variants}
    stock = "nccl" if device == "cuda" else "gloo"
    groups[stock] = dist.new_group(backend=stock)

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    def stats(g, **kw):
        if g is groups[stock]:
            return None
        return g._get_backend(torch.device(device)).stream_stats(cuda=device == "cuda", **kw)

    rows = []
    for n_bytes in sizes:
        x = torch.ones(max(1, n_bytes // 4), device=device)
        res = {k: {"bench": [], "enqueue": [], "total": []} for k in groups}
        brk = {k: {} for k in groups}
        for name, g in groups.items():  # warm-up: communicators, plans, staging
            for _ in range(10):
                dist.all_reduce(x, group=g)
            sync()
        for _ in range(rounds):
            for name, g in groups.items():
                # the bench's view
                if device == "cuda":
                    start = torch.cuda.Event(enable_timing=True)
                    end = torch.cuda.Event(enable_timing=True)
                for _ in range(calls):
                    if device == "cuda":
                        start.record()
                        dist.all_reduce(x, group=g)
                        end.record()
                        end.synchronize()
                        res[name]["bench"].append(start.elapsed_time(end) / 1e3)
                    else:
                        t0 = time.perf_counter()
                        dist.all_reduce(x, group=g)
                        res[name]["bench"].append(time.perf_counter() - t0)
                # the barrier view, with ringcoll's counts and parts
                stats(g, reset=True, timing=1)
                for _ in range(calls):
                    sync()
                    dist.barrier(group=meet)
                    t0 = time.perf_counter()
                    w = dist.all_reduce(x, group=g, async_op=True)
                    t1 = time.perf_counter()
                    w.wait()
                    sync()
                    t2 = time.perf_counter()
                    res[name]["enqueue"].append(t1 - t0)
                    res[name]["total"].append(t2 - t0)
                s = stats(g, reset=True, timing=0)
                if s:
                    for k, v in s.items():
                        brk[name][k] = brk[name].get(k, 0) + v
        x.fill_(1)
        dist.all_reduce(x, group=groups[variants[0]] if variants else groups[stock])
        if x.flatten()[0].item() != p:
            raise AssertionError(f"all_reduce of ones gave {x.flatten()[0].item()}, want {p}")
        mine = {k: {m: statistics.median(v) for m, v in r.items()} for k, r in res.items()}
        every = [None] * p
        dist.all_gather_object(every, (mine, brk), group=meet)
        slowest = {k: {m: max(e[0][k][m] for e in every) for m in mine[k]} for k in groups}
        rows.append((n_bytes, slowest, {k: every[0][1][k] for k in groups}))
    return rows if rank == 0 else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--nproc", type=int, nargs="+", default=[2])
    ap.add_argument("--sizes", type=int, nargs="+", default=[8, 64 << 10, 1 << 20],
                    help="bytes per all-reduce")
    ap.add_argument("--variants", default="ringcoll",
                    help="ringcoll groups, comma separated: ringcoll or ringcoll+FIELD=VALUE "
                         "(ringcoll.bench's backend names)")
    ap.add_argument("--calls", type=int, default=30, help="calls per view per backend per round")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    stock = "nccl" if args.device == "cuda" else "gloo"
    for p in args.nproc:
        envs = [share_gpu_env(r) if args.device == "cuda" else {} for r in range(p)]
        rank_env = {k: [e[k] for e in envs] for k in envs[0]} if envs[0] else None
        res = mp.run_world(p, world, args.device, args.sizes, variants, args.calls,
                           args.rounds, timeout=900, rank_env=rank_env)
        print(f"\n## p = {p}, {args.device}, float32 SUM; per call, median, slowest rank; us")
        print(f"{'bytes':>8} {'backend':<28} {'bench':>7} {'enqueue':>8} {'total':>7}  "
              + " ".join(f"{c:>8}" for c in ("batches", "on_comp", "kernels", "markers",
                                              "waits", "host_w"))
              + "  " + " ".join(f"{c:>6}" for c in PARTS + ("other", "python")))
        for n_bytes, r, brk in res[0]:
            for name in variants + [stock]:
                m = r[name]
                line = (f"{n_bytes:>8} {name:<28} {m['bench'] * 1e6:>7.1f} "
                        f"{m['enqueue'] * 1e6:>8.1f} {m['total'] * 1e6:>7.1f}  ")
                b = brk.get(name) or {}
                n = b.get("collectives", 0)
                if n:
                    line += " ".join(f"{b[c] / n:>8.2f}" for c in COUNTS)
                    us = {k: b[k + "_ns"] / n / 1e3 for k in PARTS}
                    other = us["launch"] - sum(us[k] for k in PARTS[1:])
                    python = m["enqueue"] * 1e6 - us["launch"]
                    line += "  " + " ".join(f"{us[k]:>6.1f}" for k in PARTS)
                    line += f" {other:>6.1f} {python:>6.1f}"
                print(line)


if __name__ == "__main__":
    main()
