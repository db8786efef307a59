"""The timeline of one ring all-reduce: 4 local ranks, 16 MiB float32, traced.

    python benchmarks/trace_ring.py [--nproc 4] [--bytes 16M] [--calls 5]
                                    [--out benchmarks/results/trace-ring-4x]

Runs `--calls` all-reduces with RINGCOLL_TRACE set (the first ones warm the shared
memory and the caches), then `python -m ringcoll.trace` on the directory for the
last one: OUT.png is its timeline, OUT.txt the tool's report (and this command),
OUT-trace/ the per-rank files and merged.json (open it in Perfetto; not kept in
the repository: rerun to get them).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import sys
import tempfile
from datetime import timedelta

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def worker(rank, world, store, nbytes, calls, trace_dir):
    os.environ["RINGCOLL_TRACE"] = trace_dir
    import torch
    import torch.distributed as dist

    import ringcoll  # noqa: F401

    torch.set_num_threads(1)
    dist.init_process_group("ringcoll", init_method=f"file://{store}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=120))
    t = torch.ones(nbytes // 4)
    for _ in range(calls):
        dist.all_reduce(t)
    assert t[0].item() == world ** calls
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--bytes", default="16M")
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(HERE, "benchmarks/results/trace-ring-4x"))
    args = ap.parse_args()
    sys.path.insert(0, HERE)
    from ringcoll.trace.__main__ import main as trace_main
    from ringcoll.bench.records import parse_size

    import torch.multiprocessing as mp

    nbytes = parse_size(args.bytes)
    trace_dir = args.out + "-trace"
    shutil.rmtree(trace_dir, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(args.nproc, os.path.join(tmp, "store"), nbytes, args.calls,
                               trace_dir), nprocs=args.nproc)
    report = io.StringIO()
    with contextlib.redirect_stdout(report):
        trace_main([trace_dir, "--collective", str(args.calls), "--png", args.out + ".png",
                    "--out", os.path.join(trace_dir, "merged.json")])
    cmd = " ".join(["python benchmarks/trace_ring.py"] + sys.argv[1:])
    text = (f"command: {cmd}\n({args.nproc} ranks, {args.calls} all-reduces of {nbytes} B "
            f"float32 with RINGCOLL_TRACE; the report and the PNG are of the last one)\n\n"
            + report.getvalue().replace(HERE + "/", ""))
    print(text)
    with open(args.out + ".txt", "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
