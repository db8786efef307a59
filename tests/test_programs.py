"""What torch programs do with a backend, tried as they do it (issue 47): poll
`Work.is_completed()` in a tight loop (holding the GIL the whole time), drop tensors
and Works before they finish, chain future callbacks that issue more work, read the
backend from one thread while another aborts it. Each ran into a hang or a freed
buffer before its fix; `RINGCOLL_CHECKS=1` (tests/conftest.py sets it) turns a lock
held where Python may run, or a Work's memory freed while its device may still use
it, into a failure that names it instead of a hang or a corruption.

Every test runs on the CPU transports and on the stream emulation
(`RINGCOLL_TRANSPORT=stream`), which runs the CUDA path's completion, failure and
teardown logic; tests/test_gpu.py runs the polling and abort ones on a GPU.
"""

from __future__ import annotations

import os
import threading
import time

import pytest
import torch
import torch.distributed as dist

from tests import mp

ALL = ["shm", "gloo", "stream"]


def polling_world(rank, p, rounds, n):
    """`rounds` all-gathers, each polled with is_completed() in a tight loop (no
    sleep: the GIL is held throughout), its input a temporary the caller drops at
    once (the Work holds the last reference: Python's), then waited for. Results
    exact. Before the fix the stream path's watchdog released that input under the
    Work's lock, needed the GIL to do it, and the poll held the GIL waiting for the
    lock: both ranks stopped within a few rounds."""
    failures = []
    out = torch.zeros(n * p)
    for i in range(rounds):
        w = dist.all_gather_into_tensor(out, torch.full((n,), float(rank + i)), async_op=True)
        while not w.is_completed():
            pass
        w.wait()
        want = (torch.arange(p, dtype=torch.float32) + i).repeat_interleave(n)
        if not torch.equal(out, want):
            failures.append(f"round {i}: {(out != want).sum().item()} wrong elements")
            break
    return failures


@pytest.mark.parametrize("transport", ALL)
def test_polling_is_completed_in_a_tight_loop_never_hangs(transport):
    mp.run_checks(2, polling_world, 300, 4096, transport=transport, timeout=120)


def callbacks_world(rank, p, rounds):
    """A future callback that issues the next collective on the same group (async)
    and one that issues a blocking one on another group, as DDP's comm hooks and
    pipelines do; the main thread polls the chained future. Every result exact."""
    failures = []
    other = dist.new_group(backend="ringcoll")
    for i in range(rounds):
        x = torch.full((1000,), float(rank + 1 + i))
        issued = []

        def same_group(fut, i=i):
            (t,) = fut.value()
            y = t * 2
            issued.append((dist.all_reduce(y, async_op=True), y))
            return t

        def other_group(fut):
            z = torch.ones(7)
            dist.all_reduce(z, group=other)  # blocking, on another group's path
            return z

        w = dist.all_reduce(x, async_op=True)
        chained = w.get_future().then(same_group)
        chained2 = w.get_future().then(other_group)
        while not chained.done():
            pass
        chained.wait()
        z = chained2.wait()
        w2, y = issued[0]
        w2.wait()
        total = sum(r + 1 + i for r in range(p))
        if not torch.equal(x, torch.full((1000,), float(total))):
            failures.append(f"round {i}: first all-reduce wrong")
        if not torch.equal(y, torch.full((1000,), float(2 * total * p))):
            failures.append(f"round {i}: the callback's all-reduce wrong: {y[0].item()}")
        if not torch.equal(z, torch.full((7,), float(p))):
            failures.append(f"round {i}: the other group's all-reduce wrong")
        if failures:
            break
    return failures


@pytest.mark.parametrize("transport", ALL)
def test_callbacks_that_issue_work(transport):
    mp.run_checks(2, callbacks_world, 50, transport=transport, timeout=120)


def dropped_then_aborted_world(rank, p):
    """Rank 0 issues an async reduce_scatter_tensor that waits for rank 1 (late),
    drops the Work and both tensors (the path then holds the last references), and
    aborts the group from another thread. Before the fix the stream path let the
    failed Work go, with the input it kept, before it stopped and drained the
    device, whose transfer thread could still copy into the freed memory
    (RINGCOLL_CHECKS names it: "freed while the device may still use it")."""
    dist.all_reduce(torch.ones(1))  # the path's first call makes it, on every rank
    if rank == 1:
        dist.barrier(group=mp.GLOO)
        time.sleep(3)
        return "late"
    n = 1 << 20
    w = dist.reduce_scatter_tensor(torch.zeros(n // p), torch.ones(n), async_op=True)
    del w
    pg = dist.group.WORLD
    aborter = threading.Timer(0.3, pg.abort)
    aborter.start()
    dist.barrier(group=mp.GLOO)
    aborter.join()
    import gc

    gc.collect()
    time.sleep(0.5)  # the watchdog settles the failed work
    try:
        dist.all_reduce(torch.ones(3))
    except dist.DistBackendError as e:
        return str(e)
    return "no error"


def test_dropped_async_collective_aborted_from_another_thread():
    res = mp.run_world(2, dropped_then_aborted_world, transport="stream", timeout=120,
                       pg_timeout_s=60)
    assert "aborted" in res[0] or "unusable" in res[0], res[0]


def links_while_aborted_world(rank, p):
    """A CPU collective fails (the ranks disagree about its dtype), its tensors are
    Python's and dropped (the backend keeps them for its transport), then one thread
    reads `links` in a tight loop while another aborts the group. Before the fix
    stop() freed those tensors (which takes the GIL) holding the CPU lock that
    `links` waits for with the GIL held: a deadlock."""
    be = dist.group.WORLD._get_backend(torch.device("cpu"))
    x = torch.ones(1000, dtype=torch.float32 if rank == 0 else torch.float64)
    try:
        dist.all_reduce(x)
        return "no error"
    except dist.DistBackendError:
        pass
    del x
    done = threading.Event()

    def abort():
        dist.group.WORLD.abort()
        done.set()

    t = threading.Timer(0.2, abort)
    t.start()
    reads = 0
    until = time.monotonic() + 20
    while not done.is_set() and time.monotonic() < until:
        be.links
        reads += 1
    t.join()
    return done.is_set(), reads, be.links


def test_reading_links_while_another_thread_aborts():
    for done, reads, links in mp.run_world(2, links_while_aborted_world, transport="shm",
                                           timeout=120):
        assert done and reads > 0 and links == [], (done, reads, links)


def trace_while_stopped_world(rank, p, trace_dir):
    """With RINGCOLL_TRACE, a thread launches stream collectives while the main thread
    aborts the group: a launch that ends after stop() must not write through a trace
    writer stop() freed (it is closed instead, and later writes do nothing)."""
    errors = []

    def launch():
        for _ in range(200):
            try:
                dist.all_reduce(torch.ones(64), async_op=True)
            except dist.DistBackendError:
                return
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))
                return

    t = threading.Thread(target=launch)
    dist.barrier(group=mp.GLOO)
    t.start()
    time.sleep(0.05)
    dist.group.WORLD.abort()
    t.join()
    return errors


def test_trace_writer_and_a_stop_from_another_thread(tmp_path):
    for errors in mp.run_world(2, trace_while_stopped_world, str(tmp_path), transport="stream",
                               env={"RINGCOLL_TRACE": str(tmp_path)}, timeout=120):
        assert errors == []
    files = sorted(os.listdir(tmp_path))
    assert len(files) == 2, files


def first_call_aborted_world(rank, p, how):
    """The first call on a stream path makes its communicator, which waits for every
    rank (as NCCL's does); rank 1 never makes that call. Rank 0's first collective,
    on another thread, must end as soon as the group is aborted or destroyed (`how`),
    not at the timeout. Before the fix the creation ran under the lock stop() takes
    first, so stop() waited out the whole timeout too."""
    if rank == 1:
        dist.barrier(group=mp.GLOO)
        time.sleep(4)
        return None
    outcome = {}

    def first_call():
        t0 = time.monotonic()
        try:
            dist.all_reduce(torch.ones(8))
            outcome["error"] = "no error"
        except dist.DistBackendError as e:
            outcome["error"] = str(e)
        outcome["seconds"] = time.monotonic() - t0

    t = threading.Thread(target=first_call)
    t.start()
    time.sleep(0.5)
    t0 = time.monotonic()
    if how == "abort":
        dist.group.WORLD.abort()
    else:
        dist.destroy_process_group()
    stopped = time.monotonic() - t0
    t.join(timeout=30)
    dist.barrier(group=mp.GLOO)
    return outcome, stopped, t.is_alive()


@pytest.mark.parametrize("how", ["abort", "destroy"])
def test_first_stream_call_waiting_for_a_missing_rank_ends_on_abort(how):
    out, stopped, alive = mp.run_world(2, first_call_aborted_world, how, transport="stream",
                                       timeout=120, pg_timeout_s=60)[0]
    assert not alive and stopped < 5, (stopped, out)
    assert out["seconds"] < 5, out
    assert "ringcoll::allreduce #1" in out["error"], out
    assert ("aborted" if how == "abort" else "shut down") in out["error"], out


def barrier_order_world(rank, p, rounds):
    """An async barrier behind an async all-reduce keeps its place: every rank pairs
    the same calls. On the stream transport the barrier ran on the CPU path, ahead
    of the queued all-reduce, and paired with the peer's all-reduce ("ranks disagree
    about collective #1")."""
    failures = []
    for i in range(rounds):
        x = torch.full((1 << 16,), float(rank + i))
        w1 = dist.all_reduce(x, async_op=True)
        w2 = dist.barrier(async_op=True)
        w1.wait()
        w2.wait()
        want = float(sum(r + i for r in range(p)))
        if not torch.equal(x, torch.full_like(x, want)):
            failures.append(f"round {i}: all-reduce wrong")
            break
    return failures


@pytest.mark.parametrize("transport", ALL)
def test_async_barrier_keeps_its_place(transport):
    mp.run_checks(2, barrier_order_world, 50, transport=transport, timeout=120)


def wait_in_callback_world(rank, p, rounds):
    """PowerSGD's DDP comm hook: a future callback that issues an all-reduce on the
    same group and waits for it inside the callback. The callback runs where the
    first call completed (the CPU worker, a stream path's watchdog), which the
    second call needs: both ranks hung until those threads stopped running
    callbacks. Large calls (handed to the worker) and small ones (run inline)."""
    failures = []
    for i in range(rounds):
        n = (1 << 18) if i % 2 else 100  # 1 MiB: past the async inline limit
        x = torch.full((n,), float(rank + 1))
        y = torch.full((7,), float(i))

        def then(fut):
            dist.all_reduce(y, async_op=True).get_future().wait()
            return fut.value()[0] + y[0]

        got = dist.all_reduce(x, async_op=True).get_future().then(then).wait()
        want = float(p * (p + 1) // 2 + i * p)
        if not torch.equal(got, torch.full((n,), want)):
            failures.append(f"round {i}: {got[0].item()} != {want}")
            break
    return failures


@pytest.mark.parametrize("transport", ALL)
def test_a_callback_waits_for_its_own_group(transport):
    mp.run_checks(2, wait_in_callback_world, 20, transport=transport, timeout=120)


def p2p_wait_in_callback_world(rank, p, rounds):
    """The same with point-to-point: a receive's callback posts the next receive and
    waits for it (the first completes on point-to-point's progress thread, or the
    stream path's watchdog, which the second needs)."""
    failures = []
    for i in range(rounds):
        if rank == 0:
            dist.send(torch.full((5,), float(i)), dst=1)
            dist.send(torch.full((5,), float(i + 100)), dst=1)
            continue
        a, b = torch.zeros(5), torch.zeros(5)

        def then(fut):
            dist.irecv(b, src=0).wait()
            return a + b

        got = dist.irecv(a, src=0).get_future().then(then).wait()
        if not torch.equal(got, torch.full((5,), float(2 * i + 100))):
            failures.append(f"round {i}: {got.tolist()}")
            break
    return failures


@pytest.mark.parametrize("transport", ALL)
def test_a_point_to_point_callback_waits_for_the_next_message(transport):
    mp.run_checks(2, p2p_wait_in_callback_world, 10, transport=transport, timeout=120)


def silent_sender_world(rank, p):
    """A receive from a rank that never sends times out naming that rank and the
    tag (on the stream path it named this rank itself)."""
    if rank == 1:
        time.sleep(5)
        return None
    try:
        dist.recv(torch.zeros(3), src=1, tag=0)
        return "no error"
    except dist.DistBackendError as e:
        return str(e)


@pytest.mark.parametrize("transport", ALL)
def test_a_receive_timeout_names_the_sender(transport):
    msg = mp.run_world(2, silent_sender_world, transport=transport, pg_timeout_s=2,
                       timeout=120)[0]
    assert "Timed out" in msg and "rank 1" in msg, msg
    assert "rank 0 (" not in msg, msg  # the old text: "waiting for rank 0 (receive) / ..."


def abort_in_callback_world(rank, p):
    """A future callback aborts its own group (error handling a program may do). It
    runs on one of ringcoll's threads, which a teardown joins: the abort fails what
    is in flight at once, and the joins come with the harness's
    destroy_process_group on the main thread. Rank 1 stays out of the second call."""
    big = torch.ones(1 << 20)  # 4 MiB: async calls this large go to the worker
    if rank == 1:
        time.sleep(0.5)  # rank 0's then() is attached before the first call can end
        dist.all_reduce(big)
        time.sleep(3)
        return None
    second_issued, aborted = threading.Event(), threading.Event()
    where = {}

    def abort(fut):
        where["thread"] = threading.current_thread().name
        second_issued.wait(10)
        dist.group.WORLD.abort()
        aborted.set()

    w1 = dist.all_reduce(big, async_op=True)
    chained = w1.get_future().then(abort)
    w2 = dist.all_reduce(torch.ones(8), async_op=True)  # rank 1 never comes
    second_issued.set()
    t0 = time.monotonic()
    if not aborted.wait(30):
        return "the callback's abort did not return", 0.0, where
    try:
        w2.wait()
        msg = "no error"
    except dist.DistBackendError as e:
        msg = str(e)
    chained.wait()
    return msg, time.monotonic() - t0, where


@pytest.mark.parametrize("transport", ALL)
def test_abort_from_inside_a_callback(transport):
    msg, seconds, where = mp.run_world(2, abort_in_callback_world, transport=transport,
                                       timeout=120, pg_timeout_s=60)[0]
    assert where["thread"] != "MainThread", where  # one of ringcoll's threads
    assert "ringcoll::allreduce #2" in msg and "abort" in msg, (msg, where)
    assert seconds < 5, (seconds, msg)
