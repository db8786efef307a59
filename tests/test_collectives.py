"""Every collective against gloo (or an exact computed reference where gloo lacks
the dtype/op), in real processes, across world sizes, dtypes, ops and counts.

One spawned world runs the whole matrix of one collective, so a world size costs
one process start-up; each rank returns the list of mismatches it saw.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

import ringcoll
from tests import cases, mp
from tests.conftest import TRANSPORTS
from tests.cases import DTYPES, OPS, same

WORLD_SIZES = [1, 2, 3, 4, 5]
# The full dtype x op grid runs on the default group for world sizes 1-3 (3: the
# non-power-of-two case). The group with tiny segments, and world sizes 4 and 5
# (4-5 processes on CI's 2 cores are the slowest), run one dtype of each kind: a
# 32-bit float, a 16-bit float (float widening), an integer and bool, with every
# op. Keeps the whole suite within CI's budget.
SUBSET = [torch.float32, torch.float16, torch.int32, torch.bool]


def _groups():
    """The default ringcoll group, plus one forcing 64-byte segments so the
    executor's multi-segment pipeline runs on small tensors."""
    # new_group's default timeout is 30 minutes: give it the world's, so that a hang
    # is an error naming the stuck step instead of a test killed for time.
    tiny = dist.new_group(backend="ringcoll", pg_options=ringcoll.Options(chunk_bytes=64),
                          timeout=timedelta(seconds=60))
    return {"default": None, "tiny-segments": tiny}


def _dtypes(gname, p):
    return DTYPES if gname == "default" and p <= 3 else SUBSET


def _counts(gname, p, large):
    # Segmentation only matters for blocks longer than one 24-byte segment.
    return cases.counts(p, large) if gname == "default" else [p + 1, large]


def _gloo(fn):
    """Runs fn() on the gloo group; None where gloo does not support the call."""
    try:
        return fn()
    except (RuntimeError, ValueError) as e:
        if "not supported" in str(e).lower() or "unsupported" in str(e).lower() \
                or "cannot use" in str(e).lower() or "invalid" in str(e).lower():
            return None
        raise


def _check(failures, what, got, want, gloo_out=None):
    if not same(got, want):
        bad = (got != want).nonzero()[:5].flatten().tolist() if got.shape == want.shape else "shape"
        failures.append(f"{what}: ringcoll differs from reference at {bad}: "
                        f"got {got.flatten()[:8].tolist()} want {want.flatten()[:8].tolist()}")
    if gloo_out is not None and not same(gloo_out, want):
        failures.append(f"{what}: gloo differs from the computed reference (bad test input)")


def allreduce_matrix(rank, p):
    failures = []
    for gname, group in _groups().items():
        for dtype in _dtypes(gname, p):
            for op in OPS:
                if not cases.op_valid(op, dtype):
                    continue
                for n in _counts(gname, p, 1000):
                    what = f"allreduce[{gname}] {dtype} {op} n={n}"
                    inputs = [cases.make_input(r, n, dtype, op, p) for r in range(p)]
                    want = cases.reference(inputs, op, dtype, p)
                    x = inputs[rank].clone()
                    dist.all_reduce(x, op=cases.reduce_op(op), group=group)
                    g = None
                    if op not in ("AVG", "PREMUL_SUM"):
                        y = inputs[rank].clone()
                        g = _gloo(lambda: (dist.all_reduce(y, op=cases.reduce_op(op),
                                                           group=mp.GLOO), y)[1])
                    _check(failures, what, x, want, g)
    # Non-contiguous input: a transposed view is reduced and written back in place.
    base = cases.make_input(rank, 6 * 5, torch.float32, "SUM", p).view(6, 5)
    want = cases.reference([cases.make_input(r, 30, torch.float32, "SUM", p).view(6, 5)
                            for r in range(p)], "SUM", torch.float32, p)
    x = base.clone().t()
    dist.all_reduce(x)
    _check(failures, "allreduce non-contiguous", x, want.t())
    return failures


def reduce_scatter_matrix(rank, p):
    failures = []
    for gname, group in _groups().items():
        for dtype in _dtypes(gname, p):
            for op in OPS:
                if not cases.op_valid(op, dtype):
                    continue
                for m in _counts(gname, p, 333):
                    inputs = [cases.make_input(r, p * m, dtype, op, p) for r in range(p)]
                    full = cases.reference(inputs, op, dtype, p)
                    want = full[rank * m:(rank + 1) * m]
                    # out-of-place, tensor API
                    out = torch.empty(m, dtype=dtype)
                    dist.reduce_scatter_tensor(out, inputs[rank].clone(),
                                               op=cases.reduce_op(op), group=group)
                    _check(failures, f"reduce_scatter_tensor[{gname}] {dtype} {op} m={m}",
                           out, want)
                    # in-place: the output is this rank's chunk of the input (FSDP style)
                    buf = inputs[rank].clone()
                    view = buf[rank * m:(rank + 1) * m]
                    dist.reduce_scatter_tensor(view, buf, op=cases.reduce_op(op), group=group)
                    _check(failures, f"reduce_scatter_tensor in-place[{gname}] {dtype} {op} m={m}",
                           view, want)
                    if gname != "default":
                        continue
                    # list API
                    out2 = torch.empty(m, dtype=dtype)
                    chunks = list(inputs[rank].clone().chunk(p)) if m else [
                        torch.empty(0, dtype=dtype) for _ in range(p)]
                    dist.reduce_scatter(out2, chunks, op=cases.reduce_op(op), group=group)
                    _check(failures, f"reduce_scatter list[{gname}] {dtype} {op} m={m}",
                           out2, want)
    return failures


def allgather_matrix(rank, p):
    failures = []
    for gname, group in _groups().items():
        for dtype in _dtypes(gname, p):
            for m in _counts(gname, p, 333):
                parts = [cases.make_input(r, m, dtype, "SUM", p, salt=r) for r in range(p)]
                want = torch.cat(parts)
                out = torch.empty(p * m, dtype=dtype)
                dist.all_gather_into_tensor(out, parts[rank].clone(), group=group)
                g = torch.empty(p * m, dtype=dtype)
                g = _gloo(lambda: (dist.all_gather_into_tensor(g, parts[rank].clone(),
                                                               group=mp.GLOO), g)[1])
                _check(failures, f"all_gather_into_tensor[{gname}] {dtype} m={m}", out, want, g)
                # in-place: input is this rank's slice of the output
                out = torch.zeros(p * m, dtype=dtype)
                out[rank * m:(rank + 1) * m] = parts[rank]
                dist.all_gather_into_tensor(out, out[rank * m:(rank + 1) * m], group=group)
                _check(failures, f"all_gather_into_tensor in-place[{gname}] {dtype} m={m}",
                       out, want)
                # list API with 2-d shapes
                outs = [torch.empty(m, 1, dtype=dtype) for _ in range(p)]
                dist.all_gather(outs, parts[rank].clone().view(m, 1), group=group)
                _check(failures, f"all_gather list[{gname}] {dtype} m={m}",
                       torch.cat(outs).view(-1), want)
    return failures


def broadcast_matrix(rank, p):
    failures = []
    for gname, group in _groups().items():
        for dtype in _dtypes(gname, p):
            for n in _counts(gname, p, 1001):
                for root in range(p):
                    want = cases.make_input(root, n, dtype, "SUM", p, salt=7)
                    x = want.clone() if rank == root else torch.zeros(n, dtype=dtype)
                    dist.broadcast(x, src=root, group=group)
                    _check(failures, f"broadcast[{gname}] {dtype} n={n} root={root}", x, want)
    # reduce: only the root's result is defined; non-roots keep their input.
    for op in ["SUM", "MAX", "AVG"]:
        for root in range(p):
            inputs = [cases.make_input(r, 17, torch.float32, op, p) for r in range(p)]
            x = inputs[rank].clone()
            dist.reduce(x, dst=root, op=cases.reduce_op(op))
            want = cases.reference(inputs, op, torch.float32, p) if rank == root else inputs[rank]
            _check(failures, f"reduce {op} root={root}", x, want)
    return failures


def large_matrix(rank, p):
    """64 MiB float32 all-reduce and friends against gloo."""
    failures = []
    n = 16 * 1024 * 1024  # 64 MiB of float32
    x = cases.make_input(rank, n, torch.float32, "SUM", p)
    y = x.clone()
    dist.all_reduce(x)
    dist.all_reduce(y, group=mp.GLOO)
    _check(failures, "allreduce 64MiB", x, y)
    m = n // p
    out = torch.empty(m)
    dist.reduce_scatter_tensor(out, cases.make_input(rank, p * m, torch.float32, "SUM", p))
    want = cases.reference([cases.make_input(r, p * m, torch.float32, "SUM", p)
                            for r in range(p)], "SUM", torch.float32, p)[rank * m:(rank + 1) * m]
    _check(failures, "reduce_scatter_tensor 64MiB", out, want)
    ag = torch.empty(p * m)
    dist.all_gather_into_tensor(ag, torch.full((m,), float(rank)))
    _check(failures, "all_gather_into_tensor 64MiB", ag,
           torch.arange(p, dtype=torch.float32).repeat_interleave(m))
    return failures


MATRICES = {
    "allreduce": allreduce_matrix,
    "reduce_scatter": reduce_scatter_matrix,
    "allgather": allgather_matrix,
    "broadcast": broadcast_matrix,
}


# Both transports run every collective at world sizes 2-4 (3 is the
# non-power-of-two case); world size 5 (5 processes on 2 cores) runs the reducing
# collectives on shared memory. A world of one has no links: one transport.
GRID = [(c, p, t) for c in sorted(MATRICES) for p in WORLD_SIZES for t in TRANSPORTS
        if (p < 5 or (c in ("allreduce", "reduce_scatter") and t == "shm"))
        and (p > 1 or t == "shm")]


@pytest.mark.parametrize("collective, world_size, transport", GRID)
def test_matrix_against_gloo(collective, world_size, transport):
    mp.run_checks(world_size, MATRICES[collective], timeout=600, transport=transport)


@pytest.mark.parametrize("world_size", [3])
def test_large_64mib(world_size, transport):
    mp.run_checks(world_size, large_matrix, timeout=600, transport=transport)
