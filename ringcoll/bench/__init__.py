"""nccl-tests-style benchmark: ringcoll against the stock backend, side by side.

    python -m ringcoll.bench                       # default device, a few processes
    python -m ringcoll.bench -b 8 -e 64M -f 2 --nproc 2,4 --budget 1 -R 5
    torchrun --nproc_per_node=4 -m ringcoll.bench  # same, under torchrun
    python -m ringcoll.bench --share-gpu --nproc 2,4 -e 128M  # ranks share one GPU

Sweeps sizes for all-reduce, reduce-scatter and all-gather (--collectives: also
broadcast, reduce, gather, scatter, all-to-all, or all); runs ringcoll and the
baseline (gloo on CPU; NCCL and NCCL with NCCL_ALGO=Ring on GPU) in the same run;
prints what every column means, a table per backend and a comparison table
(baseline time / ringcoll time = ringcoll busbw / baseline busbw: above 1, ringcoll
is faster; a baseline that is ringcoll with other options, ringcoll+algo=x, is then
the slower); writes JSON, CSV and a PNG plot (busbw against size, higher is better).

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


# Argument types: each raises argparse.ArgumentTypeError, which argparse prints as one
# usage line naming the option ("argument -f/--stepfactor: ...").
def _size(text):
    try:
        n = records.parse_size(text)
    except (ValueError, IndexError):
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(
            f"expected a size in bytes >= 1, with an optional K, M or G suffix (8, 64K, 1M), "
            f"got {text!r}")
    return n


def _factor(text):
    try:
        f = float(text)
    except ValueError:
        f = float("nan")
    if not f > 1 or f == float("inf"):
        raise argparse.ArgumentTypeError(
            f"expected a number > 1 (each size is the previous one times it), got {text!r}")
    return f


def _at_least(low):
    def parse(text):
        try:
            n = int(text)
        except ValueError:
            n = low - 1
        if n < low:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {low}, got {text!r}")
        return n
    parse.__name__ = f"integer >= {low}"
    return parse


def _seconds(text):
    try:
        t = float(text)
    except ValueError:
        t = -1.0
    if not 0 <= t < float("inf"):
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {text!r}")
    return t


def _nproc(text):
    try:
        sizes = [int(x) for x in text.split(",")]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(
            f"expected world sizes >= 1 separated by commas (2 or 2,4), got {text!r}")
    return sizes


def _names(known):
    def parse(text):
        names = [c.strip() for c in text.split(",") if c.strip()]
        bad = [c for c in names if c not in known]
        if bad or not names:
            raise argparse.ArgumentTypeError(
                f"expected names from {', '.join(known)} separated by commas, got {text!r}")
        return names
    return parse


def _collectives(text):
    """Collective names (torch's or c10d's), or 'all'."""
    from ..check import torch_name

    if text.strip() == "all":
        return list(records.RECORDS)
    return _names(list(records.RECORDS))(",".join(torch_name(c.strip())
                                                  for c in text.split(",")))


BASELINES = ("gloo", "nccl", "nccl-ring")


def _backends(text):
    names = [b.strip() for b in text.split(",") if b.strip()]
    for b in names or [""]:
        if b.startswith("ringcoll+"):
            from . import runner
            try:
                runner.ringcoll_variant(b)
            except (ValueError, TypeError) as e:
                raise argparse.ArgumentTypeError(str(e)) from None
        elif b not in ("ringcoll",) + BASELINES:
            raise argparse.ArgumentTypeError(
                f"expected names from ringcoll, {', '.join(BASELINES)} (or ringcoll+FIELD=VALUE, "
                f"a ringcoll.Options field) separated by commas, got {text!r}")
    return names


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose errors are one line: "prog: error: argument -f/--stepfactor:
    expected ...", without the long usage block (--help has it)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (--help lists the options)\n")


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The module docstring as written, and wider option columns."""

    def __init__(self, prog):
        super().__init__(prog, max_help_position=30)


def parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="python -m ringcoll.bench", description=__doc__,
                 formatter_class=_HelpFormatter)
    ap.add_argument("-b", "--minbytes", type=_size, default=8, metavar="SIZE",
                    help="smallest size in bytes (K/M/G suffixes: 2^10, 2^20, 2^30); default 8")
    ap.add_argument("-e", "--maxbytes", type=_size, default=16 << 20, metavar="SIZE",
                    help="largest size; the sweep stops at the last size not above it; "
                         "default 16M")
    ap.add_argument("-f", "--stepfactor", type=_factor, default=4.0, metavar="FACTOR",
                    help="multiply the size by this each step (> 1); default 4")
    ap.add_argument("-d", "--dtype", default="float32", metavar="TYPE",
                    choices=["bfloat16", "float16", "float32", "float64"],
                    help="element type: bfloat16, float16, float32 or float64; default float32")
    ap.add_argument("-o", "--op", default="sum", choices=records.OPS, metavar="OP",
                    help="the reduction of all-reduce and reduce-scatter: "
                         + ", ".join(records.OPS) + "; default sum")
    ap.add_argument("--budget", type=_seconds, default=0.5, metavar="SECONDS",
                    help="time to spend on the timed calls of one point (size, collective, "
                         "placement, backend), all runs together; default 0.5")
    ap.add_argument("-R", "--runs", type=_at_least(1), default=5,
                    help="timed runs per point; the median over runs is reported and their "
                         "min-max as the spread; default 5")
    ap.add_argument("-n", "--iters", type=_at_least(1), default=5, metavar="MIN_CALLS",
                    help="minimum timed calls per run, even past the budget; default 5")
    ap.add_argument("--max-calls", type=_at_least(1), default=10000, metavar="N",
                    help="maximum timed calls per run (>= -n); default 10000")
    ap.add_argument("-w", "--warmup", type=_at_least(1), default=5, metavar="N",
                    help="warm-up calls per point; their mean per-call time (the first left "
                         "out) sets the first run's calls; default 5")
    ap.add_argument("-c", "--check", type=int, default=1, choices=[0, 1],
                    help="1: count wrong elements (#wrong) after timing, 0: skip; default 1")
    ap.add_argument("--collectives", type=_collectives, default=list(records.DEFAULT),
                    metavar="NAMES",
                    help="comma separated, from " + ", ".join(records.RECORDS) + " (c10d's "
                         "names too), or all; default " + ",".join(records.DEFAULT))
    ap.add_argument("--backends", type=_backends, default=None, metavar="NAMES",
                    help="comma separated, from ringcoll, " + ", ".join(BASELINES) + " and "
                         "ringcoll+FIELD=VALUE (a variant with a ringcoll.Options field set, "
                         "e.g. ringcoll+fingerprint=0); default ringcoll,gloo on cpu, "
                         "ringcoll,nccl,nccl-ring on cuda")
    ap.add_argument("--nproc", type=_nproc, default=None, metavar="P[,P...]",
                    help="world sizes to spawn, comma separated; default 2,4 on cpu, "
                         "all visible GPUs on cuda, 2,4 with --share-gpu on a machine "
                         "with one GPU (ignored under torchrun)")
    ap.add_argument("--device", default=None, choices=["cpu", "cuda"],
                    help="where the tensors live; default cuda when torch sees a GPU and "
                         "ringcoll is the CUDA variant, else cpu")
    ap.add_argument("--share-gpu", action="store_true",
                    help="cuda: let the ranks share the visible GPUs (ringcoll/gpu.py: a "
                         "per-rank NCCL_HOSTID puts every backend on NCCL's socket "
                         "transport over loopback). A like-for-like comparison of "
                         "algorithms and per-call overheads on one transport, not of "
                         "NVLink speed; default off, on when --nproc is left out on a "
                         "machine with one GPU")
    ap.add_argument("--algo", default=None,
                    help="RINGCOLL_ALGO for the ringcoll group (an algorithm name, a "
                         "per-collective selection or auto; docs/KNOBS.md); default: the "
                         "environment's RINGCOLL_ALGO, else ring")
    ap.add_argument("--transport", default="auto", choices=["auto", "shm", "gloo", "stream"],
                    help="ringcoll's transport (ringcoll.Options(transport=...); stream: the "
                         "CPU emulation of the CUDA path); default auto")
    ap.add_argument("-G", "--graph", type=int, default=0, metavar="K",
                    help="besides each eager measurement, one of K calls captured in a graph "
                         "and replayed (nccl-tests' -G): time per call = replay time / K; "
                         "CUDA: torch.cuda.graph for every backend; cpu: ringcoll with "
                         "--transport stream (ringcoll.graphs), other backends say why not; "
                         "default 0 (eager only)")
    ap.add_argument("--out", default="bench-out", metavar="DIR",
                    help="where --json, --csv and --plot write when they are not given: "
                         "DIR/ringcoll-bench.json, .csv and .png; default %(default)s")
    ap.add_argument("--json", default=None, metavar="PATH",
                    help="every row, the comparison and the machine, as JSON; '' for none; "
                         "default bench-out/ringcoll-bench.json (in --out's folder)")
    ap.add_argument("--csv", default=None, metavar="PATH",
                    help="one line per row; '' for none; default bench-out/ringcoll-bench.csv (in --out's folder)")
    ap.add_argument("--plot", default=None, metavar="PATH",
                    help="busbw against size, one panel per collective (needs matplotlib); "
                         "'' for none; default bench-out/ringcoll-bench.png (in --out's folder)")
    return ap


def parse_args(argv=None):
    ap = parser()
    args = ap.parse_args(argv)
    _check_args(ap, args)
    return args


def _check_args(ap, args):
    """What one argument alone cannot tell: combinations, and what this machine, this
    torch and this build of ringcoll can run. Each failure is one usage line."""
    import torch
    import torch.distributed as dist

    import ringcoll

    for key, ext in (("json", "json"), ("csv", "csv"), ("plot", "png")):
        if getattr(args, key) is None:
            setattr(args, key, os.path.join(args.out, f"ringcoll-bench.{ext}"))
    if args.maxbytes < args.minbytes:
        ap.error(f"argument -e/--maxbytes: {args.maxbytes} is below -b/--minbytes "
                 f"{args.minbytes}")
    if args.max_calls < args.iters:
        ap.error(f"argument --max-calls: {args.max_calls} is below -n/--iters {args.iters}")
    if args.device is None:
        args.device = default_device()
    elif args.device == "cuda" and not torch.cuda.is_available():
        ap.error(f"argument --device: cuda, but torch {torch.__version__} sees no GPU")
    elif args.device == "cuda" and not ringcoll.build_info().get("cuda"):
        ap.error("argument --device: cuda, but this ringcoll is the CPU variant (rebuild it "
                 "against a CUDA torch with nvcc and NCCL present; README)")
    default_backends = ["ringcoll", "gloo"] if args.device == "cpu" else \
        ["ringcoll", "nccl", "nccl-ring"]
    args.backends = args.backends or default_backends
    for b in args.backends:
        if not b.startswith("nccl"):
            continue
        if not dist.is_nccl_available():
            ap.error(f"argument --backends: {b} needs NCCL, which torch {torch.__version__} "
                     "does not have (a CPU build); on cpu the baseline is gloo")
        if args.device != "cuda":
            ap.error(f"argument --backends: {b} runs on CUDA tensors, not on --device "
                     f"{args.device}")
    if args.algo is not None:
        from ..model import auto

        if not auto.wants_auto(args.algo):  # auto is resolved per world, in the ranks
            try:
                ringcoll._C.knobs(ringcoll.Options(algo=args.algo).overrides())
            except (RuntimeError, ValueError) as e:
                ap.error(f"argument --algo: {_first_line(e)}")
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            ap.error("argument --plot: needs matplotlib (pip install matplotlib), or --plot '' "
                     "for no plot")
    if args.nproc is None:
        if args.device == "cuda":
            ngpu = torch.cuda.device_count()
            if ngpu < 2:  # one GPU: several ranks share it (see --share-gpu)
                args.share_gpu, args.nproc = True, [2, 4]
            else:
                args.nproc = [ngpu]
        else:
            args.nproc = [2, 4]
    if args.device == "cuda" and not args.share_gpu:
        if max(args.nproc) > torch.cuda.device_count():
            ap.error(f"argument --nproc: {max(args.nproc)} > {torch.cuda.device_count()} "
                     "visible GPUs; add --share-gpu to let ranks share a GPU over NCCL's "
                     "socket transport")


def _first_line(e: BaseException) -> str:
    """An exception as one line: the first line of its message (torch's C++ errors
    append a stack), without ringcoll's own prefix."""
    text = (str(e).strip().splitlines() or [type(e).__name__])[0]
    return text


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
    except BaseException as e:  # noqa: BLE001
        import traceback

        q.put((rank, "error", (f"{type(e).__name__}: {_first_line(e)}", traceback.format_exc())))


class RankError(RuntimeError):
    """Ranks of a spawned world failed. `errors` holds (rank, one line, traceback) per
    failed rank; str() is every traceback (ringcoll.model shows it whole), and
    `summary()` one line for a user."""

    def __init__(self, p, errors, stopped):
        self.p, self.errors, self.stopped = p, errors, stopped
        super().__init__("benchmark rank failed:\n" + "\n".join(tb for _, _, tb in errors))

    def summary(self) -> str:
        lines = {}
        for rank, line, _ in self.errors:
            lines.setdefault(line, []).append(rank)
        parts = []
        for line, ranks in lines.items():
            who = "every rank" if len(ranks) == self.p else \
                "rank " + ",".join(str(r) for r in sorted(ranks))
            parts.append(f"{who} of {self.p}: {line}")
        return "; ".join(parts)


# After the first rank reports an error, how long the others get to report theirs
# before they are stopped (a rank left waiting for a failed peer would otherwise
# wait out the group's 10-minute timeout).
ERROR_GRACE_S = 10.0


def _spawn_world(p, args, backends, env, world=None):
    """(rows, memcpy GB/s) of a world of p spawned processes running `backends`;
    `world(args, meta_group)` (a module-level function, default _world) is what
    each rank runs, returning (rows, gbps) with rank 0's kept. Raises RankError when
    a rank raises or dies."""
    import copy
    import multiprocessing as mp
    import queue
    import time

    a = copy.copy(args)
    a.backends = backends
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    got, errors = {}, []
    with tempfile.TemporaryDirectory(prefix="ringcoll-bench-") as tmp:
        procs = [ctx.Process(target=_spawned,
                             args=(r, p, os.path.join(tmp, "store"), a, env, q, world))
                 for r in range(p)]
        for pr in procs:
            pr.start()
        deadline = time.monotonic() + 3600
        while len(got) < p and time.monotonic() < deadline:
            try:
                rank, status, payload = q.get(timeout=0.5)
            except queue.Empty:
                for r, pr in enumerate(procs):  # a rank that died without a word
                    if r not in got and pr.exitcode not in (None, 0):
                        got[r] = None
                        errors.append((r, f"exited with code {pr.exitcode}", ""))
                if errors:
                    deadline = min(deadline, time.monotonic() + ERROR_GRACE_S)
                continue
            got[rank] = payload
            if status == "error":
                errors.append((rank, *payload))
                deadline = min(deadline, time.monotonic() + ERROR_GRACE_S)
        stopped = [r for r in range(p) if r not in got]
        for r in stopped:
            procs[r].terminate()
        for pr in procs:
            pr.join()
    if errors or stopped:
        if not errors:
            errors = [(r, "no result within an hour", "") for r in stopped]
        raise RankError(p, sorted(errors), stopped)
    return got[0]


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
          f"{meta['memcpy_gbps']:.2f} GB/s (measured in each world: {per_world})")
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
    print(report.legend(rows))
    print()
    print(report.tables(rows))
    comp = report.comparison_table(rows, algo=args.algo or os.environ.get("RINGCOLL_ALGO")
                                   or "ring")
    if comp:
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
        try:
            return _main_torchrun(args)
        except Exception as e:  # noqa: BLE001 - one line per rank, as torchrun shows it
            print(f"python -m ringcoll.bench: error: rank {os.environ['RANK']}: "
                  f"{type(e).__name__}: {_first_line(e)}", file=sys.stderr)
            return 1
    rows, memcpy = [], {}
    try:
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
    except RankError as e:
        print(f"python -m ringcoll.bench: error: {e.summary()}{_save_tracebacks(args, e)}",
              file=sys.stderr)
        return 1
    return emit(rows, args, machine_meta(args, args.nproc, memcpy))


def _save_tracebacks(args, e: RankError) -> str:
    """Writes every rank's traceback beside the outputs; the note that says where."""
    path = os.path.join(os.path.dirname(args.json or args.csv or args.plot or "bench-out/x")
                        or ".", "ringcoll-bench-errors.log")
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w") as f:
            for rank, line, tb in e.errors:
                f.write(f"# rank {rank} of {e.p}: {line}\n{tb}\n")
            if e.stopped:
                f.write(f"# stopped after the error: rank {', '.join(map(str, e.stopped))}\n")
    except OSError:
        return ""
    return f" (tracebacks: {path})"


def _main_torchrun(args) -> int:
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
