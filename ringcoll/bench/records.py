"""One record per collective, as nccl-tests describes each test: how a byte size
maps to element counts, how inputs are initialised so that the expected output is
exact whatever the reduction order, the bus-bandwidth factor, and how to run it
out-of-place and in-place through torch.distributed.

Sizes follow nccl-tests: `size` is the bytes of the larger buffer (the all-reduce,
broadcast and reduce tensor, the gathered all-gather output, the reduce-scatter
input, the gather root's output and the scatter root's input, all p blocks; what
each rank sends in an all-to-all), the size RINGCOLL_ALGO's ranges count
(csrc/schedules/select.h); `count` is its element count. The rooted collectives
(broadcast, reduce, gather, scatter) use root 0.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable

import torch
import torch.distributed as dist

OPS = ("sum", "prod", "min", "max", "avg")


def bus_factor(collective: str, p: int) -> float:
    """busbw = algbw x this (nccl-tests' PERFORMANCE.md)."""
    if collective == "all_reduce":
        return 2.0 * (p - 1) / p
    if collective in ("all_gather", "reduce_scatter", "gather", "scatter", "all_to_all"):
        return (p - 1) / p
    if collective in ("broadcast", "reduce"):
        return 1.0
    raise ValueError(f"unknown collective {collective!r}")


def bandwidths(collective: str, nbytes: int, seconds: float, p: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s for `nbytes` moved in `seconds`."""
    if seconds <= 0:
        return 0.0, 0.0
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * bus_factor(collective, p)


def measurement(collective: str, nbytes: int, p: int, run_seconds: list[float], calls: int,
                wrong: int) -> dict:
    """One point's figures from its per-run times (each the slowest rank's median
    per-call time of one run): the median over runs, and the spread as the min-max
    of the runs (the slowest run gives the lowest busbw)."""
    if not run_seconds:
        raise ValueError("a point needs at least one run")
    med, lo, hi = statistics.median(run_seconds), min(run_seconds), max(run_seconds)
    algbw, busbw = bandwidths(collective, nbytes, med, p)
    return {"time_us": med * 1e6, "time_min_us": lo * 1e6, "time_max_us": hi * 1e6,
            "algbw": algbw, "busbw": busbw,
            "busbw_min": bandwidths(collective, nbytes, hi, p)[1],
            "busbw_max": bandwidths(collective, nbytes, lo, p)[1],
            "calls": calls, "runs_us": [t * 1e6 for t in run_seconds], "wrong": wrong}


def sweep(min_bytes: int, max_bytes: int, factor: float) -> list[int]:
    """min, min*f, ... up to and including max (nccl-tests -b/-e/-f)."""
    if min_bytes <= 0 or max_bytes < min_bytes or factor <= 1:
        raise ValueError(f"bad sweep -b {min_bytes} -e {max_bytes} -f {factor}")
    sizes, s = [], float(min_bytes)
    while s <= max_bytes * (1 + 1e-9):
        sizes.append(int(round(s)))
        s *= factor
    return sizes


def parse_size(text: str) -> int:
    """'8', '1K', '64M', '1G' -> bytes (binary units, as nccl-tests)."""
    t = text.strip().upper().rstrip("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:] if t else "", 1)
    return int(float(t[:-1] if mult > 1 else t) * mult)


# Every input below repeats with this period (5 for sum, min, max; 4 for prod, avg),
# and so does every reduction of them: inputs and expected results are computed
# on one period and tiled, not element by element (a 64 MiB case at p = 4 took
# about a second per algorithm to build the other way).
PERIOD = 20


def _tile(t: torch.Tensor, n: int) -> torch.Tensor:
    """The first n elements of t repeated (t holds one or more whole periods)."""
    if n <= t.numel():
        return t[:n].clone()
    return t.repeat(-(-n // t.numel()))[:n]


def element_input(rank: int, p: int, n: int, op: str, salt: int = 0) -> torch.Tensor:
    """Small integers, exact in any float dtype for any reduction order: values
    1..5 (sum over p ranks <= 5p), {1, 2} for prod with at most ceil(p/4) twos per
    element, multiples of p for avg so the mean is an integer."""
    i = torch.arange(min(n, PERIOD), dtype=torch.int64) + salt
    if op == "prod":
        v = 1 + (((i + rank) % 4) == 0).to(torch.int64)
    elif op == "avg":
        v = p * (((3 * i + rank) % 4) + 1)
    else:
        v = ((7 * i + 3 * rank) % 5) + 1
    return _tile(v.to(torch.float64), n)


def reduce_ref(inputs: list[torch.Tensor], op: str, p: int) -> torch.Tensor:
    s = torch.stack(inputs)
    return {"sum": lambda: s.sum(0), "prod": lambda: s.prod(0), "min": lambda: s.min(0).values,
            "max": lambda: s.max(0).values, "avg": lambda: s.sum(0) / p}[op]()


def reduced_input(p: int, n: int, op: str) -> torch.Tensor:
    """reduce_ref of every rank's element_input(r, p, n, op), computed on one period."""
    m = min(n, PERIOD)
    return _tile(reduce_ref([element_input(r, p, m, op) for r in range(p)], op, p), n)


def torch_op(op: str):
    return {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
            "max": dist.ReduceOp.MAX, "avg": dist.ReduceOp.AVG}[op]


@dataclass
class Case:
    """One collective call ready to run: `run()` makes it as a script does
    (`async_op=False`: it returns once the call has ended, on CUDA once it is ordered
    before the current stream's later work), `output` is the tensor to check against
    `expected`."""
    run: Callable[[], object]
    output: torch.Tensor
    expected: torch.Tensor | None
    reset: Callable[[], None]


@dataclass(frozen=True)
class Record:
    name: str
    reduces: bool
    count_multiple_of_p: bool
    build: Callable[..., Case | None]  # (rank, p, count, dtype, op, device, inplace, group)
    rooted: bool = False  # root 0


def _all_reduce(rank, p, count, dtype, op, device, inplace, group) -> Case | None:
    if not inplace:
        return None  # torch's all_reduce is in place only
    src = element_input(rank, p, count, op).to(dtype).to(device)
    x = src.clone()
    exp = reduced_input(p, count, op).to(dtype).to(device)

    def reset():
        x.copy_(src)

    return Case(lambda: dist.all_reduce(x, op=torch_op(op), group=group), x,
                exp, reset)


# torch's current names for the one-buffer all-gather and reduce-scatter; the old
# ones (all_gather_into_tensor, reduce_scatter_tensor) print a FutureWarning. Both
# reach the same backend method. A torch without the new names gets the old ones.
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter_single = (getattr(dist, "reduce_scatter_single", None)
                          or dist.reduce_scatter_tensor)


def _all_gather(rank, p, count, dtype, op, device, inplace, group) -> Case:
    m = count // p
    parts = [element_input(r, p, m, "sum", salt=r) for r in range(p)]
    out = torch.zeros(m * p, dtype=dtype, device=device)
    mine = parts[rank].to(dtype).to(device)
    inp = out[rank * m:(rank + 1) * m] if inplace else mine.clone()

    def reset():
        inp.copy_(mine)

    reset()
    return Case(lambda: _all_gather_single(out, inp, group=group), out,
                torch.cat(parts).to(dtype).to(device), reset)


def _reduce_scatter(rank, p, count, dtype, op, device, inplace, group) -> Case:
    m = count // p
    src = element_input(rank, p, m * p, op).to(dtype).to(device)
    inp = src.clone()
    out = inp[rank * m:(rank + 1) * m] if inplace else torch.empty(m, dtype=dtype, device=device)
    exp = reduced_input(p, m * p, op)[rank * m:(rank + 1) * m].to(dtype).to(device)

    def reset():
        inp.copy_(src)

    return Case(lambda: _reduce_scatter_single(out, inp, op=torch_op(op), group=group),
                out, exp, reset)


ROOT = 0


def _broadcast(rank, p, count, dtype, op, device, inplace, group) -> Case | None:
    if not inplace:
        return None  # torch's broadcast is in place only
    src = element_input(ROOT, p, count, "sum").to(dtype).to(device)
    x = torch.zeros(count, dtype=dtype, device=device)

    def reset():
        x.copy_(src) if rank == ROOT else x.zero_()

    reset()
    return Case(lambda: dist.broadcast(x, src=ROOT, group=group), x, src.clone(), reset)


def _reduce(rank, p, count, dtype, op, device, inplace, group) -> Case | None:
    if not inplace:
        return None  # torch's reduce is in place only
    src = element_input(rank, p, count, op).to(dtype).to(device)
    x = src.clone()
    # only the root's result is defined (the others' tensors are its scratch)
    exp = reduced_input(p, count, op).to(dtype).to(device) if rank == ROOT else None

    def reset():
        x.copy_(src)

    return Case(lambda: dist.reduce(x, dst=ROOT, op=torch_op(op), group=group), x, exp, reset)


def _gather(rank, p, count, dtype, op, device, inplace, group) -> Case | None:
    if inplace:
        return None  # torch's gather is out of place only
    m = count // p
    parts = [element_input(r, p, m, "sum", salt=r) for r in range(p)]
    inp = parts[rank].to(dtype).to(device)
    out = torch.zeros(m * p, dtype=dtype, device=device)
    blocks = list(out.chunk(p)) if m else [out[:0] for _ in range(p)]
    exp = torch.cat(parts).to(dtype).to(device) if rank == ROOT else None

    def reset():
        out.zero_()

    return Case(lambda: dist.gather(inp, blocks if rank == ROOT else None, dst=ROOT,
                                    group=group), out, exp, reset)


def _scatter(rank, p, count, dtype, op, device, inplace, group) -> Case | None:
    if inplace:
        return None  # torch's scatter is out of place only
    m = count // p
    parts = [element_input(r, p, m, "sum", salt=r).to(dtype).to(device) for r in range(p)]
    out = torch.zeros(m, dtype=dtype, device=device)

    def reset():
        out.zero_()

    return Case(lambda: dist.scatter(out, parts if rank == ROOT else None, src=ROOT,
                                     group=group), out, parts[rank].clone(), reset)


def _all_to_all(rank, p, count, dtype, op, device, inplace, group) -> Case | None:
    if inplace:
        return None  # torch's all_to_all_single is out of place only
    m = count // p
    sent = [element_input(r, p, count, "sum", salt=r) for r in range(p)]  # each rank's input
    inp = sent[rank].to(dtype).to(device)
    out = torch.zeros(count, dtype=dtype, device=device)
    exp = torch.cat([sent[s][rank * m:(rank + 1) * m] for s in range(p)]).to(dtype).to(device)

    def reset():
        out.zero_()

    return Case(lambda: dist.all_to_all_single(out, inp, group=group), out, exp, reset)


# Every collective ringcoll runs; the first three are the benchmark's default.
RECORDS = {
    "all_reduce": Record("all_reduce", True, False, _all_reduce),
    "all_gather": Record("all_gather", False, True, _all_gather),
    "reduce_scatter": Record("reduce_scatter", True, True, _reduce_scatter),
    "broadcast": Record("broadcast", False, False, _broadcast, rooted=True),
    "reduce": Record("reduce", True, False, _reduce, rooted=True),
    "gather": Record("gather", False, True, _gather, rooted=True),
    "scatter": Record("scatter", False, True, _scatter, rooted=True),
    "all_to_all": Record("all_to_all", False, True, _all_to_all),
}
DEFAULT = ("all_reduce", "all_gather", "reduce_scatter")


def count_for(record: Record, size: int, p: int, elem: int) -> int:
    """Elements of the larger buffer for `size` bytes, rounded down so per-rank
    counts are whole (at least one element per rank)."""
    n = max(1, size // elem)
    if record.count_multiple_of_p:
        n = max(p, n // p * p)
    return n


def counts_for(record: Record, sizes: list[int], p: int, elem: int,
               dtype: str = "") -> dict[int, tuple[int, str]]:
    """{requested size: (count, why not)} over a sweep: the count each size runs
    (count_for), or, where two sizes of the sweep round to the same count, why this
    one is not run (""  where it is). The size measured is count x elem bytes; of the
    sizes that round to it, the one nearest it runs and the others say where their
    point is, so no size is printed twice (at p = 4 an all-gather of 8 B float32 is
    one element per rank, 16 B: the 8 B and 16 B steps are one point)."""
    out, by_count = {}, {}
    for size in sizes:
        by_count.setdefault(count_for(record, size, p, elem), []).append(size)
    for count, group in by_count.items():
        nbytes = count * elem
        keep = min(group, key=lambda s: (abs(s - nbytes), s))
        for size in group:
            if size == keep:
                out[size] = (count, "")
                continue
            kind = f"{dtype} element" if dtype else "element"
            per_rank = " per rank" if record.count_multiple_of_p else ""
            how = (f"rounds up to {human(nbytes)} (one {kind}{per_rank} at least)"
                   if nbytes > size else
                   f"rounds down to {human(nbytes)} (a whole number of {kind}s{per_rank})")
            out[size] = (count, f"at p={p} {human(size)} {how}, measured in the "
                                f"{human(nbytes)} row")
    return out


def human(nbytes: int) -> str:
    """Bytes in binary units, as the tables and plots print sizes: 8 B, 64 KiB, 1.5 MiB."""
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= k:
            return f"{nbytes / k:g} {unit}"
    return f"{nbytes} B"


def count_wrong(output: torch.Tensor, expected: torch.Tensor) -> int:
    """nccl-tests' #wrong: elements that differ from the exact expected result."""
    return int((output != expected).sum().item())
