"""A CPU DDP training step with compute on every core: ringcoll against gloo, and what
the overlapped all-reduces cost the compute.

    python benchmarks/ddp_overlap.py                     # p = 2, every core computing
    python benchmarks/ddp_overlap.py --threads 1 --steps 30 --repeat 5 \\
        --out benchmarks/results/ddp-overlap-cpu

Every rank trains the same MLP (--width x --layers, float32, about 4 x width^2 x
layers bytes of gradients, in DDP's buckets of --bucket-mb) on its own random batch,
with torch.set_num_threads(--threads) (default: the machine's cores / p, so the ranks'
compute fills every core). In one run, the same processes take turns, repetition by
repetition (the order rotates):

  ringcoll   DDP on a ringcoll group: the buckets' all-reduces run while backward
             computes the next gradients (DDP's overlap)
  gloo       the same on a gloo group
  compute    the same step under DDP's no_sync(): forward, backward and the
             optimizer, no all-reduce (what the step costs with no communication)

A figure is the slowest rank's median step time over --steps steps (after --warmup).
Reported per backend: the step time, its ratio to gloo's (below 1: faster than gloo),
and the all-reduces' cost to the step, (step - compute) / compute: how much the
communication, overlapped or not, slows the compute. Parameters are checked equal on
every rank after each backend's steps (DDP's all-reduce is exact up to the sum's
rounding; the check allows 1e-5 relative). Output: stdout, PREFIX.txt, PREFIX.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

HERE = os.path.abspath(__file__)
sys.path.insert(0, os.path.dirname(HERE))
from ranks import report, run_ranks  # noqa: E402
from vs_cpu_libs import BackgroundLoad  # noqa: E402

MODES = ("ringcoll", "gloo", "compute")


def rank_main(args) -> int:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import ringcoll  # noqa: F401

    rank, p = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo")
    groups = {"ringcoll": dist.new_group(backend="ringcoll"),
              "gloo": dist.new_group(backend="gloo")}
    def make():  # the same weights on every rank and for every group
        torch.manual_seed(0)
        return torch.nn.Sequential(*[m for _ in range(args.layers) for m in (
            torch.nn.Linear(args.width, args.width), torch.nn.ReLU())])

    # compute: a model of its own (its steps never sync), so that the two others take
    # the same steps and end with the same parameters.
    models = {name: DDP(make(), process_group=groups["gloo" if name == "compute" else name],
                        bucket_cap_mb=args.bucket_mb) for name in MODES}
    opts = {n: torch.optim.SGD(m.parameters(), lr=1e-4) for n, m in models.items()}
    gen = torch.Generator().manual_seed(1000 + rank)
    x = torch.randn(args.batch, args.width, generator=gen)
    y = torch.randn(args.batch, args.width, generator=gen)

    def step(name):
        model, opt = models[name], opts[name]
        opt.zero_grad(set_to_none=False)
        if name == "compute":
            with model.no_sync():
                torch.nn.functional.mse_loss(model(x), y).backward()
        else:
            torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()

    times = {m: [] for m in MODES}
    for _ in range(args.warmup):
        for m in MODES:
            step(m)
    clock = time.perf_counter
    for rep in range(args.repeat):
        k = rep % len(MODES)
        for m in MODES[k:] + MODES[:k]:
            dist.barrier(group=groups["gloo"])
            ts = []
            for _ in range(args.steps):
                t0 = clock()
                step(m)
                ts.append(clock() - t0)
            times[m].append(statistics.median(ts))
    # The two DDP models took the same steps on the same data: the same parameters.
    mismatch = 0.0
    for a, b in zip(models["ringcoll"].parameters(), models["gloo"].parameters()):
        mismatch = max(mismatch, ((a - b).abs().max() / (b.abs().max() + 1e-12)).item())
    return report({"times": times, "mismatch": mismatch}, args.result, group=groups["gloo"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0,
                    help="torch threads per rank (default: cores / p, at least 1)")
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--bucket-mb", type=float, default=4.0)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--background-load", type=int, default=0, metavar="N")
    ap.add_argument("--out", default="bench-out/ddp-overlap")
    ap.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.threads <= 0:
        args.threads = max(1, (os.cpu_count() or 1) // args.nproc)
    if args.rank:
        return rank_main(args)
    argv = sys.argv[1:] if argv is None else argv
    os.makedirs(os.path.dirname(os.path.abspath(args.out)) or ".", exist_ok=True)
    result = os.path.abspath(args.out) + ".rank0.json"
    t0 = time.monotonic()
    load = BackgroundLoad(args.background_load)
    bl = load.start()
    try:
        per_rank = run_ranks(HERE, args.nproc, ["--threads", str(args.threads), *argv],
                             result, {"OMP_NUM_THREADS": str(args.threads)})
    finally:
        bl.update(load.stop())
    if per_rank is None:
        return 1
    reps = len(per_rank[0]["times"]["gloo"])
    # Per repetition, the slowest rank's median step.
    slow = {m: [max(r["times"][m][i] for r in per_rank) * 1e3 for i in range(reps)]
            for m in MODES}
    grads_mb = 4 * (args.width * args.width + args.width) * args.layers / 2**20
    lines = [f"# {time.strftime('%Y-%m-%d %H:%M')}, {platform.node()}: {os.cpu_count()} cpus; "
             f"{platform.platform()}",
             f"# command: python benchmarks/ddp_overlap.py {' '.join(argv)} "
             f"({round(time.monotonic() - t0)} s)",
             f"# p = {args.nproc}, {args.threads} torch thread(s) per rank; MLP {args.layers} x "
             f"{args.width}, batch {args.batch}, {grads_mb:.1f} MiB of gradients in "
             f"{args.bucket_mb:g} MiB buckets; background load: "
             + (f"{bl['n']} busy processes, {bl.get('cpu_share')} of a core each" if bl["n"]
                else "none"),
             f"# step time in ms: the slowest rank's median of {args.steps} steps, median over "
             f"{reps} repetitions (min-max); largest relative parameter difference ringcoll "
             f"vs gloo: {max(r['mismatch'] for r in per_rank):.1e}",
             "",
             f"{'':>10} {'step ms':>22} {'/ gloo':>18} {'(step - compute) / compute':>28}"]
    summary = {}
    for m in MODES:
        ts = slow[m]
        ratio = [a / b for a, b in zip(ts, slow["gloo"])]
        cost = [(a - c) / c for a, c in zip(ts, slow["compute"])]
        summary[m] = {"step_ms": ts, "vs_gloo": ratio, "comm_cost": cost}
        rng = lambda xs, f: f"{f(statistics.median(xs))} ({f(min(xs))}-{f(max(xs))})"
        lines.append(f"{m:>10} {rng(ts, lambda v: f'{v:.2f}'):>22} "
                     f"{rng(ratio, lambda v: f'{v:.2f}'):>18} "
                     f"{rng(cost, lambda v: f'{v * 100:.0f}%') if m != 'compute' else '-':>28}")
    text = "\n".join(lines) + "\n"
    print(text)
    with open(args.out + ".txt", "w") as f:
        f.write(text)
    with open(args.out + ".json", "w") as f:
        json.dump({"argv": argv, "per_rank": per_rank, "summary": summary,
                   "background_load": bl}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
