"""nccl-tests-style benchmark: ringcoll against the stock backend, side by side.

    python -m ringcoll.bench                       # default device, a few processes
    python -m ringcoll.bench -b 8 -e 64M -f 2 --nproc 2,4 --budget 1 -R 5
    torchrun --nproc_per_node=4 -m ringcoll.bench  # same, under torchrun
    python -m ringcoll.bench --share-gpu --nproc 2,4 -e 128M  # ranks share one GPU

Sweeps sizes for all-reduce, reduce-scatter and all-gather; runs ringcoll and the
baseline (gloo on CPU; NCCL and NCCL with NCCL_ALGO=Ring on GPU) in the same run;
prints a table per backend and a comparison table (ringcoll busbw / baseline
busbw); writes JSON, CSV and a PNG plot.

Method (ringcoll/bench/runner.py has the details and the reasons): every call is
issued and waited for on its own and timed alone. Per point (size, collective,
placement, backend): -w warm-up calls estimate the cost of a call; before each of
the -R runs the ranks agree on how many calls fill what is left of --budget (at
least -n, at most --max-calls per run); each run's figure is the median per-call
time, the slowest rank's per run; a point is the median over runs, with the
min-max of the runs as its spread. Backends alternate run by run. Rank 0 also
measures the single-core memcpy rate (64 MiB float32 copy_, one thread), printed
and plotted as the physical reference.
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
    ap = argparse.ArgumentParser(prog="python -m ringcoll.bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-b", "--minbytes", type=records.parse_size, default=records.parse_size("8"),
                    help="smallest size (bytes; K/M/G suffixes), default 8")
    ap.add_argument("-e", "--maxbytes", type=records.parse_size,
                    default=records.parse_size("16M"), help="largest size, default 16M")
    ap.add_argument("-f", "--stepfactor", type=float, default=4.0,
                    help="multiply the size by this each step, default 4")
    ap.add_argument("-d", "--dtype", default="float32", choices=sorted(
        ["float32", "float64", "float16", "bfloat16"]))
    ap.add_argument("-o", "--op", default="sum", choices=records.OPS)
    ap.add_argument("--budget", type=float, default=0.5, metavar="SECONDS",
                    help="time to spend on the timed calls of one point (size, collective, "
                         "placement, backend), all runs together; default 0.5")
    ap.add_argument("-R", "--runs", type=int, default=5,
                    help="timed runs per point; the median over runs is reported and their "
                         "min-max as the spread; default 5")
    ap.add_argument("-n", "--iters", type=int, default=5, metavar="MIN_CALLS",
                    help="minimum timed calls per run, even past the budget; default 5")
    ap.add_argument("--max-calls", type=int, default=10000,
                    help="maximum timed calls per run; default 10000")
    ap.add_argument("-w", "--warmup", type=int, default=5,
                    help="warm-up calls per point (at least 1); their mean per-call time "
                         "(the first left out) sets the first run's calls; default 5")
    ap.add_argument("-c", "--check", type=int, default=1,
                    help="1: count wrong elements (#wrong) after timing, 0: skip")
    ap.add_argument("--collectives", default="all_reduce,reduce_scatter,all_gather",
                    help="comma separated: " + ",".join(records.RECORDS))
    ap.add_argument("--backends", default=None,
                    help="comma separated; default ringcoll,gloo (cpu) or "
                         "ringcoll,nccl,nccl-ring (cuda)")
    ap.add_argument("--nproc", default=None,
                    help="world sizes to spawn, comma separated; default 2,4 on cpu, "
                         "all visible GPUs on cuda, 2,4 with --share-gpu on a machine "
                         "with one GPU (ignored under torchrun)")
    ap.add_argument("--device", default=None, choices=["cpu", "cuda"])
    ap.add_argument("--share-gpu", action="store_true",
                    help="cuda: let the ranks share the visible GPUs (ringcoll/gpu.py: a "
                         "per-rank NCCL_HOSTID puts every backend on NCCL's socket "
                         "transport over loopback). A like-for-like comparison of "
                         "algorithms and per-call overheads on one transport, not of "
                         "NVLink speed")
    ap.add_argument("--algo", default=None, help="RINGCOLL_ALGO for the ringcoll group")
    ap.add_argument("--transport", default="auto", choices=["auto", "shm", "gloo"],
                    help="ringcoll's transport (ringcoll.Options(transport=...)); default auto")
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
            ngpu = torch.cuda.device_count()
            if ngpu < 2:  # one GPU: several ranks share it (see --share-gpu)
                args.share_gpu, args.nproc = True, "2,4"
            else:
                args.nproc = str(ngpu)
        else:
            args.nproc = "2,4"
    args.nproc = [int(x) for x in args.nproc.split(",")]
    if args.device == "cuda" and not args.share_gpu:
        import torch
        if max(args.nproc) > torch.cuda.device_count():
            ap.error(f"--nproc {max(args.nproc)} > {torch.cuda.device_count()} visible GPUs; "
                     "add --share-gpu to let ranks share a GPU over NCCL's socket transport")
    if args.runs < 1 or args.iters < 1 or args.max_calls < args.iters or args.budget < 0:
        ap.error(f"need -R >= 1, 1 <= -n <= --max-calls, --budget >= 0 (got -R {args.runs}, "
                 f"-n {args.iters}, --max-calls {args.max_calls}, --budget {args.budget})")
    records.sweep(args.minbytes, args.maxbytes, args.stepfactor)  # validates
    return args


def _init_world(rank, p, store_path, device):
    import torch
    import torch.distributed as dist

    import ringcoll  # noqa: F401 - registers the backend

    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    if device == "cuda":
        from ringcoll.gpu import device_for
        torch.cuda.set_device(device_for(rank, torch.cuda.device_count()))
    kw = {"init_method": f"file://{store_path}", "rank": rank, "world_size": p} if store_path else {}
    # The default group is gloo: it carries the benchmark's own barriers and
    # timing reductions, never the measured traffic.
    dist.init_process_group("gloo", timeout=timedelta(minutes=10), **kw)
    return dist.new_group(backend="gloo")


def _world(args, meta):
    """One world's share of the run, on every rank: the memcpy reference (rank 0's
    figure, nan elsewhere), then the sweep."""
    from . import runner

    gbps = runner.reference(meta)
    return runner.sweep(args, args.device, meta), gbps


def _spawned(rank, p, store_path, args, env, q, world=None):
    os.environ.update(env)
    if args.device == "cuda" and getattr(args, "share_gpu", False):
        from ringcoll.gpu import share_gpu_env
        os.environ.update(share_gpu_env(rank))
    try:
        import torch.distributed as dist

        rows, gbps = (world or _world)(args, _init_world(rank, p, store_path, args.device))
        dist.destroy_process_group()
        q.put((rank, "ok", (rows, gbps) if rank == 0 else None))
    except BaseException:  # noqa: BLE001
        import traceback

        q.put((rank, "error", traceback.format_exc()))


def _spawn_world(p, args, backends, env, world=None):
    """(rows, memcpy GB/s) of a world of p spawned processes running `backends`;
    `world(args, meta_group)` (a module-level function, default _world) is what
    each rank runs, returning (rows, gbps) with rank 0's kept."""
    import copy
    import multiprocessing as mp

    a = copy.copy(args)
    a.backends = backends
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    with tempfile.TemporaryDirectory(prefix="ringcoll-bench-") as tmp:
        procs = [ctx.Process(target=_spawned,
                             args=(r, p, os.path.join(tmp, "store"), a, env, q, world))
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


def machine_meta(args, nprocs, memcpy):
    """The JSON meta; `memcpy` maps a world's label to its memcpy GB/s."""
    import statistics

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
            "transport": args.transport, "algo": args.algo, "budget_s": args.budget,
            "runs": args.runs, "min_calls": args.iters, "max_calls": args.max_calls,
            "warmup": args.warmup, "share_gpu": getattr(args, "share_gpu", False),
            "method": "per-call synchronous timing; per run the slowest rank's median "
                      "per-call time; per point the median over runs, spread = min-max",
            "memcpy_gbps": statistics.median(memcpy.values()) if memcpy else None,
            "memcpy_gbps_per_world": memcpy}


def emit(rows, args, meta):
    per_world = ", ".join(f"{k}: {v:.2f}" for k, v in meta["memcpy_gbps_per_world"].items())
    print(f"# physical reference: single-core memcpy (64 MiB float32 copy_, 1 thread) "
          f"{meta['memcpy_gbps']:.2f} GB/s ({per_world})")
    if meta.get("share_gpu"):
        print("# --share-gpu: the ranks share the GPU and every backend runs over NCCL's "
              "socket transport on loopback; ratios compare algorithms and per-call "
              "overheads on one transport, not NVLink speed")
    print(f"# per point: median over {args.runs} runs of the slowest rank's per-call median, "
          f"min-max of the runs; budget {args.budget:g} s, {args.iters}-{args.max_calls} "
          f"calls per run; ringcoll transport {args.transport}")
    if args.device == "cuda":
        print("# a call's time (cuda): CUDA events on the caller's stream around issue and "
              "wait, calls back to back; an event's time is when the GPU reaches it, so "
              "host work a backend does before its first GPU command may fall outside "
              "(benchmarks/gpu_host_cost.py times the same calls on the host clock)")
    print()
    print(report.tables(rows))
    comp = report.comparison_table(rows)
    if comp:
        print("# ringcoll busbw / baseline busbw = baseline time / ringcoll time (in-place "
              "where the collective has it); min-max over the paired runs")
        print(comp)
    for path in (args.json, args.csv, args.plot):
        if path and os.path.dirname(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
    if args.json:
        report.write_json(args.json, rows, meta)
    if args.csv:
        report.write_csv(args.csv, rows)
    if args.plot:
        report.write_plot(args.plot, rows, memcpy_gbps=meta["memcpy_gbps"],
                          title=f"{args.device}, {args.dtype} {args.op}, "
                                f"ringcoll transport {args.transport}")
    wrote = [p for p in (args.json, args.csv, args.plot) if p]
    if wrote:
        print("# wrote " + ", ".join(wrote))
    return 1 if any((r[k] or {}).get("wrong", 0) for r in rows for k in ("oop", "ip")) else 0


def main(argv=None) -> int:
    args = parse_args(argv)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # under torchrun
        import torch.distributed as dist

        backends = [b for b in args.backends
                    if b != "nccl-ring" or os.environ.get("NCCL_ALGO", "").lower() == "ring"]
        args.backends = backends
        meta_group = _init_world(int(os.environ.get("LOCAL_RANK", os.environ["RANK"])),
                                 int(os.environ["WORLD_SIZE"]), None, args.device)
        rows, gbps = _world(args, meta_group)
        rc = 0
        if dist.get_rank() == 0:
            p = dist.get_world_size()
            rc = emit(rows, args, machine_meta(args, [p], {f"p={p}": gbps}))
        dist.destroy_process_group()
        return rc
    rows, memcpy = [], {}
    for p in args.nproc:
        # NCCL reads NCCL_ALGO once per process: the Ring-only baseline runs in a world
        # of its own, right after the others, in the same invocation.
        same = [b for b in args.backends if b != "nccl-ring"]
        if same:
            got, memcpy[f"p={p}"] = _spawn_world(p, args, same, {})
            rows += got
        if "nccl-ring" in args.backends:
            got, memcpy[f"p={p} nccl-ring"] = _spawn_world(p, args, ["nccl-ring"],
                                                           {"NCCL_ALGO": "Ring"})
            rows += got
    return emit(rows, args, machine_meta(args, args.nproc, memcpy))
