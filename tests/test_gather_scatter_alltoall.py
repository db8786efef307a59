"""gather, scatter, all_to_all and all_to_all_single against gloo (tests.mp.GLOO) and
against the exact expected blocks, in real processes, on both CPU transports.

Every block carries values that depend on (sender, receiver, index), small integers
exact in every dtype, so a block that lands at the wrong rank or offset shows. World
sizes 1-3 run the full grid (every dtype, every root, counts 0, 1, p+1 and large,
uneven splits with empty blocks); 4 and 5 (4-5 processes on CI's 2 cores) run one
dtype of each kind. A second group forcing 64-byte segments runs the multi-segment
path on small tensors. Then the object collectives, a large run, argument errors and
ranks that disagree.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

import ringcoll
from tests import mp
from tests.cases import DTYPES, check_same, error_text, gloo_or_none, same

SUBSET = [torch.float32, torch.float16, torch.int32, torch.bool]
LARGE = 1000


def values(src, dst, n, dtype, salt=0):
    """Block of n elements that rank src sends to rank dst: at most 118, exact in
    every dtype (int8 included), and different for neighbouring (src, dst)."""
    i = torch.arange(n, dtype=torch.int64)
    v = (37 * src + 11 * dst + 5 * i + 3 * salt + 1) % 119
    if dtype == torch.bool:
        return (v % 2) == 1
    return v.to(dtype)


def _groups(p, sample):
    tiny = dist.new_group(backend="ringcoll", pg_options=ringcoll.Options(chunk_bytes=64),
                          timeout=timedelta(seconds=60))
    return {"default": None, "tiny-segments": tiny}


def _dtypes(gname, sample):
    return DTYPES if gname == "default" and not sample else SUBSET


def _counts(gname, p):
    return [0, 1, p + 1, LARGE] if gname == "default" else [p + 1, 101]



# Uneven split patterns: rows rank s sends to rank d. Each has empty blocks for p >= 2.
def _splits(pattern, s, d, p):
    if pattern == "uneven":
        return (s + 2 * d + 1) % (p + 2)  # 0 .. p+1
    if pattern == "uneven-large":
        return LARGE + s if (s + d) % 2 == 0 else (s * d) % 2
    raise ValueError(pattern)


# The schedules alone, no processes: every rank's steps walked on symbolic data.
def _walk(scheds, bufs):
    """Runs every rank's steps on bufs (one list of labels per rank); checks the
    structure (peers, ranges, no range written twice or both sent and written in a
    step, the k-th send from a to b pairs with the k-th receive on b from a with the
    same size) and that nothing unheld is sent."""
    p = len(scheds)
    for s in range(max((len(x["steps"]) for x in scheds), default=0)):
        sends, recvs = {}, {}
        for r, sched in enumerate(scheds):
            if s >= len(sched["steps"]):
                continue
            written, sent = [], []
            for kind, peer, b, e in sched["steps"][s]["transfers"]:
                assert 0 <= peer < p and peer != r, (s, r, kind, peer)
                assert 0 <= b <= e <= len(bufs[r]), (s, r, kind, b, e, len(bufs[r]))
                if b == e:
                    continue
                assert kind in ("send", "recv_copy"), kind
                if kind == "send":
                    assert all(v is not None for v in bufs[r][b:e]), f"rank {r} sends unheld"
                    sends.setdefault((r, peer), []).append(list(bufs[r][b:e]))
                    sent.append((b, e))
                else:
                    recvs.setdefault((peer, r), []).append((b, e))
                    written.append((b, e))
            for i, (b, e) in enumerate(written):
                for b2, e2 in written[i + 1:] + sent:
                    assert not (b < e2 and b2 < e), f"step {s} rank {r}: overlap"
        assert sorted(sends) == sorted(recvs), (s, sorted(sends), sorted(recvs))
        for (a, b_), datas in sends.items():
            ranges = recvs[(a, b_)]
            assert [len(d) for d in datas] == [e - b for b, e in ranges], (s, a, b_)
            for d, (b, e) in zip(datas, ranges):
                bufs[b_][b:e] = d


@pytest.mark.parametrize("p", range(1, 10))
def test_schedules_move_every_block_once(p):
    from ringcoll import _C

    for m in (0, 1, 3):
        n = p * m
        for root in range(p):
            # gather: rank i's block i reaches the root's block i
            scheds = [_C.exchange_schedule("gather", p, r, n, root) for r in range(p)]
            bufs = [[("g", r, i) if r * m <= i < (r + 1) * m else None for i in range(n)]
                    for r in range(p)]
            _walk(scheds, bufs)
            assert bufs[root] == [("g", i // m, i) for i in range(n)], (p, m, root)
            assert all(tuple(x["result"]) == ((0, n) if r == root else (0, 0))
                       for r, x in enumerate(scheds))
            # scatter: the root's block r reaches rank r's block r
            scheds = [_C.exchange_schedule("scatter", p, r, n, root) for r in range(p)]
            bufs = [[("s", i) if r == root else None for i in range(n)] for r in range(p)]
            _walk(scheds, bufs)
            for r in range(p):
                assert bufs[r][r * m:(r + 1) * m] == [("s", i) for i in range(r * m, (r + 1) * m)]
                assert tuple(scheds[r]["result"]) == (r * m, (r + 1) * m)
    # all-to-all, uneven with empty blocks: rank s's block for d reaches rank d
    for salt in range(3):
        cnt = [[(7 * s + 3 * d + salt) % 4 for d in range(p)] for s in range(p)]
        for s in range(p):
            cnt[s][s] = 0  # the own block is the prologue's, not the schedule's
        scheds = [_C.exchange_schedule("alltoall", p, r, send_counts=cnt[r],
                                       recv_counts=[cnt[s][r] for s in range(p)])
                  for r in range(p)]
        bufs = [[("a", r, d, i) for d in range(p) for i in range(cnt[r][d])]
                + [None] * sum(cnt[s][r] for s in range(p)) for r in range(p)]
        _walk(scheds, bufs)
        for r in range(p):
            b, e = scheds[r]["result"]
            assert bufs[r][b:e] == [("a", s, r, i) for s in range(p) for i in range(cnt[s][r])]
            assert e == len(bufs[r]) and b == sum(cnt[r])
        assert all(len(x["steps"]) == max(p - 1, 0) for x in scheds)


def gather_scatter_matrix(rank, p, sample):
    failures = []
    for gname, group in _groups(p, sample).items():
        for dtype in _dtypes(gname, sample):
            for m in _counts(gname, p):
                for root in range(p):
                    what = f"[{gname}] {dtype} m={m} root={root}"
                    # gather: rank r's block r reaches the root, 2-d shapes
                    parts = [values(r, root, m, dtype).view(m, 1) for r in range(p)]
                    gl = ([torch.zeros(m, 1, dtype=dtype) for _ in range(p)]
                          if rank == root else None)
                    x = parts[rank].clone()
                    dist.gather(x, gl, dst=root, group=group)
                    g = ([torch.zeros(m, 1, dtype=dtype) for _ in range(p)]
                         if rank == root else None)
                    g = gloo_or_none(lambda: (dist.gather(parts[rank].clone(), g, dst=root,
                                                   group=mp.GLOO), g)[1])
                    if not same(x, parts[rank]):
                        failures.append(f"gather{what}: input changed")
                    if rank == root:
                        check_same(failures, f"gather{what}", torch.cat(gl), torch.cat(parts),
                               None if g is None else torch.cat(g))
                    # scatter: the root's block r reaches rank r
                    blocks = [values(root, r, m, dtype, salt=1) for r in range(p)]
                    sl = [b.clone() for b in blocks] if rank == root else None
                    y = torch.zeros(m, dtype=dtype)
                    dist.scatter(y, sl, src=root, group=group)
                    gy = torch.zeros(m, dtype=dtype)
                    gy = gloo_or_none(lambda: (dist.scatter(
                        gy, [b.clone() for b in blocks] if rank == root else None,
                        src=root, group=mp.GLOO), gy)[1])
                    check_same(failures, f"scatter{what}", y, blocks[rank], gy)
    # Non-contiguous tensors: gathered into and scattered from transposed views.
    root = p - 1
    x = values(rank, 0, 6, torch.float32).view(2, 3).t()
    gl = [torch.zeros(2, 3).t() for _ in range(p)] if rank == root else None
    dist.gather(x, gl, dst=root)
    if rank == root:
        for r in range(p):
            check_same(failures, f"gather non-contiguous from {r}", gl[r],
                   values(r, 0, 6, torch.float32).view(2, 3).t())
    y = torch.zeros(3, 2).t()
    sl = [values(root, r, 6, torch.float32).view(3, 2).t() for r in range(p)]
    dist.scatter(y, sl if rank == root else None, src=root)
    check_same(failures, "scatter non-contiguous", y, values(root, rank, 6, torch.float32)
           .view(3, 2).t())
    # Async: the work's wait() gives the result.
    gl = [torch.zeros(3) for _ in range(p)] if rank == 0 else None
    work = dist.gather(values(rank, 0, 3, torch.float32), gl, dst=0, async_op=True)
    work.wait()
    if rank == 0:
        check_same(failures, "gather async", torch.cat(gl),
               torch.cat([values(r, 0, 3, torch.float32) for r in range(p)]))
    return failures


def alltoall_matrix(rank, p, sample):
    failures = []
    for gname, group in _groups(p, sample).items():
        for dtype in _dtypes(gname, sample):
            patterns = [("equal", m) for m in _counts(gname, p)]
            patterns += [("uneven", None)] + ([("uneven-large", None)] if gname == "default"
                                              else [])
            for pattern, m in patterns:
                what = f"[{gname}] {dtype} {pattern}{'' if m is None else f' m={m}'}"

                def rows(s, d):
                    return m if pattern == "equal" else _splits(pattern, s, d, p)

                # all_to_all_single (alltoall_base): rows of 2 elements along dim 0
                send = [values(rank, d, 2 * rows(rank, d), dtype).view(-1, 2) for d in range(p)]
                want = torch.cat([values(s, rank, 2 * rows(s, rank), dtype).view(-1, 2)
                                  for s in range(p)])
                in_splits = [rows(rank, d) for d in range(p)]
                out_splits = [rows(s, rank) for s in range(p)]
                kw = {} if pattern == "equal" else {"output_split_sizes": out_splits,
                                                    "input_split_sizes": in_splits}
                inp = torch.cat(send)
                out = torch.zeros_like(want)
                dist.all_to_all_single(out, inp.clone(), group=group, **kw)
                g = torch.zeros_like(want)
                g = gloo_or_none(lambda: (dist.all_to_all_single(g, inp.clone(), group=mp.GLOO, **kw),
                                   g)[1])
                check_same(failures, f"all_to_all_single{what}", out, want, g)
                # all_to_all (list): 1-d blocks of any size
                ins = [values(rank, d, rows(rank, d), dtype, salt=2) for d in range(p)]
                outs = [torch.zeros(rows(s, rank), dtype=dtype) for s in range(p)]
                dist.all_to_all(outs, [t.clone() for t in ins], group=group)
                wants = [values(s, rank, rows(s, rank), dtype, salt=2) for s in range(p)]
                gouts = [torch.zeros(rows(s, rank), dtype=dtype) for s in range(p)]
                gouts = gloo_or_none(lambda: (dist.all_to_all(gouts, [t.clone() for t in ins],
                                                       group=mp.GLOO), gouts)[1])
                for s in range(p):
                    check_same(failures, f"all_to_all{what} from {s}", outs[s], wants[s],
                           None if gouts is None else gouts[s])
    # In place: the same tensor as input and output, and the same list both ways.
    buf = torch.cat([values(rank, d, 3, torch.int64) for d in range(p)])
    dist.all_to_all_single(buf, buf)
    check_same(failures, "all_to_all_single in place", buf,
           torch.cat([values(s, rank, 3, torch.int64) for s in range(p)]))
    lst = [values(rank, d, 2, torch.int32) for d in range(p)]
    dist.all_to_all(lst, lst)
    for s in range(p):
        check_same(failures, f"all_to_all in place from {s}", lst[s], values(s, rank, 2, torch.int32))
    # Non-contiguous output and async.
    out = torch.zeros(2, 2 * p).t()
    work = dist.all_to_all_single(out, torch.cat([values(rank, d, 4, torch.float32).view(2, 2)
                                                  for d in range(p)]), async_op=True)
    work.wait()
    check_same(failures, "all_to_all_single non-contiguous async", out,
           torch.cat([values(s, rank, 4, torch.float32).view(2, 2) for s in range(p)]))
    return failures


def objects_world(rank, p):
    failures = []
    for root in range(p):
        obj = {"rank": rank, "payload": list(range(rank * 3))}  # sizes differ by rank
        got = [None] * p if rank == root else None
        dist.gather_object(obj, got, dst=root)
        if rank == root and got != [{"rank": r, "payload": list(range(r * 3))}
                                    for r in range(p)]:
            failures.append(f"gather_object root={root}: {got}")
        objs = [("to", r, "x" * (r * 5)) for r in range(p)] if rank == root else None
        out = [None]
        dist.scatter_object_list(out, objs, src=root)
        if out[0] != ("to", rank, "x" * (rank * 5)):
            failures.append(f"scatter_object_list root={root}: {out}")
    return failures


def large_world(rank, p):
    """Blocks of several MiB: every transfer is cut into many 1 MiB segments."""
    failures = []
    m = (1 << 20) + 3  # float32: 4 MiB + 12 B per block
    root = 1 % p
    gl = [torch.zeros(m) for _ in range(p)] if rank == root else None
    dist.gather(values(rank, root, m, torch.float32), gl, dst=root)
    if rank == root:
        for r in range(p):
            check_same(failures, f"gather 4MiB from {r}", gl[r], values(r, root, m, torch.float32))
    y = torch.zeros(m)
    dist.scatter(y, [values(root, r, m, torch.float32) for r in range(p)] if rank == root
                 else None, src=root)
    check_same(failures, "scatter 4MiB", y, values(root, rank, m, torch.float32))
    rows = [[(1 << 20) * (1 + (s + d) % 3) + s for d in range(p)] for s in range(p)]
    inp = torch.cat([values(rank, d, rows[rank][d], torch.float32) for d in range(p)])
    want = torch.cat([values(s, rank, rows[s][rank], torch.float32) for s in range(p)])
    out = torch.zeros_like(want)
    dist.all_to_all_single(out, inp, [rows[s][rank] for s in range(p)], rows[rank])
    g = torch.zeros_like(want)
    dist.all_to_all_single(g, inp, [rows[s][rank] for s in range(p)], rows[rank], group=mp.GLOO)
    check_same(failures, "all_to_all_single uneven 4-12 MiB", out, want, g)
    return failures


# p = 1 has no links (one transport); 4 and 5 sample dtypes.
# The full grid for p <= 3; p = 4 and 5 sampled, one transport each (CI time).
GRID = [(p, t) for p in [1, 2, 3] for t in ["shm", "gloo"] if p > 1 or t == "shm"] + \
    [(4, "gloo"), (5, "shm")]


@pytest.mark.parametrize("world_size, transport", GRID)
def test_gather_scatter_againstgloo_or_none(world_size, transport):
    mp.run_checks(world_size, gather_scatter_matrix, world_size >= 4, timeout=600,
                  transport=transport)


@pytest.mark.parametrize("world_size, transport", GRID)
def test_alltoall_againstgloo_or_none(world_size, transport):
    mp.run_checks(world_size, alltoall_matrix, world_size >= 4, timeout=600,
                  transport=transport)


@pytest.mark.parametrize("world_size", [1, 3])
def test_object_collectives(world_size, transport):
    if world_size == 1 and transport == "gloo":
        pytest.skip("a world of one has no links")
    mp.run_checks(world_size, objects_world, timeout=300, transport=transport)


def test_large_blocks(transport):
    mp.run_checks(3, large_world, timeout=600, transport=transport)


# Argument errors: each raises on the calling rank before anything is sent, with a
# message that starts with the op and names both values. Root-side mistakes run in
# a world of one (a second rank would wait for the root); all-to-all mistakes are
# made by both ranks of a world of two.
def bad_root_args(rank, p):
    f32, i32 = torch.float32, torch.int32
    return {
        "gather_list_length": error_text(lambda: dist.gather(
            torch.ones(2), [torch.ones(2), torch.ones(2)], dst=0)),
        "gather_numel": error_text(lambda: dist.gather(torch.ones(2), [torch.ones(3)], dst=0)),
        "scatter_numel": error_text(lambda: dist.scatter(torch.ones(2), [torch.ones(5)], src=0)),
        "scatter_dtype": error_text(lambda: dist.scatter(
            torch.ones(2, dtype=f32), [torch.ones(2, dtype=i32)], src=0)),
    }


def test_bad_root_arguments():
    (res,) = mp.run_world(1, bad_root_args, timeout=120)
    assert "ringcoll::gather: output list has 2 tensors but the group has 1 ranks" \
        in res["gather_list_length"], res
    assert "ringcoll::gather: output tensor 0 has 3 elements but the input has 2" \
        in res["gather_numel"], res
    assert "ringcoll::scatter: input tensor 0 has 5 elements but the output has 2" \
        in res["scatter_numel"], res
    # torch checks dtypes itself before the backend sees them; either way it raises.
    assert res["scatter_dtype"] != "no error", res


def bad_alltoall_args(rank, p):
    out = {
        "split_sum": error_text(lambda: dist.all_to_all_single(
            torch.zeros(4), torch.zeros(4), [2, 2], [1, 2])),
        "split_count": error_text(lambda: dist.all_to_all_single(
            torch.zeros(4), torch.zeros(4), [2, 2], [1, 1, 2])),
        "equal_rows": error_text(lambda: dist.all_to_all_single(torch.zeros(4), torch.zeros(5))),
        "self_block": error_text(lambda: dist.all_to_all_single(
            torch.zeros(5), torch.zeros(4), [3, 2] if rank == 0 else [2, 3], [2, 2])),
        "list_length": error_text(lambda: dist.all_to_all(
            [torch.zeros(1)] * 3, [torch.zeros(1)] * 2)),
        "list_self": error_text(lambda: dist.all_to_all(
            [torch.zeros(2), torch.zeros(2)], [torch.zeros(1), torch.zeros(1)])),
    }
    dist.barrier()  # the group still works: nothing was sent
    return out


def test_bad_alltoall_arguments():
    res = mp.run_world(2, bad_alltoall_args, timeout=120)
    for rank, r in enumerate(res):
        assert ("ringcoll::alltoall_base: input split sizes add up to 3 rows but the "
                "input tensor has 4 rows") in r["split_sum"], (rank, r)
        assert "ringcoll::alltoall_base: input split sizes name 3 ranks but the group has 2" \
            in r["split_count"], (rank, r)
        assert ("ringcoll::alltoall_base: input tensor has 5 rows (dim 0), which do not split "
                "into 2 equal parts") in r["equal_rows"], (rank, r)
        assert (f"ringcoll::alltoall_base: rank {rank} sends 2 elements to itself but "
                f"receives 3 from itself") in r["self_block"], (rank, r)
        assert "ringcoll::alltoall: output list has 3 tensors but the group has 2 ranks" \
            in r["list_length"], (rank, r)
        assert (f"ringcoll::alltoall: rank {rank} sends 1 elements to itself but receives 2 "
                "from itself") in r["list_self"], (rank, r)


# Ranks that disagree about a pair's block size: rank 0 sends 3 rows to rank 1,
# which expects 2. Both ranks must raise naming both calls within a second, with
# nothing written, and the group is unusable afterwards.
def disagreeing_splits(rank, p):
    if rank == 0:
        inp, in_splits, out_splits = torch.ones(5), [2, 3], [2, 2]
    else:
        inp, in_splits, out_splits = torch.ones(4), [2, 2], [2, 2]
    out = torch.full((4,), -1.0)
    dist.barrier(group=mp.GLOO)
    t0 = time.monotonic()
    msg = error_text(lambda: dist.all_to_all_single(out, inp, out_splits, in_splits))
    elapsed = time.monotonic() - t0
    after = error_text(lambda: dist.all_reduce(torch.ones(1)))
    return {"msg": msg, "elapsed": elapsed, "intact": bool((out == -1).all()), "after": after}


def test_disagreeing_split_sizes_raise_on_both_ranks(transport):
    res = mp.run_world(2, disagreeing_splits, pg_timeout_s=30, transport=transport, timeout=120)
    for rank, r in enumerate(res):
        msg = r["msg"]
        assert "ranks disagree about collective #1" in msg, (rank, msg)
        assert "rank 0 called alltoall_base(float32, 3 elements to rank 1, 2 from it" in msg, \
            (rank, msg)
        assert "rank 1 called alltoall_base(float32, 2 elements to rank 0, 2 from it" in msg, \
            (rank, msg)
        assert r["elapsed"] < 1.0, (rank, r["elapsed"], msg)
        assert r["intact"], f"rank {rank} wrote its output before the error: {msg}"
        assert "unusable after an earlier failure" in r["after"], (rank, r["after"])


def _gather_single_rank(rank, p):
    fails = []
    for dtype in [torch.float32, torch.int64, torch.bool, torch.complex64]:
        for n in [0, 1, p + 1, LARGE]:
            for root in range(p):
                mine = values(rank, root, n, torch.float32 if dtype.is_complex else dtype)
                mine = mine.to(dtype)
                # On the root a stacked [p, n] output (same layout as flat p * n).
                out = torch.full((p, n), 7).to(dtype) if rank == root else None
                dist.gather_single(mine, out, group_dst=root)
                if rank == root:
                    want = torch.stack([values(r, root, n, torch.float32 if dtype.is_complex
                                               else dtype).to(dtype) for r in range(p)])
                    if not torch.equal(out, want):
                        fails.append(f"gather_single {dtype} n={n} root={root}: {out} != {want}")
    # A non-contiguous root output is an error naming the op, on the root.
    if rank == 0:
        try:
            dist.gather_single(torch.ones(2), torch.zeros(2, p).t(), group_dst=0)
            fails.append("non-contiguous output: no error")
        except (RuntimeError, ValueError) as e:
            if "contiguous" not in str(e):
                fails.append(f"non-contiguous output: unclear error {e}")
        try:
            dist.gather_single(torch.ones(2), torch.zeros(2 * p + 1), group_dst=0)
            fails.append("output of the wrong size: no error")
        except (RuntimeError, ValueError) as e:
            if "elements" not in str(e) or str(2 * p + 1) not in str(e):
                fails.append(f"output of the wrong size: unclear error {e}")
    return fails


@pytest.mark.every_torch  # so that CI runs it on the torches that have the API
@pytest.mark.skipif(not hasattr(dist, "gather_single"),
                    reason="gather_single is a torch >= 2.14 API (CI runs it on 2.14.1 and 2.15.0)")
def test_gather_single_every_root():
    mp.run_checks(3, _gather_single_rank, transport="shm")
