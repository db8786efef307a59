"""The CPU transports in real processes: which transport serves each link, a ring
that mixes shared memory and gloo, a rank killed mid-collective, many groups
created and destroyed, ranks that outnumber the cores, and tiny segments.

Every correctness check compares with values computed on every rank (exact small
integers, tests/cases.py) or with gloo on the same ranks.
"""

from __future__ import annotations

import fcntl
import gc
import os
import signal
import threading
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

import ringcoll
from tests import cases, mp
from tests.test_collectives import MATRICES
from tests.test_errors import _expect

# --------------------------------------------------------------------------------
# helpers


def _links(group):
    return group._get_backend(torch.device("cpu")).links


def _shm_entries():
    return sorted(n for n in os.listdir("/dev/shm") if n.startswith("ringcoll-"))


def _open_fds():
    return len(os.listdir("/proc/self/fd"))


# --------------------------------------------------------------------------------
# which transport serves each link


def links_by_knob(rank, p):
    f = []
    for knob, want in (("auto", "shm"), ("shm", "shm"), ("gloo", "gloo")):
        g = dist.new_group(backend="ringcoll", pg_options=ringcoll.Options(transport=knob))
        expect = ["" if q == rank else want for q in range(p)]
        if _links(g) != expect:
            f.append(f"transport={knob}: links {_links(g)}, expected {expect}")
        x = torch.full((7,), float(rank + 1))
        dist.all_reduce(x, group=g)
        if not torch.equal(x, torch.full((7,), float(p * (p + 1) // 2))):
            f.append(f"transport={knob}: all_reduce gave {x.tolist()}")
    return f


def test_links_follow_the_knob():
    mp.run_checks(3, links_by_knob)


# --------------------------------------------------------------------------------
# 2 hosts x 2 ranks: shared memory within a pretend host, gloo between them

# Ranks 0 and 2 on one host, 1 and 3 on the other: the ring is ordered by host
# (0, 2, 1, 3), so each rank has one shared-memory and one gloo neighbour.
MIXED = {"RINGCOLL_HOST": ["pretend-a", "pretend-b", "pretend-a", "pretend-b"]}


def mixed_links(rank, p):
    f = []
    want = ["" if q == rank else ("shm" if q % 2 == rank % 2 else "gloo") for q in range(p)]
    if _links(dist.group.WORLD) != want:
        f.append(f"links {_links(dist.group.WORLD)}, expected {want}")
    _expect(f, "transport=shm across pretend hosts",
            lambda: dist.new_group(backend="ringcoll",
                                   pg_options=ringcoll.Options(transport="shm")),
            "RINGCOLL_TRANSPORT=shm", "pretend-a", "pretend-b", "rank")
    return f


def test_mixed_hosts_links_and_shm_refused_across_hosts():
    mp.run_checks(4, mixed_links, rank_env=MIXED)


@pytest.mark.parametrize("collective", sorted(MATRICES))
def test_mixed_hosts_matrix_against_gloo(collective):
    # The default group and the one with 64-byte segments both mix the transports.
    mp.run_checks(4, MATRICES[collective], timeout=600, rank_env=MIXED)


def full_mailboxes(rank, p):
    """Tiny segments on a ring where the gloo links are slow and the shared-memory
    ones fast: senders fill the peer's 4 slots again and again and must be woken
    when one frees. A lost wake-up fails here within the 10 s group timeout."""
    f = []
    g = dist.new_group(backend="ringcoll", pg_options=ringcoll.Options(chunk_bytes=64),
                       timeout=timedelta(seconds=10))
    for i in range(300):
        m = 333 if i % 3 else 7
        parts = [torch.full((m,), float(r + i)) for r in range(p)]
        out = torch.empty(p * m)
        dist.all_gather_into_tensor(out, parts[rank], group=g)
        if not torch.equal(out, torch.cat(parts)):
            f.append(f"all_gather {i}: {out[::m].tolist()}")
        x = torch.full((m,), float(rank + 1))
        dist.all_reduce(x, group=g)
        if not torch.equal(x, torch.full((m,), float(p * (p + 1) // 2))):
            f.append(f"all_reduce {i}: {x[:3].tolist()}")
    return f


def test_mixed_hosts_full_mailboxes():
    mp.run_checks(4, full_mailboxes, timeout=300, rank_env=MIXED)


# --------------------------------------------------------------------------------
# a rank killed with SIGKILL in the middle of a collective


def killed_mid_collective(rank, p):
    before = _shm_entries()
    x = torch.ones(64 << 20)  # 256 MiB: the collective runs long enough to be cut
    dist.barrier()
    if rank == p - 1:
        threading.Timer(0.02, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
        dist.all_reduce(x)
        time.sleep(60)  # not reached: killed above
    t0 = time.monotonic()
    try:
        dist.all_reduce(x)
        return "no error", 0.0, before
    except RuntimeError as e:
        return str(e), time.monotonic() - t0, before


def leave_one_by_one(rank, p, late):
    """The end of a program: a last broadcast whose root leaves (its process exits)
    as soon as its part is done, rank `late` reaching it half a second late, and the
    other ranks leaving one by one after it. A rank whose messages were all delivered
    is not an error to the ranks still finishing (issue: "No false 'rank X exited'")."""
    root = p - 1
    for i in range(3):
        x = torch.full((1000,), float(rank + i))
        dist.all_reduce(x)
        if not torch.equal(x, torch.full((1000,), float(sum(range(p)) + p * i))):
            return f"all_reduce {i}: {x[:3].tolist()}"
    dist.barrier()
    if rank == late:
        time.sleep(0.5)
    y = torch.full((4096,), float(rank))
    dist.broadcast(y, src=root)
    if rank == root:
        os._exit(0)  # leaves at once: no destroy, no goodbye
    if not torch.equal(y, torch.full((4096,), float(root))):
        return f"broadcast: {y[:3].tolist()}"
    time.sleep(0.1 * rank)  # the others leave one by one
    return "ok"


@pytest.mark.parametrize("p, late", [(3, 0), (3, 1), (5, 0), (5, 2), (5, 3)])
def test_ranks_that_left_are_not_errors(p, late):
    res = mp.run_world(p, leave_one_by_one, late, pg_timeout_s=20, transport="shm",
                       may_exit={p - 1}, timeout=120)
    assert res[:-1] == ["ok"] * (p - 1), res


@pytest.mark.alone
def test_rank_killed_mid_collective(transport):
    timeout_s = 10
    results = mp.run_world(3, killed_mid_collective, pg_timeout_s=timeout_s, timeout=120,
                           transport=transport, may_exit={2})
    assert results[2] is None
    for rank, (msg, elapsed, before) in enumerate(results[:2]):
        assert msg != "no error", f"rank {rank} did not fail"
        assert elapsed < timeout_s + 1, f"rank {rank} failed after {elapsed:.1f} s: {msg}"
        assert f"ringcoll::allreduce #" in msg and f"(rank {rank} of 3)" in msg, msg
        if transport == "shm":
            # Every rank of the host watches every peer's process: both name rank 2.
            assert "rank 2" in msg and "exited" in msg, msg
        else:
            # gloo reports the link it saw break first (usually to or from rank 2;
            # the other survivor's link if that one exited first), at once, without
            # waiting out the timeout.
            others = [q for q in range(3) if q != rank]
            assert any(f"{what} rank {q} failed (gloo:" in msg for q in others
                       for what in ("send to", "receive from")), msg
        # Nothing left behind in /dev/shm by this world (its segments were unlinked
        # as soon as every rank had mapped them).
        assert _shm_entries() == before, (_shm_entries(), before)


def sizes_disagree(rank, p):
    """Ranks that call all_reduce with different sizes, with the fingerprint off
    (tests/test_mismatch.py has it on): shared memory still checks each message's
    size before its bytes are used, so both ranks raise naming the peer and both
    sizes, and nobody is killed."""
    x = torch.ones(10 if rank == 0 else 12)
    try:
        dist.all_reduce(x)
        return "no error"
    except RuntimeError as e:
        return str(e)


def test_sizes_that_disagree_raise_on_shm():
    msgs = mp.run_world(2, sizes_disagree, pg_timeout_s=10, transport="shm",
                        env={"RINGCOLL_FINGERPRINT": "0"})
    for rank, msg in enumerate(msgs):
        peer = 1 - rank
        assert f"rank {peer} sent a message of" in msg and "expected" in msg, msg
        assert "ringcoll::allreduce #1" in msg, msg


# --------------------------------------------------------------------------------
# 100 groups created and destroyed


def many_groups(rank, p):
    f = []

    def one_group(i):
        g = dist.new_group(backend="ringcoll")
        x = torch.full((5,), float(rank + i))
        dist.all_reduce(x, group=g)
        if not torch.equal(x, torch.full((5,), float(sum(r + i for r in range(p))))):
            f.append(f"group {i}: {x.tolist()}")
        dist.destroy_process_group(g)

    for i in range(3):  # warm-up: anything created once per process
        one_group(i)
    gc.collect()
    fds, shm = _open_fds(), _shm_entries()
    for i in range(100):
        one_group(i)
    gc.collect()
    # Not one more: a group that leaked a descriptor would show 100 more here (one
    # fewer can happen: something of the harness closes late).
    if _open_fds() > fds:
        f.append(f"open file descriptors {fds} -> {_open_fds()} after 100 groups")
    # A leak is a segment that appeared and stays. Entries may also vanish (segments
    # of a group still connecting at the first listing), and other worlds' come and
    # go on a shared machine: a new entry is judged after a pause.
    leaked = set(_shm_entries()) - set(shm)
    if leaked:
        time.sleep(2)
        leaked &= set(_shm_entries())
    if leaked:
        f.append(f"/dev/shm {shm} -> {_shm_entries()} after 100 groups: {sorted(leaked)} stayed")
    return f


@pytest.mark.alone
def test_100_groups_leave_nothing_behind(transport):
    mp.run_checks(3, many_groups, timeout=600, transport=transport)


# A fixed segment token, so that the tests can put files where a group will create
# its segments (a random 64-bit token otherwise: a collision is never seen by chance).
FORCED_TOKEN = 0x5EED0000C0FFEE00


def _segment(token, rank):
    return f"/dev/shm/ringcoll-{token:016x}-{rank}"


def stale_segments_replaced(rank, p, colliding, bystanders):
    """A crashed job's segments under the very names this group creates (nobody holds
    their liveness lock) are replaced; files under other names are left alone."""
    ringcoll._C._set_shm_token_for_tests(FORCED_TOKEN)
    f = []
    try:
        for _ in range(3):
            g = dist.new_group(backend="ringcoll")
            x = torch.full((9,), float(rank))
            dist.all_reduce(x, group=g)
            if not torch.equal(x, torch.full((9,), float(sum(range(p))))):
                f.append(f"all_reduce beside stale segments: {x.tolist()}")
            dist.destroy_process_group(g)
    finally:
        ringcoll._C._set_shm_token_for_tests(0)
    dist.barrier()
    left = [n for n in colliding if os.path.exists(n)]
    if left:
        f.append(f"stale segments under the group's names still there: {left}")
    gone = [n for n in bystanders if not os.path.exists(n)]
    if gone:
        f.append(f"files under other names removed: {gone}")
    return f


def _write_stale(path, i):
    with open(path, "wb") as fh:
        # magic "RCSHM001" and garbage: what a crashed job's segment looks like
        fh.write((0x3130304d48534352).to_bytes(8, "little") + os.urandom(4088 * (i + 1)))


def test_stale_segments_of_a_crashed_job_are_replaced():
    colliding = [_segment(FORCED_TOKEN, r) for r in range(3)]
    bystanders = [_segment(FORCED_TOKEN + 1, r) for r in range(3)]
    try:
        for i, path in enumerate(colliding + bystanders):
            _write_stale(path, i)
        mp.run_checks(3, stale_segments_replaced, colliding, bystanders, transport="shm")
    finally:
        for path in colliding + bystanders:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


def live_segment_collides(rank, p, holder_pid):
    ringcoll._C._set_shm_token_for_tests(FORCED_TOKEN)
    try:
        dist.new_group(backend="ringcoll")
    except Exception as e:  # noqa: BLE001 - the message is what is checked
        text = str(e)
    else:
        return ["a group was created over a segment name a live process holds"]
    finally:
        ringcoll._C._set_shm_token_for_tests(0)
    want = (f"ringcoll-{FORCED_TOKEN:016x}-1 already exists and is held by pid {holder_pid}")
    return [] if want in text else [f"error does not say {want!r}: {text}"]


def test_a_segment_name_held_by_a_live_process_is_an_error_on_every_rank():
    path = _segment(FORCED_TOKEN, 1)
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)  # the liveness lock's byte
        mp.run_checks(3, live_segment_collides, os.getpid(), transport="shm", timeout=60)
        assert os.path.exists(path), "the live process's segment was removed"
    finally:
        os.close(fd)
        os.unlink(path)


# --------------------------------------------------------------------------------
# more ranks than cores


def allreduces_200(rank, p):
    f = []
    t0 = time.perf_counter()
    for i in range(200):
        x = torch.full((i % 7 + 1,), float(rank + i))
        dist.all_reduce(x)
        want = float(sum(r + i for r in range(p)))
        if not torch.equal(x, torch.full_like(x, want)):
            f.append(f"all_reduce {i}: {x.tolist()}, expected {want}")
    elapsed = time.perf_counter() - t0
    print(f"rank {rank} of {p}: 200 all-reduces in {elapsed:.3f} s")
    return f


@pytest.mark.parametrize("world_size", [4, 8])
def test_ranks_outnumber_cores(world_size):
    # 4 and 8 ranks on CI's 2 cores: waiting ranks yield and sleep instead of spinning,
    # so the rank everybody waits for gets a core.
    mp.run_checks(world_size, allreduces_200, timeout=300, transport="shm")


# --------------------------------------------------------------------------------
# tiny segments, whole elements


def tiny_chunks(rank, p):
    """Segments are whole elements of at most chunk_bytes: 100 bytes hold 12 float64
    (96 bytes), 50 float16, 100 int8. (RINGCOLL_CHUNK_BYTES=4 with float64 once wrote
    past the staging buffer; below 64 bytes is now refused.)"""
    f = []
    for chunk in (64, 72, 100):
        g = dist.new_group(backend="ringcoll", pg_options=ringcoll.Options(chunk_bytes=chunk))
        for dtype in (torch.float64, torch.int64, torch.float16, torch.int8, torch.float32):
            for n in (1, p + 1, 13, 100, 1001):
                for op in ("SUM", "AVG", "MAX"):
                    if not cases.op_valid(op, dtype):
                        continue
                    inputs = [cases.make_input(r, n, dtype, op, p) for r in range(p)]
                    x = inputs[rank].clone()
                    dist.all_reduce(x, op=cases.reduce_op(op), group=g)
                    if not cases.same(x, cases.reference(inputs, op, dtype, p)):
                        f.append(f"chunk {chunk} {dtype} {op} n={n}: {x[:6].tolist()}")
                parts = [cases.make_input(r, n, dtype, "SUM", p, salt=r) for r in range(p)]
                out = torch.empty(p * n, dtype=dtype)
                dist.all_gather_into_tensor(out, parts[rank].clone(), group=g)
                if not cases.same(out, torch.cat(parts)):
                    f.append(f"chunk {chunk} {dtype} all_gather n={n}")
                b = parts[0].clone() if rank == 0 else torch.zeros(n, dtype=dtype)
                dist.broadcast(b, src=0, group=g)
                if not cases.same(b, parts[0]):
                    f.append(f"chunk {chunk} {dtype} broadcast n={n}")
    for bad in (4, 63):
        _expect(f, f"chunk_bytes={bad}",
                lambda: dist.new_group(backend="ringcoll",
                                       pg_options=ringcoll.Options(chunk_bytes=bad)),
                "RINGCOLL_CHUNK_BYTES", f"'{bad}'", ">= 64")
    return f


def test_tiny_chunks_whole_elements(transport):
    mp.run_checks(3, tiny_chunks, timeout=600, transport=transport)
