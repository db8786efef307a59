"""What a small CPU all-reduce costs before any byte moves: ringcoll's op against a
torch op that does nothing, and ringcoll's part of dist.all_reduce beyond c10d's own
layer and the op.

    python benchmarks/cpu_entry.py                  # p = 2, 8 B, 5 runs
    python benchmarks/cpu_entry.py --runs 5 --nproc 2 --out benchmarks/results/cpu-entry

Each run starts p fresh processes (float32, OMP_NUM_THREADS=1, rank r on CPU r mod
cpus) and times each call alone, in short blocks of --block calls of one column, the
columns taking turns (--rounds of them, the order rotating): warm, as a loop of calls
runs, and close enough in time that the machine's slow phases fall on each alike
(calls interleaved one by one run cold: a no-op then takes 2-3 us here). The columns:

  noop      x.zero_() on 2 elements: a torch op through the dispatcher, doing nothing
  op@1      ringcoll.ops.all_reduce_(x) on a group of this rank alone: the op's entry
  op        ringcoll.ops.all_reduce_(x) on the p ranks' group
  floor     dist.all_reduce(x) on torch's FakeProcessGroup: c10d's own layer, which
            returns at once (nothing moves)
  floor+op  the two calls above as one: c10d's layer, then the op
  dist      dist.all_reduce(x) on the p ranks' ringcoll group

A figure is the slowest rank's median over its rounds x block calls. The op's entry
ratio is op@1 / noop. Ringcoll's part of dist.all_reduce is dist - (floor+op): what
the backend adds to c10d's call beyond what the op does (the Work, its wait). Not
dist - floor - op: the ranks of a collective wait for each other, so a call costs
the slower rank's time, and c10d's Python layer varies by microseconds from call to
call (the floor column, which waits for nobody, does not pay that); floor+op pays it
as dist does. Per run and over the runs (min-max). Output: stdout, PREFIX.txt and
PREFIX.json.
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
from vs_cpu_libs import us  # noqa: E402

COLUMNS = ("noop", "op@1", "op", "floor", "floor+op", "dist")


def rank_main(args) -> int:
    import torch
    import torch.distributed as dist
    import torch.testing._internal.distributed.fake_pg  # noqa: F401  (registers "fake")
    import ringcoll  # noqa: F401
    from ringcoll import ops

    torch.set_num_threads(1)
    rank, p = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo")
    rc = dist.new_group(backend="ringcoll")
    fake = dist.new_group(backend="fake")
    # A group of one per rank (every rank makes every group, in the same order).
    alone = [dist.new_group([r], backend="ringcoll") for r in range(p)][rank]
    os.sched_setaffinity(0, {rank % (os.cpu_count() or 1)})
    x = torch.zeros(args.bytes // 4)
    y = torch.zeros(2)
    calls = {
        "noop": lambda: y.zero_(),
        "op@1": lambda: ops.all_reduce_(x, group=alone),
        "op": lambda: ops.all_reduce_(x, group=rc),
        "floor": lambda: dist.all_reduce(x, group=fake),
        "floor+op": lambda: (dist.all_reduce(x, group=fake), ops.all_reduce_(x, group=rc)),
        "dist": lambda: dist.all_reduce(x, group=rc),
    }
    fns = [calls[c] for c in COLUMNS]
    for _ in range(args.warmup):
        for f in fns:
            f()
    dist.barrier()
    clock = time.perf_counter
    ts = [[] for _ in COLUMNS]
    n = len(COLUMNS)
    for rnd in range(args.rounds):
        for j in range(n):
            k = (rnd + j) % n
            f, block = fns[k], [0.0] * args.block
            for i in range(args.block):
                t0 = clock()
                f()
                block[i] = clock() - t0
            ts[k] += block
    med = {c: statistics.median(ts[k]) * 1e6 for k, c in enumerate(COLUMNS)}
    return report(med, args.result)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--bytes", type=int, default=8, help="per rank (default 8)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=40, help="turns of every column per run")
    ap.add_argument("--block", type=int, default=500, help="calls of one column in a turn")
    ap.add_argument("--warmup", type=int, default=2000)
    ap.add_argument("--out", default="bench-out/cpu-entry")
    ap.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.rank:
        return rank_main(args)
    argv = sys.argv[1:] if argv is None else argv
    os.makedirs(os.path.dirname(os.path.abspath(args.out)) or ".", exist_ok=True)
    result = os.path.abspath(args.out) + ".rank0.json"
    t0 = time.monotonic()
    runs = []
    for _ in range(args.runs):
        per_rank = run_ranks(HERE, args.nproc, argv, result)
        if per_rank is None:
            return 1
        slow = {c: max(r[c] for r in per_rank) for c in COLUMNS}
        slow["entry_ratio"] = slow["op@1"] / slow["noop"]
        slow["part_us"] = slow["dist"] - slow["floor+op"]
        runs.append(slow)
    lines = [f"# {time.strftime('%Y-%m-%d %H:%M')}, {platform.node()}: {os.cpu_count()} cpus; "
             f"{platform.platform()}",
             f"# command: python benchmarks/cpu_entry.py {' '.join(argv)} "
             f"({round(time.monotonic() - t0)} s)",
             f"# p = {args.nproc}, {args.bytes} B per rank, {args.rounds} rounds of {args.block} "
             "calls of each column per run; us per call, the slowest rank's median",
             "",
             f"{'run':>4} " + " ".join(f"{c:>9}" for c in COLUMNS)
             + f" {'op@1/noop':>10} {'part':>8}"]
    for i, r in enumerate(runs, 1):
        lines.append(f"{i:>4} " + " ".join(f"{us(r[c]):>9}" for c in COLUMNS)
                     + f" {r['entry_ratio']:>10.2f} {r['part_us']:>8.2f}")
    ratios = [r["entry_ratio"] for r in runs]
    parts = [r["part_us"] for r in runs]
    lines += ["",
              f"# the op's entry, op@1 / noop: {min(ratios):.2f}-{max(ratios):.2f} over "
              f"{len(runs)} runs",
              f"# ringcoll's part of dist.all_reduce, dist - (floor+op): {min(parts):.2f} to "
              f"{max(parts):.2f} us over {len(runs)} runs"]
    text = "\n".join(lines) + "\n"
    print(text)
    with open(args.out + ".txt", "w") as f:
        f.write(text)
    with open(args.out + ".json", "w") as f:
        json.dump({"argv": argv, "runs": runs}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
