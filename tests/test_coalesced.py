"""The coalesced collectives (allgather_coalesced, allgather_into_tensor_coalesced,
reduce_scatter_tensor_coalesced) against gloo (tests.mp.GLOO, which implements all
three) and against exact references, in real processes, on both CPU transports.

Each call coalesces several tensors of different sizes (0, 1, p+1, a large one,
2-d shapes) through the entry points users hit: dist.all_gather_coalesced,
dist.all_gather_into_tensor and dist.reduce_scatter_tensor inside
dist._coalescing_manager (synchronous and async_ops), and DTensor (full_tensor(),
redistribute from Partial), whose functional collectives call the coalesced
methods even for one tensor. Values are small integers exact in every dtype, so
results compare bitwise. World sizes 1-3 run the full grid (every dtype, SUM for
all of them and every valid op for float32 and int32); 4 and 5 (on CI's 2 cores)
run one dtype of each kind, one transport each. A group forcing 64-byte segments
runs the multi-segment path. Then mixed dtypes and non-contiguous tensors through
the ProcessGroup methods, argument errors, and ranks that disagree about the list.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

import ringcoll
from tests import mp
from tests.cases import (DTYPES, OPS, check_same, error_text, gloo_or_none, make_input,
                         op_valid, reduce_op, reference)

SUBSET = [torch.float32, torch.float16, torch.int32, torch.bool]
LARGE = 1000


def values(src, idx, n, dtype, salt=0):
    """Rank src's tensor idx (n elements): at most 118, exact in every dtype, and
    different for neighbouring (src, idx)."""
    i = torch.arange(n, dtype=torch.int64)
    v = (37 * src + 11 * idx + 5 * i + 3 * salt + 1) % 119
    if dtype == torch.bool:
        return (v % 2) == 1
    return v.to(dtype)


def _shapes(p, gname):
    """Lists of per-rank shapes coalesced in one call: each count alone, then a
    mixed list (a 2-d tensor, an empty one, a large one)."""
    if gname != "default":
        return [[(p + 1,), (101,), (2, 3)]]
    return [[(0,)], [(1,)], [(p + 1,)], [(LARGE,)],
            [(p + 1,), (0,), (2, 3), (LARGE,), (1,)]]


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n



def _gather_calls(rank, p, shapes, dtype, group, async_op, salt=0):
    """all_gather_coalesced and all_gather_into_tensor (coalesced) on `group`;
    returns (lists: outs[r][i], flats: outs[i]) as this rank sees them."""
    ins = [values(rank, i, _numel(s), dtype, salt).view(s) for i, s in enumerate(shapes)]
    lists = [[torch.zeros(s, dtype=dtype) for s in shapes] for _ in range(p)]
    work = dist.all_gather_coalesced(lists, [t.clone() for t in ins], group=group,
                                     async_op=async_op)
    if async_op:
        work.wait()
    flats = [torch.zeros((p * s[0],) + tuple(s[1:]), dtype=dtype) for s in shapes]
    with dist._coalescing_manager(group=group, async_ops=async_op) as cm:
        for o, t in zip(flats, ins):
            dist.all_gather_into_tensor(o, t.clone(), group=group)
    if async_op:
        cm.wait()
    return lists, flats


def _reduce_scatter_call(rank, p, shapes, dtype, op, group, async_op):
    ins = [make_input(rank, p * _numel(s), dtype, op, p, salt=7 * i)
           .view((p * s[0],) + tuple(s[1:])) for i, s in enumerate(shapes)]
    outs = [torch.zeros(s, dtype=dtype) for s in shapes]
    with dist._coalescing_manager(group=group, async_ops=async_op) as cm:
        for o, t in zip(outs, ins):
            dist.reduce_scatter_tensor(o, t.clone(), op=reduce_op(op), group=group)
    if async_op:
        cm.wait()
    return outs


def coalesced_matrix(rank, p, sample):
    failures = []
    tiny = dist.new_group(backend="ringcoll", pg_options=ringcoll.Options(chunk_bytes=64),
                          timeout=timedelta(seconds=60))
    for gname, group in {"default": None, "tiny-segments": tiny}.items():
        dtypes = DTYPES if gname == "default" and not sample else SUBSET
        for dtype in dtypes:
            for k, shapes in enumerate(_shapes(p, gname)):
                async_op = k % 2 == 1
                what = f"[{gname}] {dtype} {shapes}{' async' if async_op else ''}"
                # all-gathers: rank r's tensor i at block r of output i
                lists, flats = _gather_calls(rank, p, shapes, dtype, group, async_op)
                g = gloo_or_none(lambda: _gather_calls(rank, p, shapes, dtype, mp.GLOO, False))
                for i, s in enumerate(shapes):
                    want = [values(r, i, _numel(s), dtype).view(s) for r in range(p)]
                    for r in range(p):
                        check_same(failures, f"all_gather_coalesced{what} tensor {i} from {r}",
                               lists[r][i], want[r], None if g is None else g[0][r][i])
                    check_same(failures, f"all_gather_into_tensor coalesced{what} tensor {i}",
                           flats[i], torch.cat(want), None if g is None else g[1][i])
                # reduce-scatter: SUM everywhere, every valid op for two dtypes on
                # the mixed list
                ops = ["SUM"]
                if dtype in (torch.float32, torch.int32) and len(shapes) > 1 and not sample:
                    ops = [o for o in OPS if op_valid(o, dtype)]
                for op in ops:
                    if not op_valid(op, dtype):
                        continue
                    w = f"reduce_scatter_tensor coalesced{what} {op}"
                    outs = _reduce_scatter_call(rank, p, shapes, dtype, op, group, async_op)
                    # gloo's AVG and PREMUL_SUM are not ringcoll's exact ones (int
                    # AVG fails there, float AVG rounds differently): those compare
                    # with the reference only.
                    g = None if op in ("AVG", "PREMUL_SUM") else gloo_or_none(
                        lambda: _reduce_scatter_call(rank, p, shapes, dtype, op, mp.GLOO,
                                                     False))
                    for i, s in enumerate(shapes):
                        n = _numel(s)
                        full = reference([make_input(r, p * n, dtype, op, p, salt=7 * i)
                                          for r in range(p)], op, dtype, p)
                        want = full[rank * n:(rank + 1) * n].view(s)
                        check_same(failures, f"{w} tensor {i}", outs[i], want,
                               None if g is None else g[i])
    return failures


def _pg():
    return dist.distributed_c10d._get_default_group()


def methods_world(rank, p):
    """The ProcessGroup methods directly: mixed dtypes (all-gather moves bytes), a
    0-dim input, non-contiguous inputs and outputs."""
    failures = []
    pg = _pg()
    specs = [(torch.int8, (3,)), (torch.float32, ()), (torch.float64, (2, 2)),
             (torch.bool, (5,)), (torch.bfloat16, (0,)), (torch.int64, (1,))]
    ins = [values(rank, i, _numel(s), d).view(s) for i, (d, s) in enumerate(specs)]
    outs = [torch.zeros((p * _numel(s),), dtype=d) for d, s in specs]
    pg.allgather_into_tensor_coalesced(outs, ins).wait()
    for i, (d, s) in enumerate(specs):
        check_same(failures, f"allgather_into_tensor_coalesced mixed dtypes tensor {i}", outs[i],
               torch.cat([values(r, i, _numel(s), d) for r in range(p)]))
    lists = [[torch.zeros(s, dtype=d) for d, s in specs] for _ in range(p)]
    pg.allgather_coalesced(lists, ins).wait()
    for r in range(p):
        for i, (d, s) in enumerate(specs):
            check_same(failures, f"allgather_coalesced mixed dtypes tensor {i} from {r}",
                   lists[r][i], values(r, i, _numel(s), d).view(s))
    # Non-contiguous: transposed inputs and outputs.
    a = values(rank, 0, 6, torch.float32).view(2, 3).t()          # (3, 2), strided
    oa = torch.zeros(2, 3 * p).t()                                  # (3p, 2), strided
    b = values(rank, 1, 4, torch.float32).view(2, 2).t()
    ob = torch.zeros(2, 2 * p).t()
    pg.allgather_into_tensor_coalesced([oa, ob], [a, b]).wait()
    check_same(failures, "allgather_into_tensor_coalesced non-contiguous a", oa,
           torch.cat([values(r, 0, 6, torch.float32).view(2, 3).t() for r in range(p)]))
    check_same(failures, "allgather_into_tensor_coalesced non-contiguous b", ob,
           torch.cat([values(r, 1, 4, torch.float32).view(2, 2).t() for r in range(p)]))
    x = make_input(rank, 2 * 3 * p, torch.float32, "SUM", p).view(3 * p, 2)
    xt = x.t().contiguous().t()                                     # same values, strided
    ox = torch.zeros(2, 3).t()
    pg.reduce_scatter_tensor_coalesced([ox], [xt]).wait()
    full = reference([make_input(r, 6 * p, torch.float32, "SUM", p).view(3 * p, 2)
                      for r in range(p)], "SUM", torch.float32, p)
    check_same(failures, "reduce_scatter_tensor_coalesced non-contiguous", ox,
           full[3 * rank:3 * (rank + 1)])
    return failures


def dtensor_world(rank, p):
    """DTensor's collectives are the functional ones (all_gather_tensor,
    reduce_scatter_tensor): full_tensor() of even and uneven shards on dims 0 and
    1, and Partial -> Shard(0)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Shard, distribute_tensor

    failures = []
    mesh = init_device_mesh("cpu", (p,))
    assert mesh.get_group().group_name == _pg().group_name  # on the ringcoll group
    for shape in [(2 * p, 3), (2 * p + 1, 3), (3, p + 2), (1,)]:
        full = values(0, 0, _numel(shape), torch.float32).view(shape)
        for dim in range(len(shape)):
            d = distribute_tensor(full, mesh, [Shard(dim)])
            check_same(failures, f"full_tensor {shape} Shard({dim})", d.full_tensor(), full)
    local = make_input(rank, 4 * p, torch.float32, "SUM", p).view(2 * p, 2)
    part = DTensor.from_local(local, mesh, [Partial()])
    want = reference([make_input(r, 4 * p, torch.float32, "SUM", p) for r in range(p)],
                     "SUM", torch.float32, p).view(2 * p, 2)
    check_same(failures, "Partial -> Shard(0)", part.redistribute(mesh, [Shard(0)]).to_local(),
           want[2 * rank:2 * rank + 2])
    check_same(failures, "Partial full_tensor", part.full_tensor(), want)
    return failures


def large_world(rank, p):
    """Several MiB in one coalesced call: every transfer cut into many segments."""
    failures = []
    m = (1 << 20) + 3
    shapes = [(m,), (5,), (m // 2,)]
    _, flats = _gather_calls(rank, p, shapes, torch.float32, None, False)
    for i, s in enumerate(shapes):
        check_same(failures, f"all_gather_into_tensor coalesced 4MiB tensor {i}", flats[i],
               torch.cat([values(r, i, s[0], torch.float32) for r in range(p)]))
    outs = _reduce_scatter_call(rank, p, shapes, torch.float32, "SUM", None, False)
    for i, s in enumerate(shapes):
        full = reference([make_input(r, p * s[0], torch.float32, "SUM", p, salt=7 * i)
                          for r in range(p)], "SUM", torch.float32, p)
        check_same(failures, f"reduce_scatter_tensor coalesced 4MiB tensor {i}", outs[i],
               full[rank * s[0]:(rank + 1) * s[0]])
    return failures


# The full grid for p <= 3 on both transports; p = 4 and 5 sampled, one transport
# each (CI time).
GRID = [(p, t) for p in [1, 2, 3] for t in ["shm", "gloo"] if p > 1 or t == "shm"] + \
    [(4, "gloo"), (5, "shm")]


@pytest.mark.parametrize("world_size, transport", GRID)
def test_coalesced_againstgloo_or_none(world_size, transport):
    mp.run_checks(world_size, coalesced_matrix, world_size >= 4, timeout=600,
                  transport=transport)


@pytest.mark.parametrize("world_size", [1, 3])
def test_process_group_methods(world_size):
    mp.run_checks(world_size, methods_world, timeout=300)


@pytest.mark.parametrize("world_size", [2, 3])
def test_dtensor_full_tensor(world_size):
    mp.run_checks(world_size, dtensor_world, timeout=300)


def test_large_coalesced(transport):
    mp.run_checks(3, large_world, timeout=600, transport=transport)


# Argument errors: both ranks of a world of two make the same mistake, so each
# raises on its calling thread before anything is sent and the group still works.
def bad_args(rank, p):
    pg = _pg()
    f32, i32, f64 = torch.float32, torch.int32, torch.float64
    out = {
        "ag_dtype": error_text(lambda: pg.allgather_into_tensor_coalesced(
            [torch.zeros(4), torch.zeros(2, dtype=i32)], [torch.zeros(2), torch.zeros(1)])),
        "ag_numel": error_text(lambda: pg.allgather_into_tensor_coalesced(
            [torch.zeros(5)], [torch.zeros(3)])),
        "ag_count": error_text(lambda: pg.allgather_into_tensor_coalesced(
            [torch.zeros(2)], [torch.zeros(1), torch.zeros(1)])),
        "agc_lists": error_text(lambda: pg.allgather_coalesced(
            [[torch.zeros(1)]], [torch.zeros(1)])),
        "agc_numel": error_text(lambda: pg.allgather_coalesced(
            [[torch.zeros(2)], [torch.zeros(3)]], [torch.zeros(2)])),
        "rs_mixed": error_text(lambda: pg.reduce_scatter_tensor_coalesced(
            [torch.zeros(1), torch.zeros(1, dtype=f64)],
            [torch.zeros(2, dtype=f32), torch.zeros(2, dtype=f64)])),
        "rs_numel": error_text(lambda: pg.reduce_scatter_tensor_coalesced(
            [torch.zeros(2)], [torch.zeros(3)])),
        "rs_op": error_text(lambda: pg.reduce_scatter_tensor_coalesced(
            [torch.zeros(1)], [torch.zeros(2)], _rs_opts(dist.ReduceOp.BAND))),
    }
    t = torch.ones(1)
    dist.all_reduce(t)  # the group still works: nothing was sent
    out["after"] = t.item()
    return out


def _rs_opts(op):
    opts = dist.ReduceScatterOptions()
    opts.reduceOp = op
    return opts


def test_bad_arguments():
    res = mp.run_world(2, bad_args, timeout=120)
    op_ag = "ringcoll::allgather_into_tensor_coalesced: "
    op_rs = "ringcoll::reduce_scatter_tensor_coalesced: "
    for rank, r in enumerate(res):
        assert op_ag + "output 1 has dtype Int but input 1 has dtype Float" in r["ag_dtype"], r
        assert (op_ag + "output 0 has 5 elements but must have 6 (world size x input 0 numel)"
                in r["ag_numel"]), r
        assert op_ag + "1 output tensors but 2 input tensors" in r["ag_count"], r
        assert ("ringcoll::allgather_coalesced: 1 output lists but the group has 2 ranks"
                in r["agc_lists"]), r
        assert ("ringcoll::allgather_coalesced: output 1[0] has 3 elements but input 0 has 2"
                in r["agc_numel"]), r
        assert op_rs + "input 1 has dtype Double but input 0 has dtype Float" in r["rs_mixed"], r
        assert (op_rs + "input 0 has 3 elements but must have 4 (world size x output 0 numel)"
                in r["rs_numel"]), r
        assert op_rs + "op BAND is not supported for dtype float32" in r["rs_op"], r
        assert r["after"] == 2.0, r


# Ranks that disagree about the tensor list: the same total count, another split.
# Both raise naming both calls within a second, with nothing written.
def disagreeing_lists(rank, p):
    sizes = [3, 5] if rank == 0 else [5, 3]
    ins = [torch.ones(n) for n in sizes]
    outs = [torch.full((2 * n,), -1.0) for n in sizes]
    dist.barrier(group=mp.GLOO)
    t0 = time.monotonic()
    msg = error_text(lambda: _pg().allgather_into_tensor_coalesced(outs, ins).wait())
    elapsed = time.monotonic() - t0
    return {"msg": msg, "elapsed": elapsed, "intact": all(bool((o == -1).all()) for o in outs)}


def test_disagreeing_tensor_lists_raise_on_both_ranks(transport):
    res = mp.run_world(2, disagreeing_lists, pg_timeout_s=30, transport=transport, timeout=120)
    for rank, r in enumerate(res):
        msg = r["msg"]
        assert "ranks disagree about collective #1" in msg, (rank, msg)
        for who in (0, 1):
            assert (f"rank {who} called allgather_into_tensor_coalesced(float32, 8 elements, "
                    "tensor list #") in msg, (rank, msg)
        assert r["elapsed"] < 1.0, (rank, r["elapsed"], msg)
        assert r["intact"], f"rank {rank} wrote its output before the error: {msg}"
