"""The GPU path's stream semantics, emulated on the CPU (RINGCOLL_TRANSPORT=stream,
csrc/transport/cpu_stream_transport.h): the executor's waves, StreamTransport's
batching, ordering and staging, the reducer's work on a compute stream, the device
fingerprint check and the join at a job's end run here exactly as they run over
NCCL, on CI's machines with no GPU. RINGCOLL_STREAM_DELAY_US makes every task of the
emulated streams start after a random pause, so work that is not ordered after
what it depends on reads the wrong bytes and these tests fail.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

import ringcoll
from tests import mp
from tests.test_algorithms import algorithms_matrix
from tests.test_failures import check_disagreement, row_world, stuck_then_torn_down
from tests.test_transport import _shm_entries, killed_mid_collective

# Small pauses for the whole grid (it runs thousands of collectives), long ones
# where a test looks for one race.
GRID_DELAY_US = "20"
RACE_DELAY_US = "3000"


@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 5])
def test_every_algorithm_on_streams(world_size):
    """Every algorithm x every collective it provides, exact references (and gloo),
    counts 0, 1, p-1, p+1 and large, every root, 64-byte segments (p <= 4)."""
    mp.run_checks(world_size, algorithms_matrix, timeout=600, transport="stream",
                  env={"RINGCOLL_STREAM_DELAY_US": GRID_DELAY_US})


def _outcome(call):
    """(the DistBackendError's text or "no error", seconds the call took)."""
    t0 = time.monotonic()
    try:
        call()
        return "no error", time.monotonic() - t0
    except dist.DistBackendError as e:
        return str(e), time.monotonic() - t0


def _pattern(rank, n, salt):
    return ((torch.arange(n, dtype=torch.int64) * 7 + rank * 13 + salt) % 101).float()


def reuse_world(rank, p, n):
    """Right after wait(), every rank overwrites its inputs and runs another
    collective (which reuses the workspace): the peers' results must be exact. A
    rank whose last waves only send (broadcast's root, reduce's non-roots, a
    gather's senders) finishes its Work before its sends ran unless the job's end
    joins the transfer stream."""
    failures = []
    group = dist.new_group(backend="ringcoll", timeout=timedelta(seconds=60),
                           pg_options=ringcoll.Options(chunk_bytes=4096))
    for it in range(4):
        root = it % p
        # broadcast: the root only sends.
        x = _pattern(root, n, it) if rank == root else torch.zeros(n)
        dist.broadcast(x, src=root, group=group, async_op=True).wait()
        if rank == root:
            x.fill_(-1.0)
        elif not torch.equal(x, _pattern(root, n, it)):
            failures.append(f"broadcast #{it} root {root}: rank {rank} got "
                            f"{(x != _pattern(root, n, it)).sum().item()} wrong elements")
        # reduce: the non-roots only send, from the workspace.
        y = _pattern(rank, n, it + 100)
        dist.reduce(y, dst=root, group=group, async_op=True).wait()
        want = sum(_pattern(r, n, it + 100) for r in range(p))
        if rank != root:
            y.fill_(-1.0)
        elif not torch.equal(y, want):
            failures.append(f"reduce #{it} root {root}: {(y != want).sum().item()} wrong "
                            f"elements")
        # the next collective reuses the workspace the reduce's sends read from
        z = torch.full((n,), float(rank))
        dist.all_reduce(z, group=group)
        if not torch.equal(z, torch.full((n,), float(p * (p - 1) // 2))):
            failures.append(f"all_reduce after #{it}: wrong")
    dist.destroy_process_group(group)
    return failures


@pytest.mark.parametrize("world_size", [2, 3])
def test_inputs_reused_right_after_wait(world_size):
    mp.run_checks(world_size, reuse_world, 64 * 1024, timeout=300, transport="stream",
                  env={"RINGCOLL_STREAM_DELAY_US": RACE_DELAY_US})


def mismatch_world(rank, p):
    """Ranks that disagree (a count) are caught by the check on the compute stream,
    before anything is written; every rank raises naming both calls, and the group
    is broken afterwards."""
    n = 1000 if rank == 0 else 1001
    x = torch.ones(n)
    try:
        dist.all_reduce(x)
    except dist.DistBackendError as e:
        msg = str(e)
    else:
        return ["the mismatched all_reduce did not raise"]
    out = []
    if "disagree" not in msg or "1000 elements" not in msg or "1001 elements" not in msg:
        out.append(f"rank {rank}: error does not name both calls: {msg}")
    if not torch.equal(x, torch.ones(n)):
        out.append(f"rank {rank}: the input was written")
    try:
        dist.all_reduce(torch.ones(4))
        out.append(f"rank {rank}: the next call did not raise")
    except dist.DistBackendError as e:
        if "unusable" not in str(e) and "disagree" not in str(e):
            out.append(f"rank {rank}: next call raised {e}")
    return out


@pytest.mark.parametrize("world_size", [2, 3])
def test_device_fingerprint_mismatch(world_size):
    mp.run_checks(world_size, mismatch_world, timeout=120, transport="stream",
                  pg_timeout_s=30)


# --------------------------------------------------------------------------------
# failures on the stream path (stream_path.cc), the rules the CUDA path runs


@pytest.mark.parametrize("row", ["count", "dtype", "op", "method", "root", "allgather"])
def test_disagreeing_ranks_raise_on_every_rank(row):
    """As tests/test_failures.py's, with the headers compared on the compute stream."""
    res = mp.run_world(2, row_world, row, pg_timeout_s=30, transport="stream", timeout=120)
    # all-gather's own block is placed before the check on a stream path: the next
    # test says exactly what it writes.
    # The stream path keeps a failed call's memory in its Work (stream_path.cc:
    # keepUntilEnd), which a blocking call drops on return: not kept after it.
    check_disagreement(res, row, intact=row != "allgather", kept=False)


def own_block_only(rank, p):
    """all_gather_into_tensor whose ranks disagree (4 and 5 elements): on a
    stream-ordered path the prologue places this rank's own block before the
    device check (engine/executor.h); nothing else of the output is written."""
    m = 4 if rank == 0 else 5
    out = torch.full((p * m,), -1.0)
    inp = torch.full((m,), float(rank + 1))
    try:
        dist.all_gather_into_tensor(out, inp)
        return "no error", out
    except dist.DistBackendError as e:
        return str(e), out


def test_disagreeing_all_gather_writes_only_its_own_block():
    res = mp.run_world(2, own_block_only, pg_timeout_s=30, transport="stream", timeout=120)
    for rank, (msg, out) in enumerate(res):
        m = 4 if rank == 0 else 5
        want = torch.full((2 * m,), -1.0)
        want[rank * m:(rank + 1) * m] = float(rank + 1)
        assert "ranks disagree" in msg, (rank, msg)
        assert torch.equal(out, want), (rank, out)


@pytest.mark.parametrize("how", ["abort", "destroy"])
def test_teardown_with_work_in_flight_returns(how):
    res = mp.run_world(2, stuck_then_torn_down, how, pg_timeout_s=60, transport="stream",
                       timeout=120)
    msg, returned = res[0]
    assert "ringcoll::allreduce #2 (rank 0 of 2)" in msg, msg
    assert "rank 1" in msg, msg
    if how == "abort":
        assert "aborted" in msg, msg
        assert returned < 1.0, returned
    else:
        assert "shut down" in msg, msg
        assert returned < 5.0, returned


@pytest.mark.alone
def test_rank_killed_mid_collective():
    timeout_s = 10
    results = mp.run_world(3, killed_mid_collective, pg_timeout_s=timeout_s, timeout=120,
                           transport="stream", may_exit={2})
    for rank, (msg, elapsed, before) in enumerate(results[:2]):
        assert msg != "no error", f"rank {rank} did not fail"
        assert elapsed < timeout_s + 1, f"rank {rank} failed after {elapsed:.1f} s: {msg}"
        assert f"(rank {rank} of 3)" in msg and "rank 2" in msg and "exited" in msg, msg
        assert _shm_entries() == before, (_shm_entries(), before)


def late_rank(rank, p):
    """Rank 1 comes 5 s late to a group whose timeout is 2 s: rank 0's collective
    fails after the timeout, naming the op, its number and the peer."""
    if rank == 1:
        time.sleep(5)
        return None
    return _outcome(lambda: dist.all_reduce(torch.ones(1000)))


@pytest.mark.alone
def test_late_rank_times_out_naming_it():
    res = mp.run_world(2, late_rank, pg_timeout_s=2, transport="stream", timeout=120)
    msg, elapsed = res[0]
    assert "ringcoll::allreduce #1 (rank 0 of 2)" in msg and "Timed out" in msg, msg
    assert "rank 1" in msg, msg
    assert 1.5 < elapsed < 5, (elapsed, msg)


def late_rank_large(rank, p):
    """Rank 1 is late to rank 0's second all-reduce, of 1 MiB. Rank 0's reductions
    are queued on its compute stream behind the stuck receives; once the watchdog
    aborts the transfers they run, as on a GPU, and only the stop word keeps them
    from adding the staging buffers' stale bytes (the first all-reduce's) into y.
    Every reduction here is over RINGCOLL_STOP_LATCH_BYTES, so it reads the latched
    copy, and skips only if the transport's join hook asked for a fresh latch after
    the wait (reduce/reducer.h). The fingerprint is off: its check would stop them
    first."""
    n = 1 << 18
    x = torch.full((n,), float(rank + 1))
    dist.all_reduce(x)
    if rank == 1:
        time.sleep(5)
        return None
    y = torch.full((n,), 7.0)
    msg, _ = _outcome(lambda: dist.all_reduce(y))
    # The Work fails first; the queued work runs (and skips) when the transfers are
    # aborted, just after: give it that time, as a GPU user would synchronize.
    time.sleep(1)
    first_ok = bool(torch.equal(x, torch.full((n,), 3.0)))
    return msg, first_ok, bool(torch.equal(y, torch.full((n,), 7.0)))


@pytest.mark.parametrize("latch_bytes", ["16384", "1073741824"])
def test_late_rank_large_collective_writes_nothing(latch_bytes):
    # 1 GiB: every reduction reads the host word itself (the other side of the knob).
    res = mp.run_world(2, late_rank_large, pg_timeout_s=2, transport="stream", timeout=120,
                       env={"RINGCOLL_FINGERPRINT": "0",
                            "RINGCOLL_STOP_LATCH_BYTES": latch_bytes})
    msg, first_ok, untouched = res[0]
    assert first_ok, "the first all-reduce was wrong"
    assert "ringcoll::allreduce #2 (rank 0 of 2)" in msg and "Timed out" in msg, msg
    assert untouched, "a reduction queued behind the aborted transfers wrote into y"


def stalled_mid_collective(rank, p):
    """Rank 0's second all-reduce is 8 segments a block (16 waves), rank 1's a quarter
    of it (2 segments a block, 4 waves), and the fingerprint is off: rank 1's waves
    pair with rank 0's first four, then rank 0 waits for a fifth that never comes, and
    times out. Its first four waves were consumed while nothing had failed (their
    reductions read a latched "go"); the reductions of waves five to eight are queued
    behind the stuck receives and run once the transfers are aborted. They must skip,
    which needs the latch refreshed after each receive's wait, not only at the job's
    start: y then keeps its input on at least three quarters of its elements (the four
    unreached segments of the block it reduces, and the block the all-gather never
    reached), where a reduction of the staging buffers' stale bytes would change the
    four segments (every byte received here is non-zero)."""
    seg = 65536 // 4
    x = torch.full((2 * 8 * seg,), float(rank + 1))
    dist.all_reduce(x)
    first_ok = bool(torch.equal(x, torch.full_like(x, 3.0)))
    if rank == 1:
        z = torch.full((2 * 2 * seg,), 5.0)
        dist.all_reduce(z)  # pairs with rank 0's first four waves
        time.sleep(4)
        return None
    y = torch.full((2 * 8 * seg,), 7.0)
    msg, _ = _outcome(lambda: dist.all_reduce(y))
    time.sleep(1)  # the queued work runs once the transfers are aborted, after the Work failed
    return msg, first_ok, int((y == 7.0).sum()), y.numel()


def test_stalled_peer_mid_collective_writes_no_stale_bytes():
    res = mp.run_world(2, stalled_mid_collective, pg_timeout_s=2, transport="stream",
                       timeout=120, env={"RINGCOLL_CHUNK_BYTES": "65536",
                                         "RINGCOLL_FINGERPRINT": "0"})
    msg, first_ok, untouched, n = res[0]
    assert first_ok, "the first all-reduce was wrong"
    assert "ringcoll::allreduce #2 (rank 0 of 2)" in msg and "Timed out" in msg, msg
    assert untouched >= 3 * n // 4, (untouched, n, "stale staging bytes reached y")


def injected_mid_enqueue(rank, p):
    """One rank's third batch throws while it enqueues a collective: every rank's
    call raises, the next call on the group says it is broken, nothing hangs."""
    dist.all_reduce(torch.ones(8))
    first, elapsed = _outcome(lambda: dist.all_reduce(torch.ones(1 << 16)))
    following, _ = _outcome(lambda: dist.all_reduce(torch.ones(8)))
    return {"first": first, "elapsed": elapsed, "next": following}


@pytest.mark.parametrize("world_size", [2, 3])
def test_exception_mid_enqueue_breaks_the_group(world_size):
    # The first all_reduce is one header batch and 2(p-1) waves; the second fails at
    # its second batch, after its headers were posted.
    fail = ["0"] * world_size
    fail[world_size - 1] = str(1 + 2 * (world_size - 1) + 2)
    # The ring, named: the default's one-hop algorithms make fewer batches.
    res = mp.run_world(world_size, injected_mid_enqueue, pg_timeout_s=30, transport="stream",
                       timeout=120, env={"RINGCOLL_CHUNK_BYTES": "4096", "RINGCOLL_ALGO": "ring"},
                       rank_env={"RINGCOLL_STREAM_FAIL_AFTER": fail})
    for rank, r in enumerate(res):
        assert "ringcoll::allreduce #2" in r["first"], (rank, r)
        assert "injected failure" in r["first"], (rank, r)
        assert r["elapsed"] < 5, (rank, r)
        assert "unusable after an earlier failure" in r["next"], (rank, r)


def abort_during_collective(rank, p):
    """Rank 0 aborts its group from another thread while its collective waits for
    rank 1, which never comes: the collective fails at once, naming the abort."""
    if rank == 1:
        dist.barrier(group=mp.GLOO)
        time.sleep(4)
        return None
    pg = dist.group.WORLD
    threading.Timer(0.3, pg.abort).start()
    dist.barrier(group=mp.GLOO)
    return _outcome(lambda: dist.all_reduce(torch.ones(1000)))


@pytest.mark.alone
def test_abort_from_another_thread():
    res = mp.run_world(2, abort_during_collective, pg_timeout_s=60, transport="stream",
                       timeout=120)
    msg, elapsed = res[0]
    assert "ringcoll::allreduce #1" in msg and "aborted" in msg, msg
    assert elapsed < 2, (elapsed, msg)


# --- What a collective enqueues (csrc/common/stream_stats.h), counted on the emulation.
# The emulation runs the CUDA path's executor, transport logic and algorithm choice,
# so these counts are the CUDA path's: batches are NCCL groups, kernels the reducer's
# launches. (Markers differ by one: CUDA also records the caller's stream at enqueue.)

def counted_world(rank, p):
    """Per call, what each default-choice collective enqueued, and the results (so a
    wrong count never hides a wrong answer)."""
    be = dist.group.WORLD._get_backend(torch.device("cpu"))
    out, wrong = {}, []

    def count(name, call, check):
        call()  # warm: the plan is compiled, staging allocated
        be.stream_stats(cuda=False, reset=True)
        calls = 3
        for _ in range(calls):
            call()
        s = be.stream_stats(cuda=False)
        assert s["collectives"] == calls, s
        out[name] = {k: v / calls for k, v in s.items() if not k.endswith("_ns")}
        out[name]["calls"] = calls
        if not check():
            wrong.append(name)

    n = 7 * p  # 28p bytes: far below the one-hop limit
    x = torch.zeros(n)
    want = torch.full((n,), float(p * (p + 1) // 2))

    def ar():
        x.fill_(rank + 1)
        dist.all_reduce(x)
    count("all_reduce", ar, lambda: torch.equal(x, want))
    xa = torch.zeros(n)
    want_avg = torch.full((n,), float(p + 1) / 2)

    def avg():
        xa.fill_(rank + 1)
        dist.all_reduce(xa, op=dist.ReduceOp.AVG)
    count("all_reduce_avg", avg, lambda: torch.equal(xa, want_avg))
    inp = torch.arange(p * 4, dtype=torch.float32) + rank
    rs = torch.zeros(4)
    count("reduce_scatter", lambda: dist.reduce_scatter_tensor(rs, inp),
          lambda: torch.equal(rs, (torch.arange(4) + 4 * rank) * p + p * (p - 1) / 2))
    ag = torch.zeros(p * 4)
    count("all_gather", lambda: dist.all_gather_into_tensor(ag, torch.full((4,), float(rank))),
          lambda: torch.equal(ag, torch.arange(p).float().repeat_interleave(4)))
    # The ring, named (its group's CUDA choice), 2(p-1) steps of one segment each.
    ring_group = dist.new_group(backend="ringcoll", pg_options=ringcoll.Options(gpu_algo="ring"))
    be = ring_group._get_backend(torch.device("cpu"))

    def ring():
        x.fill_(1.0)
        dist.all_reduce(x, group=ring_group)
    count("ring_all_reduce", ring, lambda: torch.equal(x, torch.full_like(x, float(p))))
    return out, wrong


@pytest.mark.parametrize("world_size", [2, 3, 8])
def test_small_collectives_are_one_batch(world_size):
    """The default choice on CUDA (and here) for a small all-reduce is one-shot: one
    batch (one NCCL group) and two reducer operations (the copy of the input that
    its sends read, and one fused fold of the p inputs) on every rank, p <= 8;
    reduce-scatter and all-gather (two-shot) one batch each. A batch goes on the
    compute stream when nothing waits to be consumed, so none of these makes a
    stream wait, and no call waits on the host. The ring, for comparison, is
    2(p - 1) batches. With the fingerprint off, as on CUDA by default."""
    p = world_size
    res = mp.run_world(p, counted_world, transport="stream", timeout=240,
                       env={"RINGCOLL_FINGERPRINT": "0"})
    for rank, (out, wrong) in enumerate(res):
        assert not wrong, (rank, wrong)
        for name in ("all_reduce", "all_reduce_avg", "reduce_scatter", "all_gather"):
            c = out[name]
            assert c["batches"] == 1 and c["batches_on_compute"] == 1, (rank, name, c)
            assert c["host_waits"] == 0 and c["stream_waits"] == 0, (rank, name, c)
            # the Work's end, and the in-flight bound's probe every 16 batches
            probes = -(-c["calls"] * c["batches"] // 16)
            assert c["markers"] * c["calls"] <= c["calls"] + probes, (rank, name, c)
        assert out["all_reduce"]["posts"] == 2 * (p - 1), (rank, out["all_reduce"])
        assert out["all_reduce"]["kernels"] == 2, (rank, out["all_reduce"])
        assert out["all_reduce_avg"]["kernels"] == 3, (rank, out["all_reduce_avg"])  # + 1/p
        # by kind: the input's copy, the fold; with AVG the division
        kinds = ("kernels_reduce", "kernels_copy", "kernels_scale", "kernels_latch",
                 "kernels_header")
        assert [out["all_reduce"][k] for k in kinds] == [1, 1, 0, 0, 0], (rank, out)
        assert [out["all_reduce_avg"][k] for k in kinds] == [1, 1, 1, 0, 0], (rank, out)
        for name in ("all_reduce", "all_reduce_avg", "reduce_scatter", "all_gather"):
            assert sum(out[name][k] for k in kinds) == out[name]["kernels"], (rank, name, out)
        assert out["reduce_scatter"]["kernels"] <= 3, (rank, out["reduce_scatter"])
        ring = out["ring_all_reduce"]
        assert ring["batches"] == 2 * (p - 1) == ring["batches_on_compute"], (rank, ring)
        assert ring["host_waits"] == 0 and ring["stream_waits"] == 0, (rank, ring)


def fingerprinted_world(rank, p):
    be = dist.group.WORLD._get_backend(torch.device("cpu"))
    x = torch.ones(16)
    dist.all_reduce(x)
    be.stream_stats(cuda=False, reset=True)
    dist.all_reduce(x)
    return be.stream_stats(cuda=False), torch.equal(x, torch.full_like(x, float(p * p)))


def test_fingerprinted_small_all_reduce_is_two_batches():
    """With the device fingerprint (the emulation's default) the headers are a batch
    of their own ahead of the payload's: two batches, the second on the transfer
    stream (the headers wait there to be checked), so one stream wait."""
    res = mp.run_world(3, fingerprinted_world, transport="stream", timeout=120)
    for rank, (s, ok) in enumerate(res):
        assert ok, rank
        assert s["batches"] == 2 and s["host_waits"] == 0, (rank, s)


def late_bound_world(rank, p):
    """Rank 1 comes a second late; rank 0 issues four async all-reduces with room for
    two batches (RINGCOLL_MAX_BATCHES_IN_FLIGHT=2): its third launch waits on the
    host for the first to complete, then everything completes, exactly."""
    xs = [torch.full((8,), float(rank + i)) for i in range(4)]
    dist.barrier(group=mp.GLOO)
    if rank == 1:
        time.sleep(1.0)
    be = dist.group.WORLD._get_backend(torch.device("cpu"))
    t0 = time.monotonic()
    works = [dist.all_reduce(x, async_op=True) for x in xs]
    issued = time.monotonic() - t0
    for w in works:
        w.wait()
    ok = all(torch.equal(x, torch.full((8,), float(2 * i + 1))) for i, x in enumerate(xs))
    return ok, issued, be.stream_stats(cuda=False)["host_waits"]


def test_in_flight_bound_waits_for_room():
    res = mp.run_world(2, late_bound_world, transport="stream", timeout=120,
                       env={"RINGCOLL_FINGERPRINT": "0", "RINGCOLL_MAX_BATCHES_IN_FLIGHT": "2"})
    ok, issued, host_waits = res[0]
    assert ok
    assert host_waits >= 1 and issued > 0.5, (host_waits, issued)
    assert res[1][0] and res[1][1] < 0.5, res[1]  # the late rank found its peer there


def stalled_peer_world(rank, p, abort_after_s, stop="abort"):
    """Rank 1 stops calling; rank 0 issues async all-reduces until its launch waits
    for room (RINGCOLL_MAX_BATCHES_IN_FLIGHT=2). With `abort_after_s`, another thread
    then aborts the group (`stop`: "abort") or shuts it down ("shutdown", as
    destroy_process_group does); without, nobody does. Returns what the launch that
    waited raised, how many launches returned before it, and how long they all took.
    The first collective, on both ranks, makes the path (its communicator waits for
    every rank, as NCCL's does)."""
    dist.all_reduce(torch.zeros(1))
    if rank == 1:
        dist.barrier(group=mp.GLOO)
        time.sleep(8)
        return None
    dist.barrier(group=mp.GLOO)
    x = torch.ones(8)
    works, err = [], None
    timer = (threading.Timer(abort_after_s, getattr(dist.group.WORLD, stop))
             if abort_after_s else None)
    if timer:
        timer.start()
    t0 = time.monotonic()
    try:
        for _ in range(4):
            works.append(dist.all_reduce(x, async_op=True))
    except dist.DistBackendError as e:
        err = str(e)
    elapsed = time.monotonic() - t0
    if timer:
        timer.join()
    return err, len(works), elapsed


@pytest.mark.alone
def test_in_flight_bound_waits_and_can_be_aborted():
    """The launch that waits for room holds no lock: an abort from another thread
    makes it raise promptly, naming the abort."""
    res = mp.run_world(2, stalled_peer_world, 1.0, transport="stream", pg_timeout_s=60,
                       timeout=120,
                       env={"RINGCOLL_FINGERPRINT": "0", "RINGCOLL_MAX_BATCHES_IN_FLIGHT": "2"})
    err, issued, elapsed = res[0]
    # The launch that waited for room raised (which one depends on how many batches
    # the first call enqueues); none returned a Work after the abort.
    assert 1 <= issued <= 2, (issued, err)
    assert err is not None and f"ringcoll::allreduce #{issued + 2}" in err and "abort" in err, err
    assert 0.9 < elapsed < 5, elapsed


@pytest.mark.alone
def test_in_flight_bound_waits_and_a_shutdown_ends_it():
    """A shutdown from another thread while a launch waits for room: that launch
    still holds its path, so stop() aborts the path before it frees the host
    transport the emulated device rides on, and the launch raises saying so."""
    res = mp.run_world(2, stalled_peer_world, 1.0, "shutdown", transport="stream",
                       pg_timeout_s=60, timeout=120,
                       env={"RINGCOLL_FINGERPRINT": "0", "RINGCOLL_MAX_BATCHES_IN_FLIGHT": "2"})
    err, issued, elapsed = res[0]
    assert 1 <= issued <= 2, (issued, err)
    assert err is not None and f"ringcoll::allreduce #{issued + 2}" in err, err
    assert "shut down (destroy_process_group) while a call was launching" in err, err
    assert elapsed < 10, elapsed


@pytest.mark.alone
def test_in_flight_bound_times_out_naming_the_wait():
    """Nobody aborts: the launch that waits for room gives up after the group's
    timeout (the watchdog fails the earlier calls meanwhile), never hangs."""
    res = mp.run_world(2, stalled_peer_world, 0, transport="stream", pg_timeout_s=2, timeout=120,
                       env={"RINGCOLL_FINGERPRINT": "0", "RINGCOLL_MAX_BATCHES_IN_FLIGHT": "2"})
    err, issued, elapsed = res[0]
    assert 1 <= issued <= 2, (issued, err)
    assert err is not None and f"ringcoll::allreduce #{issued + 2}" in err, err
    assert "Timed out" in err, err
    assert elapsed < 6, (elapsed, err)
