"""nccl-tests-style benchmark: ringcoll against the stock backend, side by side.

    python -m ringcoll.bench                       # default device, a few processes
    python -m ringcoll.bench -b 8 -e 64M -f 2 --nproc 2,4 -n 10
    torchrun --nproc_per_node=4 -m ringcoll.bench  # same, under torchrun

Sweeps sizes for all-reduce, reduce-scatter and all-gather; runs ringcoll and the
baseline (gloo on CPU; NCCL and NCCL with NCCL_ALGO=Ring on GPU) in the same run;
prints a table per backend and a comparison table (ringcoll busbw / baseline
busbw); writes JSON, CSV and a PNG plot.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
from datetime import timedelta

from . import records, report


def default_device() -> str:
    import torch

    import ringcoll

    if torch.cuda.is_available() and ringcoll.build_info().get("cuda"):
        return "cuda"
    return "cpu"


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m ringcoll.bench",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("-b", "--minbytes", type=records.parse_size, default=records.parse_size("8"),
                    help="smallest size (bytes; K/M/G suffixes), default 8")
    ap.add_argument("-e", "--maxbytes", type=records.parse_size,
                    default=records.parse_size("16M"), help="largest size, default 16M")
    ap.add_argument("-f", "--stepfactor", type=float, default=4.0,
                    help="multiply the size by this each step, default 4")
    ap.add_argument("-d", "--dtype", default="float32", choices=sorted(
        ["float32", "float64", "float16", "bfloat16"]))
    ap.add_argument("-o", "--op", default="sum", choices=records.OPS)
    ap.add_argument("-n", "--iters", type=int, default=5, help="calls per timed region")
    ap.add_argument("-w", "--warmup", type=int, default=2, help="untimed calls first")
    ap.add_argument("-R", "--runs", type=int, default=3,
                    help="timed regions per size; the median is reported")
    ap.add_argument("-c", "--check", type=int, default=1,
                    help="1: count wrong elements (#wrong) after timing, 0: skip")
    ap.add_argument("--collectives", default="all_reduce,reduce_scatter,all_gather",
                    help="comma separated: " + ",".join(records.RECORDS))
    ap.add_argument("--backends", default=None,
                    help="comma separated; default ringcoll,gloo (cpu) or "
                         "ringcoll,nccl,nccl-ring (cuda)")
    ap.add_argument("--nproc", default=None,
                    help="world sizes to spawn, comma separated; default 2,4 on cpu, "
                         "all visible GPUs on cuda (ignored under torchrun)")
    ap.add_argument("--device", default=None, choices=["cpu", "cuda"])
    ap.add_argument("--algo", default=None, help="RINGCOLL_ALGO for the ringcoll group")
    ap.add_argument("--json", default="bench-out/ringcoll-bench.json")
    ap.add_argument("--csv", default="bench-out/ringcoll-bench.csv")
    ap.add_argument("--plot", default="bench-out/ringcoll-bench.png")
    args = ap.parse_args(argv)
    args.device = args.device or default_device()
    args.collectives = [c.strip() for c in args.collectives.split(",") if c.strip()]
    for c in args.collectives:
        if c not in records.RECORDS:
            ap.error(f"unknown collective {c!r} (known: {', '.join(records.RECORDS)})")
    default_backends = "ringcoll,gloo" if args.device == "cpu" else "ringcoll,nccl,nccl-ring"
    args.backends = [b.strip() for b in (args.backends or default_backends).split(",")]
    if args.nproc is None:
        if args.device == "cuda":
            import torch
            args.nproc = str(max(1, torch.cuda.device_count()))
        else:
            args.nproc = "2,4"
    args.nproc = [int(x) for x in args.nproc.split(",")]
    records.sweep(args.minbytes, args.maxbytes, args.stepfactor)  # validates
    return args


def _init_world(rank, p, store_path, device):
    import torch
    import torch.distributed as dist

    import ringcoll  # noqa: F401 - registers the backend

    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    if device == "cuda":
        torch.cuda.set_device(rank % torch.cuda.device_count())
    kw = {"init_method": f"file://{store_path}", "rank": rank, "world_size": p} if store_path else {}
    # The default group is gloo: it carries the benchmark's own barriers and
    # timing reductions, never the measured traffic.
    dist.init_process_group("gloo", timeout=timedelta(minutes=10), **kw)
    return dist.new_group(backend="gloo")


def _spawned(rank, p, store_path, args, env, q):
    os.environ.update(env)
    try:
        import torch.distributed as dist

        from . import runner

        meta = _init_world(rank, p, store_path, args.device)
        rows = runner.sweep(args, args.device, meta)
        dist.destroy_process_group()
        q.put((rank, "ok", rows if rank == 0 else None))
    except BaseException:  # noqa: BLE001
        import traceback

        q.put((rank, "error", traceback.format_exc()))


def _spawn_world(p, args, backends, env):
    import copy
    import multiprocessing as mp

    a = copy.copy(args)
    a.backends = backends
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    with tempfile.TemporaryDirectory(prefix="ringcoll-bench-") as tmp:
        procs = [ctx.Process(target=_spawned, args=(r, p, os.path.join(tmp, "store"), a, env, q))
                 for r in range(p)]
        for pr in procs:
            pr.start()
        got = [q.get(timeout=3600) for _ in range(p)]
        for pr in procs:
            pr.join()
    errors = [payload for _, status, payload in got if status == "error"]
    if errors:
        raise RuntimeError("benchmark rank failed:\n" + "\n".join(errors))
    return next(payload for rank, _, payload in got if rank == 0)


def machine_meta(args, nprocs):
    import torch

    import ringcoll

    mem = None
    try:
        with open("/proc/meminfo") as f:
            mem = f.readline().split()[1] + " kB"
    except OSError:
        pass
    return {"command": " ".join(["python -m ringcoll.bench"] + sys.argv[1:]),
            "host_cpus": os.cpu_count(), "memory": mem, "platform": platform.platform(),
            "torch": torch.__version__, "ringcoll_build": ringcoll.build_info(),
            "device": args.device, "nproc": nprocs, "dtype": args.dtype, "op": args.op,
            "iters": args.iters, "warmup": args.warmup, "runs": args.runs}


def emit(rows, args, meta):
    print(report.tables(rows))
    comp = report.comparison_table(rows)
    if comp:
        print("# ringcoll busbw / baseline busbw (in-place where the collective has it)")
        print(comp)
    for path in (args.json, args.csv, args.plot):
        if path and os.path.dirname(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
    if args.json:
        report.write_json(args.json, rows, meta)
    if args.csv:
        report.write_csv(args.csv, rows)
    if args.plot:
        report.write_plot(args.plot, rows, title=f"{args.device}, {args.dtype} {args.op}")
    wrote = [p for p in (args.json, args.csv, args.plot) if p]
    if wrote:
        print("# wrote " + ", ".join(wrote))
    return 1 if any((r[k] or {}).get("wrong", 0) for r in rows for k in ("oop", "ip")) else 0


def main(argv=None) -> int:
    args = parse_args(argv)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # under torchrun
        import torch.distributed as dist

        from . import runner

        backends = [b for b in args.backends
                    if b != "nccl-ring" or os.environ.get("NCCL_ALGO", "").lower() == "ring"]
        args.backends = backends
        meta_group = _init_world(int(os.environ.get("LOCAL_RANK", os.environ["RANK"])),
                                 int(os.environ["WORLD_SIZE"]), None, args.device)
        rows = runner.sweep(args, args.device, meta_group)
        rc = 0
        if dist.get_rank() == 0:
            rc = emit(rows, args, machine_meta(args, [dist.get_world_size()]))
        dist.destroy_process_group()
        return rc
    rows = []
    for p in args.nproc:
        # NCCL reads NCCL_ALGO once per process: the Ring-only baseline runs in a world
        # of its own, right after the others, in the same invocation.
        same = [b for b in args.backends if b != "nccl-ring"]
        if same:
            rows += _spawn_world(p, args, same, {})
        if "nccl-ring" in args.backends:
            rows += _spawn_world(p, args, ["nccl-ring"], {"NCCL_ALGO": "Ring"})
    return emit(rows, args, machine_meta(args, args.nproc))
