"""What one small collective enqueues on the stream path, against what its schedule
needs at the least: the CPU-side count behind the GPU cells of issue 59.

    python benchmarks/stream_counts.py                         # p = 2, 3, 4
    python benchmarks/stream_counts.py --nproc 2 --out benchmarks/results/stream-counts-cpu

On the stream emulation (RINGCOLL_TRANSPORT=stream), which runs the CUDA path's
executor, waves, transport logic and algorithm choice (RINGCOLL_GPU_ALGO's default),
each rank counts per call (csrc/common/stream_stats.h): batches (on a GPU, one NCCL
group each), posts (sends and receives in them), kernels (the reducer's operations:
reductions, copies, divisions, header checks; also by kind), markers (CUDA events) and
stream waits.
Beside them, the schedule's least (from the plan the executor compiles, _C.plan_ops):
one batch per wave that moves bytes, one post per transfer, and one kernel per wave
that reduces received bytes (the executor fuses a wave's receive-reduces into the same
elements). What a call enqueues beyond that (a copy of the input a one-shot's sends
read, a separate batch for the fingerprint, an end marker) is the per-call device
work a GPU replays under CUDA graphs; NCCL's own collective is one kernel in one
group. With the fingerprint off, as on CUDA by default. The slowest rank's counts
(they agree on every rank for these schedules).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.abspath(__file__)
sys.path.insert(0, os.path.dirname(HERE))
from ranks import report, run_ranks  # noqa: E402
from vs_cpu_libs import human, parse_size  # noqa: E402

COLLECTIVES = ("allreduce", "reducescatter", "allgather")
COUNTS = ("batches", "posts", "kernels", "markers", "stream_waits")
# the kernels by kind (csrc/common/stream_stats.h): reduce, copy, scale, latch, header
KINDS = ("kernels_reduce", "kernels_copy", "kernels_scale", "kernels_latch", "kernels_header")


def least(algo, coll, p, rank, n, seg_elems):
    """The schedule's least per call for this rank: (batches, posts, kernels)."""
    from ringcoll import _C

    ops = _C.plan_ops(algo, coll, p, rank, n, seg_elems)
    moving = {op[8] for op in ops if op[0] in ("send", "recv_copy", "recv_reduce")}
    posts = sum(1 for op in ops if op[0] in ("send", "recv_copy", "recv_reduce"))
    reducing = {op[8] for op in ops if op[0] == "recv_reduce"}
    return len(moving), posts, len(reducing)


def rank_main(args) -> int:
    import torch
    import torch.distributed as dist
    import ringcoll  # noqa: F401
    from ringcoll import _C

    rank, p = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("ringcoll")
    be = dist.group.WORLD._get_backend(torch.device("cpu"))
    rows = []
    seg_elems = int(os.environ.get("RINGCOLL_GPU_CHUNK_BYTES", 8 << 20)) // 4
    for coll in COLLECTIVES:
        for size in args.sizes:
            n = max(p, size // 4 // p * p)  # whole blocks of float32 for every collective
            if coll == "allreduce":
                x = torch.ones(n)
                call = lambda: dist.all_reduce(x)
            elif coll == "reducescatter":
                inp, out = torch.ones(n), torch.empty(n // p)
                call = lambda: dist.reduce_scatter_tensor(out, inp)
            else:
                inp, out = torch.ones(n // p), torch.empty(n)
                call = lambda: dist.all_gather_into_tensor(out, inp)
            call()  # warm: the plan is compiled, staging allocated
            algo = _C.select(os.environ.get("RINGCOLL_GPU_ALGO") or _C.gpu_default(p), coll,
                             n * 4)[0]
            be.stream_stats(cuda=False, reset=True)
            for _ in range(args.calls):
                call()
            s = be.stream_stats(cuda=False)
            got = {k: s[k] / args.calls for k in COUNTS + KINDS}
            b, po, k = least(algo, coll, p, rank, n, seg_elems)
            rows.append({"collective": coll, "bytes": n * 4, "algo": algo, **got,
                         "least_batches": b, "least_posts": po, "least_kernels": k})
    return report(rows, args.result)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nproc", default="2,3,4")
    ap.add_argument("--sizes", default="8,512,4K,32K,64K,2M")
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--out", default="bench-out/stream-counts")
    ap.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.sizes = [parse_size(s) for s in args.sizes.split(",")]
    if args.rank:
        return rank_main(args)
    argv = sys.argv[1:] if argv is None else argv
    os.makedirs(os.path.dirname(os.path.abspath(args.out)) or ".", exist_ok=True)
    result = os.path.abspath(args.out) + ".rank0.json"
    lines = [f"# {time.strftime('%Y-%m-%d %H:%M')}: python benchmarks/stream_counts.py "
             + " ".join(argv),
             "# per call on the stream emulation (the CUDA path's logic), the slowest rank's; "
             "least: what the schedule needs (a batch per moving wave, a post per transfer, "
             "a kernel per reducing wave)",
             f"{'p':>2} {'collective':>13} {'bytes':>8} {'algo':>8} "
             + " ".join(f"{c:>12}" for c in COUNTS)
             + f" {'least b/p/k':>12}  kernels: reduce/copy/scale/latch/header"]
    everything = {}
    for p in (int(v) for v in args.nproc.split(",")):
        per_rank = run_ranks(HERE, p, argv, result,
                             {"RINGCOLL_TRANSPORT": "stream", "RINGCOLL_FINGERPRINT": "0"})
        if per_rank is None:
            return 1
        everything[p] = per_rank
        for i, row in enumerate(per_rank[0]):
            worst = {c: max(r[i][c] for r in per_rank) for c in COUNTS + KINDS}
            lines.append(f"{p:>2} {row['collective']:>13} {human(row['bytes']):>8} "
                         f"{row['algo']:>8} " + " ".join(f"{worst[c]:>12.2f}" for c in COUNTS)
                         + f" {row['least_batches']:>4}/{row['least_posts']}/{row['least_kernels']}"
                         + "  " + "/".join(f"{worst[k]:g}" for k in KINDS))
    text = "\n".join(lines) + "\n"
    print(text)
    with open(args.out + ".txt", "w") as f:
        f.write(text)
    with open(args.out + ".json", "w") as f:
        json.dump({"argv": argv, "rows": everything}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
