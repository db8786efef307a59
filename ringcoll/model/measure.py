"""Measurements for the cost model, taken with ringcoll.bench's method and runner.

One spawned world per world size (ringcoll.bench._spawn_world). In it, one
ringcoll group per (algorithm, transport), plus one RINGCOLL_ALGO=auto group per
transport when asked; per collective, size and transport, every algorithm that
provides the collective (and auto) is timed side by side by
ringcoll.bench.runner.measure: per-call synchronous timing, the slowest rank's
median per run, the median over runs. A row: collective, p, transport, algo, size
(bytes, as the bench counts them), time_s, runs_s.

Passes: with passes = k the whole sweep (every world size, in a fresh world each
time) is made k times, each pass taking `runs` runs of every point with budget / k;
a point's row pools the runs of all passes (runs_s) and reports their median. Why:
on the shared VM of benchmarks/results small calls switch between a fast and a
slow mode for minutes at a time (7 vs 11 us for an 8-byte shm all-reduce at p = 2,
the same for every algorithm), so runs taken back to back all see the mode of
their minute and a whole world size can read 1.5x slow; runs spread over the
whole measurement see the machine's usual mode in most passes, and their median
ignores the passes that did not.

gamma (seconds per byte reduced) is timed in this process: the CPU reducer's
in-place sum of two buffers of `nbytes`, one thread, median of several calls; copy
(seconds per byte a collective's entry copies) likewise, from ringcoll.bench's
single-thread memcpy.
"""

from __future__ import annotations

import os
import statistics
import time
from types import SimpleNamespace

from . import COLLECTIVES, elements, providers


def gamma(dtype: str, nbytes: int = 16 << 20, repeats: int = 7) -> float:
    import torch

    from .. import _C

    t = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
         "bfloat16": torch.bfloat16}[dtype]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        n = nbytes // torch.tensor([], dtype=t).element_size()
        a, b = torch.ones(n, dtype=t), torch.ones(n, dtype=t)
        _C.cpu_reduce(a, b, "sum", out=a)
        times = []
        for _ in range(repeats):
            b.fill_(0)  # sums of zeros stay finite whatever the dtype
            t0 = time.perf_counter()
            _C.cpu_reduce(a, b, "sum", out=a)
            times.append(time.perf_counter() - t0)
        return statistics.median(times) / nbytes
    finally:
        torch.set_num_threads(threads)


def copy() -> float:
    from ..bench import runner

    return 1.0 / (runner.memcpy_gbps() * 1e9)


def _broadcast(rank, p, count, dtype, op, device, inplace, group):
    """A bench Case for broadcast from rank 0 (ringcoll.bench has no broadcast record)."""
    import torch
    import torch.distributed as dist

    from ..bench import records

    if not inplace:
        return None
    src = records.element_input(0, p, count, "sum").to(dtype)
    x = torch.zeros(count, dtype=dtype) if rank else src.clone()

    def reset():
        x.copy_(src if rank == 0 else torch.zeros_like(src))

    # Blocking, as every other case (records.Case): timed with async_op=True, a call
    # was only its issue (6 us for 2 MiB over the gloo transport).
    return records.Case(lambda: dist.broadcast(x, src=0, group=group), x, src, reset)


def _build(collective):
    from ..bench import records

    if collective == "broadcast":
        return _broadcast
    return records.RECORDS[collective].build


def _case(collective, rank, p, count, group):
    """The bench's case of one point: in place where torch's call is (all-reduce,
    broadcast, reduce), else out of place (all-to-all, gather, scatter)."""
    import torch

    build = _build(collective)
    return (build(rank, p, count, torch.float32, "sum", "cpu", True, group)
            or build(rank, p, count, torch.float32, "sum", "cpu", False, group))


def world(args, meta):
    """Every rank of one spawned world (bench._spawn_world's `world`)."""
    import torch
    import torch.distributed as dist

    import ringcoll
    from ..bench import runner

    from .._modules import load_from_environment

    p, rank = dist.get_world_size(), dist.get_rank()
    # The algorithms RINGCOLL_ALGO_MODULES defines, imported before they are listed:
    # the first group's creation would import them only after the list was made,
    # and the collectives' providers would then name algorithms with no group.
    load_from_environment()
    algorithms = list(ringcoll.algorithms())
    groups = {}
    for t in args.transports:
        for a in algorithms + (["auto"] if args.auto else []):
            groups[(a, t)] = dist.new_group(backend="ringcoll",
                                            pg_options=ringcoll.Options(algo=a, transport=t))
    rows = []
    for coll in args.collectives:
        algos = [a for a in providers(coll) if a in algorithms] + (["auto"] if args.auto else [])
        for size in args.sizes:
            count = elements(coll, size, p, 4)
            for t in args.transports:
                cases = {a: _case(coll, rank, p, count, groups[(a, t)]) for a in algos}
                for a, (runs_s, calls) in runner.measure(cases, args, "cpu", meta).items():
                    rows.append({"collective": coll, "p": p, "transport": t, "algo": a,
                                 "size": count * 4, "time_s": statistics.median(runs_s),
                                 "runs_s": runs_s, "calls": calls})
            if rank == 0 and args.verbose:
                print(f"[model p={p}] {coll} {size} B done", flush=True)
    return rows, float("nan")


def pool(passes: list[list[dict]]) -> list[dict]:
    """One row per point from the rows of several passes over the same points: their
    runs_s joined, time_s their median, calls summed (the module docstring's passes)."""
    rows, at = [], {}
    for got in passes:
        for r in got:
            k = (r["collective"], r["p"], r["transport"], r["algo"], r["size"])
            if k not in at:
                at[k] = len(rows)
                rows.append(dict(r, runs_s=list(r["runs_s"])))
            else:
                row = rows[at[k]]
                row["runs_s"] += r["runs_s"]
                row["calls"] += r["calls"]
    for row in rows:
        row["time_s"] = statistics.median(row["runs_s"])
    return rows


def run(nprocs, collectives, sizes, transports, auto=False, budget=0.1, runs=3, iters=3,
        warmup=2, max_calls=2000, model_path=None, verbose=True, passes=1) -> list[dict]:
    """Rows for every world size in `nprocs` (see the module docstring)."""
    from .. import bench

    for c in collectives:
        if c not in COLLECTIVES:
            raise ValueError(f"unknown collective {c!r} (known: {', '.join(COLLECTIVES)})")
    if passes < 1:
        raise ValueError(f"passes must be >= 1, got {passes}")
    env = {}  # spawned ranks inherit this environment and sys.path
    if model_path:
        env["RINGCOLL_MODEL"] = os.path.abspath(model_path)
    got = []
    for k in range(passes):
        args = SimpleNamespace(device="cpu", collectives=list(collectives), sizes=list(sizes),
                               transports=list(transports), auto=auto, budget=budget / passes,
                               runs=runs, iters=iters, warmup=warmup, max_calls=max_calls,
                               verbose=verbose, rotation=k * runs)
        rows = []
        for p in nprocs:
            t0 = time.perf_counter()
            rows += bench._spawn_world(p, args, [], env, world=world)[0]
            if verbose:
                print(f"[model] pass {k + 1}/{passes}, p={p}: {time.perf_counter() - t0:.0f} s",
                      flush=True)
        got.append(rows)
    return pool(got)
