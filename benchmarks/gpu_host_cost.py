"""Host cost per call of a small all-reduce: ringcoll against the stock backend, in
the same processes, rounds alternating.

    python benchmarks/gpu_host_cost.py                 # CUDA: ringcoll vs NCCL, ranks share GPU 0
    python benchmarks/gpu_host_cost.py --device cpu    # ringcoll vs gloo (a dry run of the method)

For each size and backend, every call is timed alone: the ranks first finish the
previous call and meet at a gloo barrier, then each times
  enqueue: `dist.all_reduce(x, async_op=True)` returning (what the call costs the
           host before the caller can go on; on CUDA nothing has been waited for),
  total:   the same call through `wait()` and `torch.cuda.synchronize()`.
A row is the median over calls, the slowest rank's. On one shared GPU the ranks
reach each other over NCCL's socket transport (ringcoll/gpu.py), so `total` is
socket latency for both backends; `enqueue` is the host cost being compared.
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

SIZES = (8, 64 << 10, 1 << 20)


def world(rank, p, device, calls, rounds):
    """One rank; tests/mp.py has made the ringcoll group (WORLD) and a gloo one."""
    if device == "cuda":
        torch.cuda.set_device(0)
    stock = dist.new_group(backend="nccl" if device == "cuda" else "gloo")
    meet = mp.GLOO
    groups = {"ringcoll": dist.group.WORLD, "stock": stock}

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    rows = []
    for n_bytes in SIZES:
        x = torch.ones(max(1, n_bytes // 4), device=device)
        enq = {k: [] for k in groups}
        tot = {k: [] for k in groups}
        for name, g in groups.items():  # warm-up: communicators, plans, segments
            for _ in range(10):
                dist.all_reduce(x, group=g)
            sync()
        for _ in range(rounds):
            for name, g in groups.items():
                for _ in range(calls):
                    x.fill_(1)
                    sync()
                    dist.barrier(group=meet)
                    t0 = time.perf_counter()
                    w = dist.all_reduce(x, group=g, async_op=True)
                    t1 = time.perf_counter()
                    w.wait()
                    sync()
                    t2 = time.perf_counter()
                    enq[name].append(t1 - t0)
                    tot[name].append(t2 - t0)
        if x.flatten()[0].item() != p:
            raise AssertionError(f"all_reduce of ones gave {x.flatten()[0].item()}, want {p}")
        mine = {k: (statistics.median(enq[k]), statistics.median(tot[k])) for k in groups}
        every = [None] * p
        dist.all_gather_object(every, mine, group=meet)
        rows.append((n_bytes, {k: (max(r[k][0] for r in every), max(r[k][1] for r in every))
                               for k in groups}))
    return rows if rank == 0 else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--calls", type=int, default=50, help="calls per backend per round")
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    envs = [share_gpu_env(r) if args.device == "cuda" else {} for r in range(args.nproc)]
    res = mp.run_world(args.nproc, world, args.device, args.calls, args.rounds, timeout=600,
                       rank_env={k: [e[k] for e in envs] for k in envs[0]})
    stock = "nccl" if args.device == "cuda" else "gloo"
    print(f"p = {args.nproc}, {args.device}, float32 SUM; per call, median, slowest rank")
    print(f"{'bytes':>8} {'ringcoll enqueue us':>20} {stock + ' enqueue us':>16} {'ratio':>6}"
          f" {'ringcoll total us':>18} {stock + ' total us':>14} {'ratio':>6}")
    for n_bytes, r in res[0]:
        (re_, rt), (se, st) = r["ringcoll"], r["stock"]
        print(f"{n_bytes:>8} {re_ * 1e6:>20.1f} {se * 1e6:>16.1f} {re_ / se:>6.2f}"
              f" {rt * 1e6:>18.1f} {st * 1e6:>14.1f} {rt / st:>6.2f}")


if __name__ == "__main__":
    main()
