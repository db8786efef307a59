"""Runs the sweep inside one world: every backend on the same sizes in the same
processes, their timed runs interleaved so all backends see the same machine noise.

Method, per point (one size, collective and placement, for every backend):
 1. Warm-up: `warmup` synchronous calls per backend, each timed; their mean (the
    first call left out) estimates what a call costs. The mean, not the median:
    the estimate is there to predict how long a run will take, tail included.
 2. Runs: `runs` of them. Before each, every rank proposes, per backend,
    `calls_per_run(budget left, runs left, estimate, min, max)` and the ranks take
    the smallest proposal (all_reduce MIN over the gloo meta group): every rank
    makes the same number of calls (a collective called a different number of
    times on two ranks would hang or mismatch), the slowest rank's estimate is the
    one that must fit the budget, and a run slower than the warm-up foretold
    shrinks the runs after it instead of overrunning the budget many times.
 3. In each run, every backend in turn (the order rotates per run): a barrier on
    the meta group, then the agreed number of calls, each issued and waited for on
    its own and timed alone. The run's figure on a rank is the median of its
    per-call times; its mean becomes the next estimate.
 4. Per run, the slowest rank's figure (all_reduce MAX). The point reports the
    median over runs and their min-max as the spread.

Why per call, and medians: on a shared machine per-call times have a heavy tail
(measured here, 8 B all-reduce, p=2: median ~0.2 ms, but 10-20% of calls take
1.5-3.5 ms when a rank is preempted). The former method reported the median of 3
means of 5 back-to-back async calls: one slow call in 5 multiplies a region's mean
several times and about half the regions hold one, so gloo's 8 B all-reduce read
130-1600 us from repeat to repeat against a steady ~200 us per-call median. A
median of many per-call times ignores the tail, and a synchronous call is the
latency a caller of `dist.all_reduce(x)` sees (a queue of async calls would measure
throughput instead).

Clocks: time.perf_counter on CPU. On CUDA a pair of events on the current stream
around issue + wait, then a host synchronize before the next call: each call is
timed alone and calls never overlap, as on CPU. What the span holds: an event's time
is when the GPU reaches it, and a recorded event reaches the GPU with the next
commands the process submits. A backend whose call submits a command early (ringcoll
orders its comm stream after the caller's at the start of its launch) has its whole
host launch inside the span; one that submits its first command at the end of its
launch (ProcessGroupNCCL's kernel) can have most of it outside. On an H200 under MPS,
NCCL's 8-byte all-reduce read 71 us here against 97 us of host time to issue it
(docs/GPU.md, "Where a small call's time goes"; benchmarks/gpu_host_cost.py reports
the host clock's view beside this one).
"""

from __future__ import annotations

import math
import statistics
import sys
import time

import torch
import torch.distributed as dist

from . import records
from .records import Case

DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
          "bfloat16": torch.bfloat16}
MEMCPY_BYTES = 64 << 20


def ringcoll_variant(name, algo=None, transport="auto"):
    """The Options of a ringcoll backend name: "ringcoll", or "ringcoll+FIELD=VALUE"
    (several joined by "+") for a variant with other knobs, e.g.
    "ringcoll+fingerprint=0" to measure what the fingerprint costs side by side."""
    import dataclasses

    import ringcoll

    fields = {"algo": algo, "transport": transport}
    types = {f.name: f.type for f in dataclasses.fields(ringcoll.Options)}
    for part in name.split("+")[1:]:
        key, sep, value = part.partition("=")
        if not sep or key not in types:
            raise ValueError(f"backend {name!r}: {part!r} is not FIELD=VALUE with FIELD "
                             f"one of {', '.join(types)}")
        if "bool" in str(types[key]) and "str" not in str(types[key]):
            fields[key] = value in ("1", "true")
        elif "int" in str(types[key]):
            fields[key] = records.parse_size(value)
        else:
            fields[key] = value
    return ringcoll.Options(**fields)


def make_groups(backends, device, algo=None, transport="auto"):
    """One process group per backend under test, on the same ranks. ringcoll gets
    `transport` (and `algo`) as its Options; the string is passed through unchecked
    here, ringcoll validates it when the group is created. "ringcoll+FIELD=VALUE"
    is a ringcoll variant (ringcoll_variant)."""
    groups = {}
    for b in backends:
        if b == "ringcoll" or b.startswith("ringcoll+"):
            opts = ringcoll_variant(b, algo, transport)
            groups[b] = dist.new_group(backend="ringcoll", pg_options=opts)
        elif b in ("gloo", "nccl", "nccl-ring"):
            groups[b] = dist.new_group(backend="nccl" if b.startswith("nccl") else b)
        else:
            raise ValueError(f"unknown backend {b!r} (ringcoll, gloo, nccl, nccl-ring)")
    return groups


def calls_per_run(budget_s: float, runs: int, call_s: float, min_calls: int,
                  max_calls: int) -> int:
    """Calls per run so that `runs` runs of calls taking `call_s` each fill `budget_s`,
    clamped to [min_calls, max_calls] (the minimum wins over the budget)."""
    if not call_s > 0 or not math.isfinite(call_s):
        return max(min_calls, max_calls)
    n = int(budget_s / (runs * call_s))
    return max(min_calls, min(max_calls, n))


def agree_calls(proposals: list[int], group) -> list[int]:
    """The per-backend call counts every rank will use: the smallest proposal of any
    rank, element-wise (an integer reduction, so all ranks get the same numbers)."""
    t = torch.tensor(proposals, dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MIN, group=group)
    return [int(x) for x in t.tolist()]


def slowest_rank(values: torch.Tensor, group) -> torch.Tensor:
    """Element-wise max over ranks (the slowest rank's figure per run)."""
    values = values.clone()
    dist.all_reduce(values, op=dist.ReduceOp.MAX, group=group)
    return values


def time_calls(run, n: int, device: str) -> list[float]:
    """Seconds of each of `n` synchronous calls of `run` (async_op=False)."""
    out = []
    if device == "cuda":
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        for _ in range(n):
            start.record()
            run()
            end.record()
            end.synchronize()
            out.append(start.elapsed_time(end) / 1e3)
        return out
    clock = time.perf_counter
    for _ in range(n):
        t0 = clock()
        run()
        out.append(clock() - t0)
    return out


def measure(cases: dict, args, device: str, meta) -> dict:
    """{backend: (per-run seconds of the slowest rank, timed calls in all runs)} for
    one point; `cases` maps backend -> records.Case, the same point for every
    backend. Every rank must call this with the same backends in the same order."""
    names = list(cases)
    # Where the order of backends starts rotating: a caller that measures the same
    # point in several calls (ringcoll.model's passes) shifts it per call, so that
    # every backend goes first after the barrier in turn across calls too.
    shift = getattr(args, "rotation", 0)
    est, spent = [], [0.0] * len(names)
    for b in names:
        warm = time_calls(cases[b].run, max(1, args.warmup), device)
        warm = warm[1:] or warm  # the first call may carry one-time costs
        est.append(sum(warm) / len(warm))
    per_run = torch.zeros(len(names), args.runs, dtype=torch.float64)
    calls = [0] * len(names)
    for i in range(args.runs):
        counts = agree_calls([calls_per_run(max(0.0, args.budget - spent[j]), args.runs - i,
                                            est[j], args.iters, args.max_calls)
                              for j in range(len(names))], meta)
        for k in range(len(names)):
            j = (shift + i + k) % len(names)  # rotate who goes first after the barrier
            dist.barrier(group=meta)
            ts = time_calls(cases[names[j]].run, counts[j], device)
            per_run[j, i] = statistics.median(ts)
            spent[j] += sum(ts)
            est[j] = sum(ts) / len(ts)
            calls[j] += counts[j]
    worst = slowest_rank(per_run, meta)
    return {b: (worst[j].tolist(), calls[j]) for j, b in enumerate(names)}


def graph_case(case, k: int, device: str, backend: str, group, transport: str):
    """(Case whose run() replays `k` calls of `case` captured in a graph, a Case
    replaying one call for the check; or None, None and why not). CUDA: torch.cuda.graph
    after warm-up calls on a side stream, as torch's docs ask; cpu: ringcoll's stream
    emulation (ringcoll.graphs)."""
    def capture(calls):
        if device == "cuda":
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    case.run()
            torch.cuda.current_stream().wait_stream(side)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for _ in range(calls):
                    case.run()
            return g
        from ..graphs import EmulatedGraph

        g = EmulatedGraph(group)
        with g.capture():
            for _ in range(calls):
                case.run()
        return g

    if device != "cuda":
        if not backend.startswith("ringcoll"):
            return None, None, f"{backend} has no capture on the CPU (no CUDA graph)"
        if transport != "stream":
            return None, None, ("ringcoll captures CPU collectives on its stream emulation "
                                "only: --transport stream")
    whole, one = capture(k), capture(1)
    return (Case(whole.replay, case.output, case.expected, case.reset),
            Case(one.replay, case.output, case.expected, case.reset), "")


def check(case, meta):
    """#wrong summed over ranks after one call on freshly reset inputs (a rank whose
    output the collective leaves undefined, reduce's and gather's other ranks,
    counts 0; every rank takes part in the sum)."""
    case.reset()
    case.run()
    bad = 0 if case.expected is None else records.count_wrong(case.output, case.expected)
    wrong = torch.tensor([bad], dtype=torch.int64)
    dist.all_reduce(wrong, group=meta)
    return int(wrong.item())


def measure_graphs(cases, groups, args, device, meta, coll, nbytes, p):
    """The graph mode of one placement: ({backend: measurement per call}, {backend: why
    it cannot capture}). Every capturable backend's K-call graph is timed by measure()
    side by side, as the eager calls are; per-call time = replay time / K; the check
    replays a graph of one call on fresh inputs."""
    k = args.graph
    whole, one, why = {}, {}, {}
    for b, case in cases.items():
        whole[b], one[b], why[b] = graph_case(case, k, device, b, groups[b], args.transport)
    timed = {b: c for b, c in whole.items() if c is not None}
    out = {}
    if timed:
        for b, (runs_s, calls) in measure(timed, args, device, meta).items():
            wrong = check(one[b], meta) if args.check else 0
            out[b] = records.measurement(coll, nbytes, p, [t / k for t in runs_s], calls * k,
                                         wrong)
    return out, {b: w for b, w in why.items() if w}


def ringcoll_algo(backend, args) -> str | None:
    """The RINGCOLL_ALGO value a ringcoll backend of the run uses, or None when it
    runs the defaults or resolves auto in the group (auto chooses only where an
    algorithm applies)."""
    import os

    from ..model import auto

    if not backend.startswith("ringcoll"):
        return None
    value = ringcoll_variant(backend, args.algo, args.transport).algo or \
        os.environ.get("RINGCOLL_ALGO")
    return None if not value or auto.wants_auto(value) else value


def not_served(backend, args, coll, p, count, nbytes) -> str:
    """'' unless the algorithm `backend` runs for this point declares it does not
    serve it (ringcoll.schedules.Applies): then why, as the group would refuse it
    (all-to-all's schedule holds what a rank sends and receives: 2 x count)."""
    from .. import _C
    from ..model import SELECT_NAME

    value = ringcoll_algo(backend, args)
    if value is None:
        return ""
    algo = _C.select(value, SELECT_NAME[coll], nbytes)[0]
    n = 2 * count if coll == "all_to_all" else count
    return _C.refusal(algo, SELECT_NAME[coll], p, n, nbytes, records.ROOT)


def memcpy_gbps(nbytes: int = MEMCPY_BYTES, repeats: int = 9) -> float:
    """Single-core copy rate, GB/s = bytes copied / s: `copy_` between two float32
    tensors of `nbytes` with one intra-op thread, median of `repeats` after a copy
    that touches every page."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        src = torch.ones(nbytes // 4, dtype=torch.float32)
        dst = torch.empty_like(src)
        dst.copy_(src)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            dst.copy_(src)
            times.append(time.perf_counter() - t0)
        return src.numel() * 4 / statistics.median(times) / 1e9
    finally:
        torch.set_num_threads(threads)


def reference(meta) -> float:
    """The physical reference of this world: rank 0 measures memcpy_gbps() while the
    other ranks wait in a barrier; other ranks return nan."""
    gbps = memcpy_gbps() if dist.get_rank() == 0 else float("nan")
    dist.barrier(group=meta)
    return gbps


def sweep(args, device, meta, log=print):
    """Returns the result rows (on every rank; rank 0 logs progress)."""
    p = dist.get_world_size()
    rank = dist.get_rank()
    dtype = DTYPES[args.dtype]
    elem = torch.tensor([], dtype=dtype).element_size()
    groups = make_groups(args.backends, device, args.algo, args.transport)
    dev = torch.device(device, torch.cuda.current_device()) if device == "cuda" else "cpu"
    rows = []
    sizes = records.sweep(args.minbytes, args.maxbytes, args.stepfactor)
    plans = {coll: records.counts_for(records.RECORDS[coll], sizes, p, elem, args.dtype)
             for coll in args.collectives}
    for size in sizes:
        line = []
        for coll in args.collectives:
            rec = records.RECORDS[coll]
            count, same_as = plans[coll][size]
            point = {b: {"backend": b, "collective": coll, "nproc": p, "device": device,
                         "transport": args.transport if b.startswith("ringcoll") else None,
                         "dtype": args.dtype, "op": args.op if rec.reduces else "none",
                         "size": count * elem, "count": count,
                         "root": records.ROOT if rec.rooted else -1,
                         "oop": None, "ip": None} for b in groups}
            if same_as:  # another size of the sweep runs this count: one row, not two
                for row in point.values():
                    row.update(size=size, count=None, skipped=same_as)
                    line.append(f"{row['backend']} {coll} skipped")
                rows += point.values()
                continue
            for b in groups:  # an algorithm that declares it does not serve this point
                why = not_served(b, args, coll, p, count, count * elem)
                if why:
                    point[b]["skipped"] = why
            served = {b: g for b, g in groups.items() if "skipped" not in point[b]}
            # The graph mode's rows: the same point, K calls per replay (--graph).
            graphed = {b: dict(row, graph=args.graph) for b, row in point.items()}
            for key, inplace in (("oop", False), ("ip", True)):
                cases = {b: rec.build(rank, p, count, dtype, args.op, dev, inplace, g)
                         for b, g in served.items()}
                if not cases or any(c is None for c in cases.values()):
                    continue  # the collective has no such placement
                for b, (runs_s, calls) in measure(cases, args, device, meta).items():
                    wrong = check(cases[b], meta) if args.check else 0
                    point[b][key] = records.measurement(coll, count * elem, p, runs_s, calls,
                                                        wrong)
                if args.graph:
                    ms, why = measure_graphs(cases, served, args, device, meta, coll,
                                             count * elem, p)
                    for b, m in ms.items():
                        graphed[b][key] = m
                    for b, w in why.items():
                        graphed[b]["skipped"] = w
            for b, row in point.items():
                m = row["ip"] or row["oop"]
                line.append(f"{b} {coll} " + ("skipped" if m is None else f"{m['busbw']:.3f}"))
            rows += point.values()
            if args.graph:
                rows += graphed.values()
        if rank == 0:
            log(f"[p={p}] {size:>10d} B  busbw GB/s: " + ", ".join(line), file=sys.stderr,
                flush=True)
    return rows
