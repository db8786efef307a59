"""Point-to-point on ringcoll's own transports: send, recv, recv from any source,
isend/irecv with tags, batch_isend_irecv; a late, a killed and a disagreeing peer;
destroy and abort with a receive pending; monitored_barrier.

Every payload is a closed-form small integer pattern of (sender, receiver, tag,
index), exact in every dtype, so each rank checks what it received by computing it.
The full pattern grid runs for p = 2, 3 on both CPU transports; p = 4 on two
pretend hosts (shared memory within, gloo between) and p = 5 on shared memory are
sampled (fewer dtypes, no 16 MiB message).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from tests import mp

DTYPES = [torch.float32, torch.float64, torch.int64, torch.int32, torch.uint8,
          torch.bfloat16, torch.float16, torch.bool]
SAMPLED_DTYPES = [torch.float32, torch.uint8]
LARGE = 4 << 20  # float32 elements: a 16 MiB message (16 segments of 1 MiB)


def payload(src, dst, tag, n, dtype=torch.float32):
    """The message rank src sends rank dst with `tag`: values below 100 (0/1 for
    bool), different for every (src, dst, tag) and along the message."""
    v = (torch.arange(n, dtype=torch.int64) + 7 * src + 3 * dst + 11 * tag) % 100
    return (v % 2).bool() if dtype == torch.bool else v.to(dtype)


def _check(f, what, got, want):
    if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
        f.append(f"{what}: got {got.flatten()[:6].tolist()} ({got.dtype}, {tuple(got.shape)}), "
                 f"expected {want.flatten()[:6].tolist()}")


# --------------------------------------------------------------------------------
# the patterns


def ring_pass(f, rank, p, dtype, n):
    """The tutorial's ring: rank 0 starts a message round the ring; every rank
    receives it from the left, checks it and passes its own to the right."""
    left, right = (rank - 1) % p, (rank + 1) % p
    mine = payload(rank, right, 1, n, dtype)
    got = torch.full((n,), 1, dtype=dtype) if n else torch.empty(0, dtype=dtype)
    if rank == 0:
        dist.send(mine, dst=right, tag=1)
        dist.recv(got, src=left, tag=1)
    else:
        dist.recv(got, src=left, tag=1)
        dist.send(mine, dst=right, tag=1)
    _check(f, f"ring pass {dtype} n={n} from rank {left}", got, payload(left, rank, 1, n, dtype))


def all_pairs(f, rank, p, n):
    recvs = {q: torch.empty(n) for q in range(p) if q != rank}
    works = [dist.irecv(t, src=q, tag=2) for q, t in recvs.items()]
    works += [dist.isend(payload(rank, q, 2, n), dst=q, tag=2) for q in range(p) if q != rank]
    for w in works:
        w.wait()
    for q, t in recvs.items():
        _check(f, f"all pairs from rank {q}", t, payload(q, rank, 2, n))


def tags_interleaved(f, rank, p):
    """Each rank sends its right neighbour messages with tags 5, 9, 2, 7 and two
    with tag 3 (of different sizes); the neighbour posts its receives in another
    tag order. Same-tag messages arrive in send order."""
    right, left = (rank + 1) % p, (rank - 1) % p
    sends = [(5, 3), (9, 0), (3, 4), (2, 1), (7, 1000), (3, 2)]  # (tag, elements)
    recv_order = [(7, 1000), (3, 4), (2, 1), (9, 0), (3, 2), (5, 3)]
    got = {}
    works = []
    for i, (tag, n) in enumerate(recv_order):
        t = torch.full((n,), -1.0)
        got[i] = (tag, n, t)
        works.append(dist.irecv(t, src=left, tag=tag))
    for tag, n in sends:
        works.append(dist.isend(payload(rank, right, tag, n) + n, dst=right, tag=tag))
    for w in works:
        w.wait()
    for i, (tag, n, t) in got.items():
        _check(f, f"tag {tag} ({n} elements) from rank {left}", t,
               payload(left, rank, tag, n) + n)


def any_source(f, rank, p):
    """Rank 0 receives one message from every other rank without naming the
    source; recv() returns who sent it, and the payload must be that rank's."""
    n = 5
    if rank == 0:
        seen = []
        for _ in range(p - 1):
            t = torch.empty(n)
            src = dist.recv(t, tag=11)
            seen.append(src)
            _check(f, f"any source (reported rank {src})", t, payload(src, 0, 11, n))
        if sorted(seen) != list(range(1, p)):
            f.append(f"any source: senders reported {seen}")
    else:
        dist.send(payload(rank, 0, 11, n), dst=0, tag=11)


def batch_ring(f, rank, p):
    """torch's batch_isend_irecv example: a ring exchange; ringcoll supports
    coalescing, so the batch comes back as one Work."""
    send_t = torch.arange(2, dtype=torch.float32) + 2 * rank
    recv_t = torch.randn(2)
    ops = [dist.P2POp(dist.isend, send_t, (rank + 1) % p),
           dist.P2POp(dist.irecv, recv_t, (rank - 1) % p)]
    reqs = dist.batch_isend_irecv(ops)
    if len(reqs) != 1:
        f.append(f"batch_isend_irecv returned {len(reqs)} works, expected 1 (coalesced)")
    for r in reqs:
        r.wait()
    _check(f, "batch ring", recv_t, torch.arange(2, dtype=torch.float32) + 2 * ((rank - 1) % p))
    # Every pair at once, with tags, in one batch.
    outs = {q: torch.empty(4, dtype=torch.int32) for q in range(p) if q != rank}
    ops = [dist.P2POp(dist.irecv, t, q, tag=4) for q, t in outs.items()]
    ops += [dist.P2POp(dist.isend, payload(rank, q, 4, 4, torch.int32), q, tag=4)
            for q in range(p) if q != rank]
    for r in dist.batch_isend_irecv(ops):
        r.wait()
    for q, t in outs.items():
        _check(f, f"batch all pairs from rank {q}", t, payload(q, rank, 4, 4, torch.int32))


def coalesced_collectives(f, rank, p):
    """torch's coalescing manager with a device (as batch_isend_irecv uses it) around
    all-reduces: torch runs them as one all_reduce_coalesced and returns the Work of
    endCoalescing, which must cover them."""
    xs = [torch.full((n,), float(rank + 1)) for n in (3, 1000)]
    with dist.distributed_c10d._coalescing_manager(device=torch.device("cpu"),
                                                   async_ops=True) as cm:
        for x in xs:
            dist.all_reduce(x)
    cm.wait()
    for x in xs:
        _check(f, "coalesced all_reduce", x, torch.full(x.shape, float(p * (p + 1) // 2)))


def strided(f, rank, p):
    """A strided slice sent, received into a transposed (non-contiguous) view."""
    right, left = (rank + 1) % p, (rank - 1) % p
    big = payload(rank, right, 6, 48).view(4, 12)
    dst = torch.zeros(6, 4).t()  # 4 x 6, non-contiguous
    w = [dist.irecv(dst, src=left, tag=6), dist.isend(big[:, ::2], dst=right, tag=6)]
    for x in w:
        x.wait()
    _check(f, "strided send into a transposed view", dst,
           payload(left, rank, 6, 48).view(4, 12)[:, ::2].contiguous())


def with_collectives(f, rank, p):
    """A receive pending across collectives: point-to-point never takes a
    collective's messages or the other way round."""
    right, left = (rank + 1) % p, (rank - 1) % p
    t = torch.empty(100)
    w = dist.irecv(t, src=left, tag=12)
    x = torch.full((1000,), float(rank + 1))
    dist.all_reduce(x)
    _check(f, "all_reduce beside a pending recv", x, torch.full((1000,), float(p * (p + 1) // 2)))
    s = dist.isend(payload(rank, right, 12, 100), dst=right, tag=12)
    dist.barrier()
    w.wait()
    s.wait()
    _check(f, "recv across collectives", t, payload(left, rank, 12, 100))


def ring_pass_grid(f, rank, p, full):
    """ring_pass in every dtype at counts 0, 1, 1000 and 16 MiB (sampled: fewer
    dtypes, no 16 MiB)."""
    for dtype in DTYPES if full else SAMPLED_DTYPES:
        for n in (0, 1, 1000) if full else (0, 1000):
            ring_pass(f, rank, p, dtype, n)
    if full:
        ring_pass(f, rank, p, torch.float32, LARGE)


def patterns(rank, p, full):
    f = []
    ring_pass_grid(f, rank, p, full)
    all_pairs(f, rank, p, 33)
    tags_interleaved(f, rank, p)
    any_source(f, rank, p)
    batch_ring(f, rank, p)
    if full:
        coalesced_collectives(f, rank, p)
        strided(f, rank, p)
        complex_and_self(f, rank, p)
    with_collectives(f, rank, p)
    return f


def complex_and_self(f, rank, p):
    right, left = (rank + 1) % p, (rank - 1) % p
    c = torch.complex(payload(rank, right, 8, 3), payload(rank, right, 9, 3))
    cr = torch.zeros(3, dtype=torch.complex64)
    w = [dist.irecv(cr, src=left, tag=8), dist.isend(c, dst=right, tag=8)]
    for x in w:
        x.wait()
    _check(f, "complex", cr, torch.complex(payload(left, rank, 8, 3), payload(left, rank, 9, 3)))
    me = torch.empty(3)
    w = [dist.isend(payload(rank, rank, 10, 3), dst=rank, tag=10),
         dist.irecv(me, src=rank, tag=10)]
    for x in w:
        x.wait()
    _check(f, "to itself", me, payload(rank, rank, 10, 3))


@pytest.mark.parametrize("p", [2, 3])
def test_patterns(p, transport):
    mp.run_checks(p, patterns, True, transport=transport, label=f"p={p} {transport}: ")


MIXED = {"RINGCOLL_HOST": ["pretend-a", "pretend-b", "pretend-a", "pretend-b"]}


def test_patterns_mixed_hosts():
    """2 pretend hosts x 2 ranks: shared memory within a host, gloo between."""
    mp.run_checks(4, patterns, False, rank_env=MIXED, label="mixed: ")


def test_patterns_p5():
    mp.run_checks(5, patterns, False, transport="shm", label="p=5: ")


# --------------------------------------------------------------------------------
# a disagreeing and a late peer


def _error(fn):
    t0 = time.monotonic()
    try:
        fn()
        return "no error", time.monotonic() - t0
    except RuntimeError as e:
        return str(e), time.monotonic() - t0


def mismatch_and_late(rank, p):
    """Group timeout 2 s. (1) rank 0 sends 4 float32 where rank 1 receives 3: rank 1
    raises naming both sizes, its tensor untouched, and the next exchange is in
    step. (2) rank 1 is 3.5 s late with a send: rank 0's recv times out after 2 s,
    naming op, number and peer; the late message waits for the next recv. (3) a
    recv from any source with nobody sending times out the same way."""
    f = []
    if rank == 0:
        dist.send(torch.ones(4), dst=1, tag=3)
    else:
        t = torch.full((3,), -1.0)
        msg, _ = _error(lambda: dist.recv(t, src=0, tag=3))
        for frag in ("ringcoll::recv #1 (rank 1 of 2)", "rank 0", "16 bytes", "12 bytes",
                     "tag 3"):
            if frag not in msg:
                f.append(f"mismatch: message lacks {frag!r}: {msg}")
        if not torch.equal(t, torch.full((3,), -1.0)):
            f.append(f"mismatch: the receive wrote {t.tolist()}")
    # Still in step.
    right, left = (rank + 1) % p, (rank - 1) % p
    t = torch.empty(5)
    w = [dist.irecv(t, src=left, tag=3), dist.isend(payload(rank, right, 3, 5), dst=right, tag=3)]
    for x in w:
        x.wait()
    _check(f, "after the mismatch", t, payload(left, rank, 3, 5))

    dist.barrier(group=mp.GLOO)
    if rank == 0:
        t = torch.empty(6)
        msg, elapsed = _error(lambda: dist.recv(t, src=1, tag=4))
        if not 1.8 <= elapsed < 3.4:
            f.append(f"late peer: failed after {elapsed:.2f} s (timeout 2 s): {msg}")
        for frag in ("ringcoll::recv #", "(rank 0 of 2)", " Timed out ", "rank 1", "tag 4"):
            if frag not in msg:
                f.append(f"late peer: message lacks {frag!r}: {msg}")
        dist.barrier(group=mp.GLOO)  # rank 1 has sent now
        dist.recv(t, src=1, tag=4)   # the late message, kept for the next recv
        _check(f, "the late message", t, payload(1, 0, 4, 6))
        msg, elapsed = _error(lambda: dist.recv(torch.empty(1), tag=99))
        if "Timed out" not in msg or "any rank" not in msg or not 1.8 <= elapsed < 3.4:
            f.append(f"any source with no sender: {elapsed:.2f} s: {msg}")
    else:
        time.sleep(3.5)
        dist.send(payload(1, 0, 4, 6), dst=0, tag=4)
        dist.barrier(group=mp.GLOO)
    # The collectives never noticed.
    dist.barrier(group=mp.GLOO)  # rank 0 spent 2 s above: start together
    x = torch.full((3,), float(rank + 1))
    dist.all_reduce(x)
    _check(f, "all_reduce after point-to-point failures", x, torch.full((3,), 3.0))
    # (4) destroy_process_group with a receive pending on a live peer: shutdown lets
    # a moving request finish; this one waits for a message that never comes and
    # fails after the 2 s grace (not the timeout, which is 2 s here too: the grace
    # is what ends it, since destroy returns within it).
    dist.barrier(group=mp.GLOO)
    if rank == 1:
        time.sleep(4)  # alive, so that rank 0's receive ends by the shutdown
        return f
    w = dist.irecv(torch.empty(4), src=1, tag=13)
    t0 = time.monotonic()
    dist.destroy_process_group()
    returned = time.monotonic() - t0
    msg, _ = _error(w.wait)
    if returned > 5 or "ringcoll::recv #" not in msg or "rank 1" not in msg:
        f.append(f"destroy with a recv pending: returned after {returned:.2f} s: {msg}")
    if "shut down" not in msg and "Timed out" not in msg:
        f.append(f"destroy with a recv pending: {msg}")
    return f


@pytest.mark.alone
def test_mismatch_and_late_peer(transport):
    mp.run_checks(2, mismatch_and_late, pg_timeout_s=2, transport=transport, timeout=120)


def coalesced_late_peer(rank, p):
    """A batch's wait times out while one of its receives waits for a late rank:
    the error names the batch, the receive still unfinished and the rank it waits
    for (not only how many operations there were), and leaves out the send that
    finished. The late message then completes the batch."""
    f = []
    if rank == 0:
        got = torch.empty(5)
        ops = [dist.P2POp(dist.isend, payload(0, 1, 6, 5), 1, tag=6),
               dist.P2POp(dist.irecv, got, 2, tag=7)]
        (req,) = dist.batch_isend_irecv(ops)
        msg, elapsed = _error(lambda: req.wait(timedelta(seconds=1)))
        for frag in ("ringcoll::coalesced #", "(rank 0 of 3)", "Timed out after 1000 ms",
                     "1 of 2 coalesced operations", "ringcoll::recv #", "rank 2", "tag 7"):
            if frag not in msg:
                f.append(f"coalesced timeout: message lacks {frag!r}: {msg}")
        if "sending to rank 1" in msg:
            f.append(f"coalesced timeout names the send that finished: {msg}")
        dist.barrier(group=mp.GLOO)  # rank 2 sends now
        req.wait()
        _check(f, "the late message", got, payload(2, 0, 7, 5))
    elif rank == 1:
        t = torch.empty(5)
        dist.recv(t, src=0, tag=6)
        _check(f, "the batch's send", t, payload(0, 1, 6, 5))
        dist.barrier(group=mp.GLOO)
    else:
        dist.barrier(group=mp.GLOO)
        dist.send(payload(2, 0, 7, 5), dst=0, tag=7)
    return f


def test_coalesced_timeout_names_the_late_peer(transport):
    mp.run_checks(3, coalesced_late_peer, pg_timeout_s=30, transport=transport, timeout=120)


# --------------------------------------------------------------------------------
# a killed peer


def killed_peer(rank, p):
    """Rank 2 is killed while ranks 0 and 1 wait to receive from it: they raise
    at once (not after the 30 s timeout) naming rank 2; 0 and 1 still talk."""
    f = []
    if rank == 2:
        dist.barrier(group=mp.GLOO)
        threading.Timer(0.2, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
        time.sleep(60)  # not reached
    w = dist.irecv(torch.empty(8), src=2, tag=1)
    dist.barrier(group=mp.GLOO)
    msg, elapsed = _error(w.wait)
    if elapsed > 10:
        f.append(f"killed peer noticed after {elapsed:.1f} s: {msg}")
    if f"ringcoll::recv #1 (rank {rank} of 3)" not in msg or "rank 2" not in msg:
        f.append(f"killed peer: {msg}")
    if "exited" not in msg and "failed (gloo:" not in msg:
        f.append(f"killed peer: says neither 'exited' nor 'failed (gloo:': {msg}")
    if "Timed out" in msg:
        f.append(f"killed peer reported as a timeout: {msg}")
    # A later call to the dead rank fails at once; the living pair still works.
    msg2, elapsed2 = _error(lambda: dist.send(torch.ones(2), dst=2))
    if "rank 2" not in msg2 or elapsed2 > 1:
        f.append(f"send to the dead rank: {elapsed2:.2f} s: {msg2}")
    other = 1 - rank
    t = torch.empty(4)
    w = [dist.irecv(t, src=other, tag=5), dist.isend(payload(rank, other, 5, 4), dst=other, tag=5)]
    for x in w:
        x.wait()
    _check(f, "between the survivors", t, payload(other, rank, 5, 4))
    # abort() with a receive pending on a live peer: returns at once, and the
    # receive fails saying so.
    if rank == 1:
        time.sleep(2)  # alive while rank 0 aborts
        return f
    w = dist.irecv(torch.empty(4), src=1, tag=14)
    t0 = time.monotonic()
    dist.distributed_c10d._abort_process_group()
    returned = time.monotonic() - t0
    msg, _ = _error(w.wait)
    if returned > 1 or "aborted" not in msg or "ringcoll::recv #" not in msg or "rank 1" not in msg:
        f.append(f"abort with a recv pending: returned after {returned:.2f} s: {msg}")
    return f


def test_killed_peer(transport):
    res = mp.run_world(3, killed_peer, pg_timeout_s=30, transport=transport, may_exit={2},
                       timeout=120)
    failures = [f"rank {r}: {x}" for r, fs in enumerate(res[:2]) for x in fs]
    assert res[2] is None
    assert not failures, "\n".join(failures)


# --------------------------------------------------------------------------------
# monitored_barrier


def _backend():
    return dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))


def monitored(rank, p):
    f = []
    pg = dist.distributed_c10d._get_default_group()
    # Everybody present: both entry points, both modes.
    pg.monitored_barrier(timedelta(seconds=10))
    _backend().monitored_barrier(timedelta(seconds=10), True)

    # Rank 2 skips: rank 0 names it after the timeout; rank 1 hears it from rank 0.
    dist.barrier(group=mp.GLOO)
    if rank != 2:
        msg, elapsed = _error(lambda: _backend().monitored_barrier(timedelta(seconds=1.5), False))
        want = ["Rank 2 failed to pass monitoredBarrier in 1500 ms", " Timed out "] if rank == 0 \
            else ["Rank 1 successfully reached monitoredBarrier, but received errors while "
                  "waiting for send/recv from rank 0", "rank 0 reported", "Rank 2 failed"]
        for frag in want + [f"ringcoll::monitored_barrier #3 (rank {rank} of 3)"]:
            if frag not in msg:
                f.append(f"rank 2 missing: message lacks {frag!r}: {msg}")
        if not 1.3 <= elapsed < 3.5:
            f.append(f"rank 2 missing: raised after {elapsed:.2f} s: {msg}")
    dist.barrier(group=mp.GLOO)

    # Ranks 1 and 2 skip, wait_all_ranks: rank 0 names both.
    if rank == 0:
        msg, elapsed = _error(lambda: pg.monitored_barrier(timedelta(seconds=1),
                                                           wait_all_ranks=True))
        if "Ranks 1, 2 failed to pass monitoredBarrier in 1000 ms" not in msg:
            f.append(f"wait_all_ranks: {msg}")
        # Timeout 0: rank 0 itself ran out of time.
        msg, _ = _error(lambda: pg.monitored_barrier(timedelta(seconds=0)))
        if "Rank 0 timed out in monitoredBarrier" not in msg:
            f.append(f"timeout 0: {msg}")
    dist.barrier(group=mp.GLOO)

    # Nothing left over: everybody passes again.
    _backend().monitored_barrier(timedelta(seconds=10), False)
    # Rank 0 may not tear down while ranks 1 and 2 still read its release: in a
    # busy CI run they read "connection closed by peer" there once (ranks forked by
    # tests/mp.py exit sooner than spawned ones). Left for the p2p engine to settle.
    dist.barrier(group=mp.GLOO)
    return f


@pytest.mark.alone
def test_monitored_barrier(transport):
    mp.run_checks(3, monitored, transport=transport, pg_timeout_s=30, timeout=120)
