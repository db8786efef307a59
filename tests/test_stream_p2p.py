"""Point-to-point on the stream path (csrc/backend/api_p2p.cc), the path CUDA tensors
take over NCCL, run on its CPU emulation (RINGCOLL_TRANSPORT=stream): send, recv,
isend/irecv and batch_isend_irecv as jobs on a device's streams, messages between two
ranks paired in call order (NCCL's semantics), each pair's calls checked by a header
compared on the device, so that calls that disagree raise instead of pairing wrong
bytes.

Payloads are test_p2p's closed-form small integers of (sender, receiver, tag, index),
exact in every dtype. The patterns are the ones NCCL runs: on a stream, a receive
waits for its sender, so exchanges that need both directions at once go in one
batch_isend_irecv. The full grid runs for p = 2, 3; p = 4, 5 are sampled.
"""

from __future__ import annotations

import time

import pytest
import torch
import torch.distributed as dist

from tests import mp
from tests.test_p2p import _check, batch_ring, payload, ring_pass_grid

DELAY_US = {"RINGCOLL_STREAM_DELAY_US": "200"}


def strided_batched(f, rank, p):
    """A strided slice sent, received into a transposed (non-contiguous) view, in
    one batch (each rank receives from its left while it sends to its right)."""
    right, left = (rank + 1) % p, (rank - 1) % p
    big = payload(rank, right, 6, 48).view(4, 12)
    dst = torch.zeros(6, 4).t()  # 4 x 6, non-contiguous
    ops = [dist.P2POp(dist.irecv, dst, left, tag=6), dist.P2POp(dist.isend, big[:, ::2], right, tag=6)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    _check(f, "strided send into a transposed view", dst,
           payload(left, rank, 6, 48).view(4, 12)[:, ::2].contiguous())


def both_ways_and_empty(f, rank, p):
    """Two messages each way between neighbours in one batch, one of them empty, and
    a complex one: each pair's header describes both directions."""
    right, left = (rank + 1) % p, (rank - 1) % p
    got = [torch.full((5,), -1.0), torch.empty(0), torch.zeros(3, dtype=torch.complex64)]
    c = torch.complex(payload(rank, right, 8, 3), payload(rank, right, 9, 3))
    ops = [dist.P2POp(dist.isend, payload(rank, right, 1, 5), right, tag=1),
           dist.P2POp(dist.isend, torch.empty(0), right, tag=2),
           dist.P2POp(dist.isend, c, right, tag=8),
           dist.P2POp(dist.irecv, got[0], left, tag=1),
           dist.P2POp(dist.irecv, got[1], left, tag=2),
           dist.P2POp(dist.irecv, got[2], left, tag=8)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    _check(f, "first of two", got[0], payload(left, rank, 1, 5))
    _check(f, "empty", got[1], torch.empty(0))
    _check(f, "complex", got[2],
           torch.complex(payload(left, rank, 8, 3), payload(left, rank, 9, 3)))


def beside_collectives(f, rank, p):
    """A batch in flight while collectives run: point-to-point has a stream path (and
    NCCL communicator) of its own, so neither takes the other's messages."""
    right, left = (rank + 1) % p, (rank - 1) % p
    t = torch.empty(100)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.irecv, t, left, tag=12),
                                   dist.P2POp(dist.isend, payload(rank, right, 12, 100), right,
                                              tag=12)])
    x = torch.full((1000,), float(rank + 1))
    dist.all_reduce(x)
    _check(f, "all_reduce beside a batch", x, torch.full((1000,), float(p * (p + 1) // 2)))
    for w in reqs:
        w.wait()
    _check(f, "batch beside collectives", t, payload(left, rank, 12, 100))


def stream_patterns(rank, p, full):
    f = []
    ring_pass_grid(f, rank, p, full)
    batch_ring(f, rank, p)
    strided_batched(f, rank, p)
    both_ways_and_empty(f, rank, p)
    beside_collectives(f, rank, p)
    return f


@pytest.mark.parametrize("p", [2, 3])
def test_stream_patterns(p):
    mp.run_checks(p, stream_patterns, True, transport="stream", env=DELAY_US,
                  label=f"p={p} stream: ", timeout=300)


@pytest.mark.parametrize("p", [4, 5])
def test_stream_patterns_sampled(p):
    mp.run_checks(p, stream_patterns, False, transport="stream", env=DELAY_US,
                  label=f"p={p} stream: ", timeout=300)


# --------------------------------------------------------------------------------
# calls that disagree, late peers, what the stream path refuses


def _error(call):
    try:
        call()
        return "no error"
    except Exception as e:  # noqa: BLE001
        return str(e)


def disagreeing(rank, p, how):
    """Ranks 0 and 1 make point-to-point calls that do not pair: both raise naming
    both calls, nothing is written into the receiving tensor, the next send/recv says
    the path is unusable, and collectives still work."""
    out = {}
    dst = torch.full((6,), -1.0)
    if rank == 0:
        if how == "size":
            out["first"] = _error(lambda: dist.send(torch.ones(5), 1, tag=4))
        elif how == "tag":
            out["first"] = _error(lambda: dist.send(torch.ones(6), 1, tag=4))
        else:  # both send
            out["first"] = _error(lambda: dist.send(torch.ones(6), 1, tag=4))
    else:
        if how == "send-send":
            out["first"] = _error(lambda: dist.send(torch.ones(6), 0, tag=4))
        else:
            out["first"] = _error(lambda: dist.recv(dst, 0, tag=5 if how == "tag" else 4))
            out["intact"] = bool(torch.equal(dst, torch.full((6,), -1.0)))
    out["next"] = _error(lambda: dist.send(torch.ones(1), 1 - rank))
    x = torch.full((10,), float(rank + 1))
    dist.all_reduce(x)
    out["collective"] = bool(torch.equal(x, torch.full((10,), 3.0)))
    return out


@pytest.mark.parametrize("how", ["size", "tag", "send-send"])
def test_disagreeing_calls_raise(how):
    res = mp.run_world(2, disagreeing, how, pg_timeout_s=20, transport="stream", timeout=120,
                       env=DELAY_US)
    for rank, r in enumerate(res):
        assert "ranks disagree about point-to-point call #1" in r["first"], (rank, r)
        assert "rank 0 called send/recv" in r["first"], (rank, r)
        assert "rank 1 called send/recv" in r["first"], (rank, r)
        assert "unusable after an earlier failure" in r["next"], (rank, r)
        assert r["collective"], (rank, r)
        assert r.get("intact", True), (rank, r)
    if how == "size":
        assert "20 bytes to rank 1" in res[0]["first"] and "24 from it" in res[1]["first"], res


def late_receiver(rank, p):
    """Rank 1 receives only after rank 0's timeout: rank 0's send fails naming the
    call, within the timeout and not much later."""
    if rank == 1:
        time.sleep(4)
        return None
    t0 = time.monotonic()
    msg = _error(lambda: dist.send(torch.ones(4), 1, tag=1))
    return msg, time.monotonic() - t0


@pytest.mark.alone
def test_late_receiver_times_out():
    res = mp.run_world(2, late_receiver, pg_timeout_s=1, transport="stream", timeout=120)
    msg, elapsed = res[0]
    assert "ringcoll::send #1 (rank 0 of 2)" in msg and "Timed out" in msg, msg
    assert elapsed < 3.5, (elapsed, msg)


def refused(rank, p):
    return {
        "any": _error(lambda: dist.recv(torch.empty(2))),
        "self": _error(lambda: dist.isend(torch.ones(2), rank).wait()),
    }


def test_any_source_and_self_refused():
    res = mp.run_world(2, refused, transport="stream", timeout=60)
    for r in res:
        assert "ringcoll::recv" in r["any"] and "any source" in r["any"], r
        assert "ringcoll::send" in r["self"] and "is this rank" in r["self"], r
