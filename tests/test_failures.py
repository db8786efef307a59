"""Ranks that disagree about a collective, and groups torn down with work in flight.

Each mistake of the table in docs/FAILURES.md runs here on both CPU transports:
every rank must raise torch.distributed.DistBackendError naming both calls within a
second, no rank may be killed, and no output may be written. Then abort(),
shutdown() and destroy_process_group with a collective stuck on a peer that never
comes: they return promptly and the collective fails saying why.
"""

from __future__ import annotations

import threading
import time

import pytest
import torch
import torch.distributed as dist

from tests import mp

# Each row: what rank 0 and rank 1 call (row_call below), and what each rank's
# message must say about the two calls.
ROWS = {
    "count": ("allreduce(float32, 10 elements, SUM", "allreduce(float32, 12 elements, SUM"),
    "count_1m": ("allreduce(float32, 1048576 elements, SUM",
                 "allreduce(float32, 1048577 elements, SUM"),
    "dtype": ("allreduce(float32, 10 elements, SUM", "allreduce(int32, 10 elements, SUM"),
    "op": ("allreduce(float32, 10 elements, SUM", "allreduce(float32, 10 elements, MAX"),
    "method": ("allreduce(float32, 10 elements, SUM", "broadcast(float32, 10 elements, root 0"),
    "method_root1": ("allreduce(float32, 10 elements, SUM",
                     "broadcast(float32, 10 elements, root 1"),
    "root": ("broadcast(float32, 10 elements, root 0", "broadcast(float32, 10 elements, root 1"),
    "allgather": ("all_gather_into_tensor(float32, 4 elements", "all_gather_into_tensor(float32, 5 elements"),
}


def _call(row, rank, p):
    """Rank `rank`'s side of `row`: returns (the tensor the call may write, a thunk)."""
    n = 10
    if row == "count":
        x = torch.full((10 if rank == 0 else 12,), float(rank + 1))
        return x, lambda: dist.all_reduce(x)
    if row == "count_1m":
        x = torch.full(((1 << 20) + rank,), float(rank + 1))
        return x, lambda: dist.all_reduce(x)
    if row == "dtype":
        x = torch.full((n,), rank + 1, dtype=torch.float32 if rank == 0 else torch.int32)
        return x, lambda: dist.all_reduce(x)
    if row == "op":
        x = torch.full((n,), float(rank + 1))
        op = dist.ReduceOp.SUM if rank == 0 else dist.ReduceOp.MAX
        return x, lambda: dist.all_reduce(x, op=op)
    if row in ("method", "method_root1"):
        x = torch.full((n,), float(rank + 1))
        src = 0 if row == "method" else 1
        if rank == 0:
            return x, lambda: dist.all_reduce(x)
        return x, lambda: dist.broadcast(x, src=src)
    if row == "root":
        x = torch.full((n,), float(rank + 1))
        return x, lambda: dist.broadcast(x, src=rank)
    if row == "allgather":
        m = 4 if rank == 0 else 5
        out = torch.full((p * m,), -1.0)
        inp = torch.full((m,), float(rank + 1))
        return out, lambda: dist.all_gather_into_tensor(out, inp)
    raise ValueError(row)


def row_world(rank, p, row):
    written, call = _call(row, rank, p)
    before = written.clone()
    refs = written._use_count()
    dist.barrier(group=mp.GLOO)  # both ranks start the call together
    t0 = time.monotonic()
    try:
        call()
        msg, kind = "no error", None
    except Exception as e:  # noqa: BLE001 - the type is checked by the test
        msg, kind = str(e), type(e).__name__
    elapsed = time.monotonic() - t0
    # The group is unusable afterwards, and says why.
    try:
        dist.all_reduce(torch.ones(1))
        after = "no error"
    except Exception as e:  # noqa: BLE001
        after = str(e)
    # The failed call's memory stays referenced by the backend until the group is
    # destroyed (a gloo send of it may still be pending), then it is let go.
    kept = written._use_count() - refs
    intact = torch.equal(written, before)
    dist.destroy_process_group()
    return {"msg": msg, "kind": kind, "elapsed": elapsed, "after": after, "intact": intact,
            "kept": kept, "kept_after_destroy": written._use_count() - refs}


def check_disagreement(res, row, intact=True, kept=True):
    """Every rank of row_world's result raised naming both calls within a second,
    left the group unusable (saying why) and, with `intact`, wrote nothing; with
    `kept` (the CPU path), the backend held the call's tensor until the group was
    destroyed, and no longer."""
    desc0, desc1 = ROWS[row]
    for rank, r in enumerate(res):
        msg = r["msg"]
        assert r["kind"] == "DistBackendError", (rank, r)
        assert "ranks disagree about collective #1" in msg, (rank, msg)
        assert f"rank 0 called {desc0}" in msg and f"rank 1 called {desc1}" in msg, (rank, msg)
        assert r["elapsed"] < 1.0, (rank, r["elapsed"], msg)
        if intact:
            assert r["intact"], f"rank {rank} wrote its output before the error: {msg}"
        assert "unusable after an earlier failure" in r["after"], (rank, r["after"])
        assert "ranks disagree" in r["after"], (rank, r["after"])
        if kept:
            assert r["kept"] > 0, f"rank {rank} let the failed call's tensor go: {r}"
        assert r["kept_after_destroy"] == 0, f"rank {rank} kept the tensor after destroy: {r}"


@pytest.mark.parametrize("row", list(ROWS))
def test_disagreeing_ranks_raise_on_every_rank(row, transport):
    res = mp.run_world(2, row_world, row, pg_timeout_s=30, transport=transport, timeout=120)
    check_disagreement(res, row)


def one_of_four_disagrees(rank, p):
    """Rank 3 passes 12 elements, the others 10. Ranks 0 and 2 (its ring
    neighbours) and rank 3 see the headers disagree; rank 1 exchanges headers only
    with ranks that agree with it, and learns it from the store."""
    x = torch.full((12 if rank == 3 else 10,), float(rank + 1))
    dist.barrier(group=mp.GLOO)
    t0 = time.monotonic()
    try:
        dist.all_reduce(x)
        msg = "no error"
    except Exception as e:  # noqa: BLE001
        msg = str(e)
    return msg, time.monotonic() - t0


@pytest.mark.alone
@pytest.mark.parametrize("algo", ["ring", "default"])
def test_disagreement_reaches_ranks_that_saw_none(transport, algo):
    """With the ring named; and by default, where on shared memory the small
    all-reduce (csrc/engine/small.h) exchanges headers with every peer, so rank 1
    sees rank 3's itself."""
    env = {"RINGCOLL_ALGO": "ring"} if algo == "ring" else {}
    res = mp.run_world(4, one_of_four_disagrees, pg_timeout_s=30, transport=transport,
                       timeout=120, env=env)
    for rank, (msg, elapsed) in enumerate(res):
        assert "ranks disagree about collective #1" in msg, (rank, msg)
        assert "called allreduce(float32, 10 elements" in msg, (rank, msg)
        assert "rank 3 called allreduce(float32, 12 elements" in msg, (rank, msg)
        assert elapsed < 1.0, (rank, elapsed, msg)
    if algo == "default" and transport == "shm":
        assert "found that" not in res[1][0] and "small-allreduce" in res[1][0], res[1][0]
    else:
        # Rank 1's ring neighbours are 0 and 2, which agree with it.
        assert "found that ranks disagree" in res[1][0], res[1][0]


# Every c10d method ringcoll provides, called with one element more on rank 1 (or,
# for barrier, against an all_reduce): each on a group of its own, since a
# disagreement leaves its group unusable.
METHODS = ["allreduce", "allreduce_coalesced", "reduce", "broadcast", "allgather",
           "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor", "barrier",
           "gather", "scatter", "alltoall", "alltoall_base", "allgather_coalesced",
           "allgather_into_tensor_coalesced", "reduce_scatter_tensor_coalesced"]


def _method_call(method, rank, p, g):
    m = 3 + rank  # elements: rank 0 has 3, rank 1 has 4
    x = torch.full((m,), float(rank + 1))
    if method == "allreduce":
        return [x], lambda: dist.all_reduce(x, group=g)
    if method == "allreduce_coalesced":
        y = torch.ones(2)
        return [x, y], lambda: dist.all_reduce_coalesced([x, y], group=g)
    if method == "reduce":
        return [x], lambda: dist.reduce(x, dst=1, group=g)
    if method == "broadcast":
        return [x], lambda: dist.broadcast(x, src=0, group=g)
    if method == "allgather":
        outs = [torch.full((m,), -1.0) for _ in range(p)]
        return outs, lambda: dist.all_gather(outs, x, group=g)
    if method == "all_gather_into_tensor":
        out = torch.full((p * m,), -1.0)
        return [out], lambda: dist.all_gather_into_tensor(out, x, group=g)
    if method == "reduce_scatter":
        out = torch.full((m,), -1.0)
        ins = [torch.full((m,), 1.0) for _ in range(p)]
        return [out], lambda: dist.reduce_scatter(out, ins, group=g)
    if method == "reduce_scatter_tensor":
        out = torch.full((m,), -1.0)
        inp = torch.ones(p * m)
        return [out], lambda: dist.reduce_scatter_tensor(out, inp, group=g)
    if method == "barrier":
        if rank == 0:
            return [], lambda: dist.barrier(group=g)
        return [x], lambda: dist.all_reduce(x, group=g)
    if method == "gather":
        outs = [torch.full((m,), -1.0) for _ in range(p)] if rank == 0 else None
        return outs or [], lambda: dist.gather(x, outs, dst=0, group=g)
    if method == "scatter":
        out = torch.full((m,), -1.0)
        ins = [torch.ones(m) for _ in range(p)] if rank == 0 else None
        return [out], lambda: dist.scatter(out, ins, src=0, group=g)
    if method == "alltoall":
        # rank 1 sends 4 elements to rank 0, which expects 3
        outs = [torch.full((m,), -1.0) for _ in range(p)]
        ins = [torch.ones(m) for _ in range(p)]
        return outs, lambda: dist.all_to_all(outs, ins, group=g)
    if method == "alltoall_base":
        out = torch.full((p * m,), -1.0)
        return [out], lambda: dist.all_to_all_single(out, torch.ones(p * m), group=g)
    if method == "allgather_coalesced":
        y = torch.ones(2)
        outs = [[torch.full((m,), -1.0), torch.full((2,), -1.0)] for _ in range(p)]
        return ([t for lst in outs for t in lst],
                lambda: dist.all_gather_coalesced(outs, [x, y], group=g))
    if method == "allgather_into_tensor_coalesced":
        outs = [torch.full((p * m,), -1.0), torch.full((2 * p,), -1.0)]

        def call():
            with dist._coalescing_manager(group=g):
                dist.all_gather_into_tensor(outs[0], x, group=g)
                dist.all_gather_into_tensor(outs[1], torch.ones(2), group=g)
        return outs, call
    if method == "reduce_scatter_tensor_coalesced":
        outs = [torch.full((m,), -1.0), torch.full((2,), -1.0)]

        def call():
            with dist._coalescing_manager(group=g):
                dist.reduce_scatter_tensor(outs[0], torch.ones(p * m), group=g)
                dist.reduce_scatter_tensor(outs[1], torch.ones(2 * p), group=g)
        return outs, call
    raise ValueError(method)


def every_method(rank, p):
    out = {}
    for method in METHODS:
        g = dist.new_group()
        written, call = _method_call(method, rank, p, g)
        before = [t.clone() for t in written]
        try:
            call()
            msg = "no error"
        except Exception as e:  # noqa: BLE001
            msg = str(e)
        intact = all(torch.equal(a, b) for a, b in zip(written, before))
        out[method] = (msg, intact)
    return out


def test_fingerprint_covers_every_method(transport):
    res = mp.run_world(2, every_method, pg_timeout_s=30, transport=transport, timeout=180)
    failures = []
    for rank, per_method in enumerate(res):
        for method, (msg, intact) in per_method.items():
            if "ranks disagree" not in msg or method not in msg:
                failures.append(f"rank {rank} {method}: {msg}")
            if not intact:
                failures.append(f"rank {rank} {method}: output written before the error")
    assert not failures, "\n".join(failures)


def test_fingerprint_off_lets_dtype_mismatch_through():
    """The knob really turns the check off (so the benchmark's A/B measures it):
    float32 against int32 of the same byte count then goes unnoticed."""
    res = mp.run_world(2, row_world, "dtype", pg_timeout_s=10, transport="shm",
                       env={"RINGCOLL_FINGERPRINT": "0"})
    assert [r["msg"] for r in res] == ["no error", "no error"], res


# --------------------------------------------------------------------------------
# abort(), shutdown() and destroy_process_group with a collective in flight


def stuck_then_torn_down(rank, p, how):
    """Rank 1 never joins the collective (it stays alive, so that its exit is not
    what ends the collective); rank 0 has an async all_reduce in flight when it
    tears its group down. A first collective on every rank makes the group's paths
    (on the stream path, as on CUDA, its communicator is made by the first call,
    which waits for every rank)."""
    dist.all_reduce(torch.zeros(1))
    if rank == 1:
        dist.barrier(group=mp.GLOO)
        time.sleep(6)
        return None
    x = torch.ones(8)
    work = dist.all_reduce(x, async_op=True)
    time.sleep(0.2)  # the collective is waiting for rank 1
    dist.barrier(group=mp.GLOO)
    t0 = time.monotonic()
    if how == "abort":
        dist.distributed_c10d._abort_process_group()
    else:
        dist.destroy_process_group()
    returned = time.monotonic() - t0
    try:
        work.wait()
        msg = "no error"
    except Exception as e:  # noqa: BLE001
        msg = str(e)
    return msg, returned


@pytest.mark.parametrize("how", ["abort", "destroy"])
def test_teardown_with_work_in_flight_returns(how, transport):
    res = mp.run_world(2, stuck_then_torn_down, how, pg_timeout_s=60, transport=transport,
                       timeout=120)
    msg, returned = res[0]
    assert "ringcoll::allreduce #2 (rank 0 of 2)" in msg, msg
    if how == "abort":
        assert "aborted" in msg and "rank 1" in msg, msg
        assert returned < 1.0, returned
    else:
        # shutdown lets a collective that still moves finish; this one waits for a
        # rank that never comes, so it fails after the 2 s grace, not the 60 s timeout.
        assert "shut down" in msg and "rank 1" in msg, msg
        assert returned < 5.0, returned


def abort_then_call(rank, p):
    dist.all_reduce(torch.ones(4))  # the group works
    pg = dist.group.WORLD
    pg.abort()
    try:
        dist.all_reduce(torch.ones(4))
        return "no error"
    except Exception as e:  # noqa: BLE001
        return str(e)


def test_calls_after_abort_fail_at_once():
    res = mp.run_world(2, abort_then_call, pg_timeout_s=30, transport="shm")
    for msg in res:
        assert "ringcoll::allreduce #2" in msg and "aborted" in msg, msg


def abort_while_calling(rank, p):
    """Every rank issues small collectives (run inline, on the calling thread) in a
    loop while another thread aborts the group: the loop ends with an error naming
    the abort, and the process neither crashes nor hangs (abort() must not free the
    worker or the executor under a running launch)."""
    pg = dist.group.WORLD
    dist.barrier(group=mp.GLOO)
    threading.Timer(0.2, pg.abort).start()
    calls = 0
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            dist.all_reduce(torch.ones(4))
        except Exception as e:  # noqa: BLE001
            return calls, str(e)
        calls += 1
    return calls, "no error"


def test_abort_from_another_thread_while_calling():
    for _ in range(3):  # the race is narrow: several worlds
        res = mp.run_world(2, abort_while_calling, pg_timeout_s=5, transport="shm",
                           timeout=60)
        for rank, (calls, msg) in enumerate(res):
            assert calls > 0, (rank, msg)
            assert "ringcoll::allreduce" in msg and ("aborted" in msg or "rank" in msg), \
                (rank, calls, msg)


# --------------------------------------------------------------------------------
# ranks whose knobs disagree


def never_called(rank, p):
    return "the group was created"


@pytest.mark.parametrize("knob,values", [
    ("RINGCOLL_CHUNK_BYTES", ["65536", "1048576"]),
    # Decides whether the first CUDA collective splits the NCCL communicator (a
    # collective of its own), so it is compared too, on any device.
    ("RINGCOLL_NCCL_BLOCKING", ["0", "connected"]),
])
def test_ranks_with_different_knobs_are_refused_at_creation(knob, values):
    """Knobs that shape the messages (here the segment size) must be the same on
    every rank: both ranks refuse the group at init_process_group, naming both
    values, instead of exchanging messages of different sizes later."""
    with pytest.raises(AssertionError) as info:
        mp.run_world(2, never_called, pg_timeout_s=30, transport="shm",
                     rank_env={knob: values})
    text = str(info.value)
    for rank in range(2):
        part = text.split(f"--- rank {rank} ---")[1].split("--- rank")[0]
        assert "ranks must use the same knobs" in part, part
        assert f"{knob}={values[0]}" in part and f"{knob}={values[1]}" in part, part


def test_a_named_algorithm_on_some_ranks_is_refused_naming_it():
    """RINGCOLL_ALGO set on one rank only (to the default's own value) turns the small
    collectives off there alone: both ranks refuse the group, and the text says that
    the named algorithm is why the small-collective limits differ."""
    with pytest.raises(AssertionError) as info:
        mp.run_world(2, never_called, pg_timeout_s=30, transport="shm",
                     rank_env={"RINGCOLL_ALGO": ["ring", None]})
    text = str(info.value)
    for rank in range(2):
        part = text.split(f"--- rank {rank} ---")[1].split("--- rank")[0]
        assert "ranks must use the same knobs" in part, part
        assert "RINGCOLL_SMALL_BYTES=0 (off: RINGCOLL_ALGO is set)" in part, part
        assert "RINGCOLL_SMALL_BYTES=65536" in part, part
