"""Small collectives (csrc/engine/small.h, RINGCOLL_SMALL_BYTES): all-reduce,
reduce-scatter, all-gather and broadcast. Which calls take them (logged under
RINGCOLL_DEBUG), exact against gloo and the reference at and around the limit for
every dtype and op, in place and out of place, the same bits on every rank for
inputs whose sum depends on the order, their place behind queued async
collectives, and ranks that disagree (one in a small collective, the other in a
scheduled one) raising on both sides naming both calls.

The rest of the suite runs them too: every one of these collectives of the default
algorithm up to 64 KiB on shared memory is a small one (test_collectives,
test_failures, test_errors, test_ops, test_ddp)."""

from __future__ import annotations

import os
import time

import pytest
import torch
import torch.distributed as dist

import ringcoll
from tests import cases, mp

LIMIT = 65536  # RINGCOLL_SMALL_BYTES's default


def _capture_stderr(path):
    saved = os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 2)
    os.close(fd)
    return saved


def choice_world(rank, p, log_dir):
    """Every dtype and op at counts 0, 1, p-1, p+1, the limit and one past it, on a
    default group (small up to the limit) and on groups where the small path is
    off (RINGCOLL_ALGO named, RINGCOLL_SMALL_BYTES=0); each result exact against
    gloo and the reference, and the log names the path each size took."""
    f = []
    path = os.path.join(log_dir, f"rank{rank}.log")
    saved = _capture_stderr(path)
    try:
        groups = {
            "default": dist.new_group(backend="ringcoll",
                                      pg_options=ringcoll.Options(debug=True)),
            "algo=ring": dist.new_group(backend="ringcoll",
                                        pg_options=ringcoll.Options(algo="ring", debug=True)),
            "small=0": dist.new_group(backend="ringcoll",
                                      pg_options=ringcoll.Options(small_bytes=0, debug=True)),
        }
        for dtype in cases.DTYPES:
            size = torch.empty(0, dtype=dtype).element_size()
            limit = LIMIT // size
            for op in cases.OPS:
                if not cases.op_valid(op, dtype):
                    continue
                for n in sorted({0, 1, max(p - 1, 0), p + 1, limit, limit + 1}):
                    inputs = [cases.make_input(r, n, dtype, op, p) for r in range(p)]
                    want = cases.reference(inputs, op, dtype, p)
                    ref = None
                    if op not in ("AVG", "PREMUL_SUM"):  # gloo's AVG: not on every dtype
                        y = inputs[rank].clone()
                        ref = cases.gloo_or_none(
                            lambda: (dist.all_reduce(y, op=cases.reduce_op(op), group=mp.GLOO),
                                     y)[1])
                    for name, g in groups.items():
                        x = inputs[rank].clone()
                        dist.all_reduce(x, op=cases.reduce_op(op), group=g)
                        cases.check_same(f, f"{name} {dtype} {op} n={n}", x, want, ref)
        # Out of place of a strided view: the rest of its base untouched.
        base = torch.arange(12, dtype=torch.float32).view(3, 4) + rank
        col = base[:, 2]
        dist.all_reduce(col, group=groups["default"])
        want = torch.arange(12, dtype=torch.float32).view(3, 4) + rank
        want[:, 2] = (torch.arange(12, dtype=torch.float32).view(3, 4) * p + sum(range(p)))[:, 2]
        if not torch.equal(base, want):
            f.append(f"strided column: {base.tolist()}")
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    log = open(path).read()
    me = f"[ringcoll rank {rank}/{p}]"
    small = "small-allreduce (RINGCOLL_SMALL_BYTES)"
    for line in (f"{me} all_reduce 4 B: {small}",
                 f"{me} all_reduce {LIMIT} B: {small}",
                 f"{me} all_reduce {LIMIT + 4} B: ring (RINGCOLL_ALGO=ring)",
                 f"{me} all_reduce 4 B: ring (RINGCOLL_ALGO=ring)"):
        if p > 1 and line not in log:
            f.append(f"log lacks {line!r}")
    if p > 1 and f"{LIMIT + 4} B: {small}" in log:
        f.append("a call past the limit ran the small all-reduce")
    # PREMUL_SUM (its scaling is a prologue) never does.
    if p > 1 and len([ln for ln in log.splitlines() if small in ln]) == 0:
        f.append(f"no call ran the small all-reduce:\n{log[:2000]}")
    return f


def others_world(rank, p, log_dir):
    """Reduce-scatter, all-gather (tensor and list forms) and broadcast around the
    limit (the collective's whole buffer: p blocks for the first two), every dtype,
    the reducing ones with every op; in place and out of place; exact against the
    reference and gloo; the log names the small kind up to the limit and the ring
    past it."""
    f = []
    path = os.path.join(log_dir, f"rank{rank}.log")
    saved = _capture_stderr(path)
    try:
        g = dist.new_group(backend="ringcoll", pg_options=ringcoll.Options(debug=True))
        for dtype in cases.DTYPES:
            size = torch.empty(0, dtype=dtype).element_size()
            top = LIMIT // size // p  # the largest block that is still small
            for m in sorted({0, 1, p + 1, top, top + 1}):
                # reduce-scatter: every op
                for op in cases.OPS:
                    if not cases.op_valid(op, dtype):
                        continue
                    ins = [cases.make_input(r, p * m, dtype, op, p) for r in range(p)]
                    want = cases.reference(ins, op, dtype, p)[rank * m:(rank + 1) * m]
                    out = torch.full((m,), 7, dtype=dtype) if dtype != torch.bool \
                        else torch.zeros(m, dtype=dtype)
                    dist.reduce_scatter_tensor(out, ins[rank].clone(), op=cases.reduce_op(op),
                                               group=g)
                    cases.check_same(f, f"reduce_scatter_tensor {dtype} {op} m={m}", out, want)
                    x = ins[rank].clone()  # in place: the output is block r of the input
                    dist.reduce_scatter_tensor(x[rank * m:(rank + 1) * m], x,
                                               op=cases.reduce_op(op), group=g)
                    cases.check_same(f, f"reduce_scatter_tensor in place {dtype} {op} m={m}",
                                     x[rank * m:(rank + 1) * m], want)
                    outs = torch.zeros(m, dtype=dtype)
                    dist.reduce_scatter(outs, list(ins[rank].clone().chunk(p)) if m else
                                        [torch.zeros(0, dtype=dtype)] * p,
                                        op=cases.reduce_op(op), group=g)
                    cases.check_same(f, f"reduce_scatter {dtype} {op} m={m}", outs, want)
                parts = [cases.make_input(r, m, dtype, "SUM", p) for r in range(p)]
                want = torch.cat(parts)
                out = torch.zeros(p * m, dtype=dtype)
                dist.all_gather_into_tensor(out, parts[rank].clone(), group=g)
                ref = torch.zeros(p * m, dtype=dtype)
                ref = cases.gloo_or_none(lambda: (dist.all_gather_into_tensor(
                    ref, parts[rank].clone(), group=mp.GLOO), ref)[1])
                cases.check_same(f, f"all_gather_into_tensor {dtype} m={m}", out, want, ref)
                out = torch.zeros(p * m, dtype=dtype)
                out[rank * m:(rank + 1) * m] = parts[rank]
                dist.all_gather_into_tensor(out, out[rank * m:(rank + 1) * m], group=g)
                cases.check_same(f, f"all_gather_into_tensor in place {dtype} m={m}", out, want)
                lst = [torch.zeros(m, dtype=dtype) for _ in range(p)]
                dist.all_gather(lst, parts[rank].clone(), group=g)
                cases.check_same(f, f"all_gather {dtype} m={m}", torch.cat(lst), want)
                n = p * m
                for root in sorted({0, p - 1}):
                    x = cases.make_input(rank, n, dtype, "SUM", p)
                    dist.broadcast(x, src=root, group=g)
                    cases.check_same(f, f"broadcast {dtype} n={n} root={root}", x,
                                     cases.make_input(root, n, dtype, "SUM", p))
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    log = open(path).read()
    me = f"[ringcoll rank {rank}/{p}]"
    top = LIMIT // 4 // p  # float32
    lines = [f"{me} reduce_scatter_tensor {4 * p * top} B: small-rscatter (RINGCOLL_SMALL_BYTES)",
             f"{me} reduce_scatter_tensor {4 * p * (top + 1)} B: ring (RINGCOLL_ALGO=ring)",
             f"{me} reduce_scatter {4 * p * top} B: small-rscatter (RINGCOLL_SMALL_BYTES)",
             f"{me} all_gather_into_tensor {4 * p * top} B: small-allgather (RINGCOLL_SMALL_BYTES)",
             f"{me} all_gather_into_tensor {4 * p * (top + 1)} B: ring (RINGCOLL_ALGO=ring)",
             f"{me} all_gather {4 * p * top} B: small-allgather (RINGCOLL_SMALL_BYTES)",
             f"{me} broadcast {4 * p * top} B: small-broadcast (RINGCOLL_SMALL_BYTES)",
             f"{me} broadcast {4 * p * (top + 1)} B: ring (RINGCOLL_ALGO=ring)"]
    for line in lines if p > 1 else []:
        if line not in log:
            f.append(f"log lacks {line!r}")
    return f


@pytest.mark.parametrize("p", [1, 2, 3, 5])
def test_small_others_exact_at_the_limit(p):
    with mp_tmpdir() as d:
        mp.run_checks(p, others_world, d, transport="shm", timeout=400)


@pytest.mark.parametrize("p", [1, 2, 3, 5])
def test_small_allreduce_exact_at_its_limit(p):
    with mp_tmpdir() as d:
        mp.run_checks(p, choice_world, d, transport="shm", timeout=300)


def mp_tmpdir():
    import tempfile
    return tempfile.TemporaryDirectory(prefix="ringcoll-small-")


def choice_off_world(rank, p, log_dir):
    """Where a link is not shared memory (gloo between every pair) the small path is
    never taken: the log shows the scheduled all-reduce for a 4-byte call."""
    path = os.path.join(log_dir, f"rank{rank}.log")
    saved = _capture_stderr(path)
    try:
        g = dist.new_group(backend="ringcoll", pg_options=ringcoll.Options(debug=True))
        x = torch.full((1,), float(rank + 1))
        dist.all_reduce(x, group=g)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    f = []
    if x.item() != p * (p + 1) / 2:
        f.append(f"sum {x.item()}")
    log = open(path).read()
    if f"all_reduce 4 B: ring (RINGCOLL_ALGO=ring)" not in log:
        f.append(f"log: {log[:2000]}")
    return f


def test_small_allreduce_not_on_gloo():
    with mp_tmpdir() as d:
        mp.run_checks(3, choice_off_world, d, transport="gloo")


def same_bits_world(rank, p):
    """Random float32 (and bfloat16) inputs, whose sum depends on the order: every
    rank ends with the same bits, those of the fold in rank order."""
    f = []
    for dtype in (torch.float32, torch.bfloat16, torch.float64):
        for n in (1, 7, 1000, LIMIT // torch.empty(0, dtype=dtype).element_size()):
            gen = [torch.Generator().manual_seed(1000 * r + n) for r in range(p)]
            inputs = [(torch.randn(n, generator=gen[r], dtype=torch.float64) * 10 ** (r % 3))
                      .to(dtype) for r in range(p)]
            for op in ("SUM", "MAX", "PRODUCT"):
                want = inputs[0].clone()
                for r in range(1, p):
                    want = {"SUM": torch.add, "MAX": torch.maximum,
                            "PRODUCT": torch.mul}[op](want, inputs[r])
                x = inputs[rank].clone()
                dist.all_reduce(x, op=getattr(dist.ReduceOp, op))
                if not torch.equal(x.view(torch.uint8), want.view(torch.uint8)):
                    bad = (x != want).nonzero().flatten()[:5].tolist()
                    f.append(f"{dtype} {op} n={n}: differs from the rank-order fold at {bad}")
                # and from every other rank's result
                bits = x.view(torch.uint8)
                allx = [torch.empty_like(bits) for _ in range(p)]
                dist.all_gather(allx, bits, group=mp.GLOO)
                if any(not torch.equal(a, bits) for a in allx):
                    f.append(f"{dtype} {op} n={n}: ranks ended with different bits")
    return f


@pytest.mark.parametrize("p", [2, 3, 4])
def test_small_allreduce_same_bits_on_every_rank(p):
    mp.run_checks(p, same_bits_world, transport="shm")


def order_world(rank, p):
    """Small calls behind queued async ones, large and small: each keeps its place
    (issue order) and every result is exact; the small ones then run on the worker
    thread, not inline."""
    f = []
    for round_ in range(20):
        big = [torch.full((1 << 18,), float(rank + k)) for k in range(2)]
        works = [dist.all_reduce(b, async_op=True) for b in big]
        smalls = [torch.full((k + 1,), float(rank * (k + 1) + round_)) for k in range(5)]
        works += [dist.all_reduce(s, async_op=True) for s in smalls[:4]]
        dist.all_reduce(smalls[4])  # blocking, behind six queued calls
        for w in works:
            w.wait()
        s0 = sum(range(p))
        for k, b in enumerate(big):
            want = float(s0 + p * k)
            if not torch.equal(b, torch.full_like(b, want)):
                f.append(f"round {round_} big {k}: {b[:3].tolist()} != {want}")
        for k, s in enumerate(smalls):
            want = float((k + 1) * s0 + p * round_)
            if not torch.equal(s, torch.full_like(s, want)):
                f.append(f"round {round_} small {k}: {s.tolist()} != {want}")
    return f


@pytest.mark.parametrize("p", [2, 3])
def test_small_calls_keep_their_place_behind_async_ones(p):
    mp.run_checks(p, order_world, transport="shm")


def mixed_world(rank, p, how):
    """Rank 0 makes a small all-reduce; rank 1 a large all-reduce (the scheduled
    ring: a header alone, then payload) or a broadcast of the same bytes (a small
    collective of another kind). Both raise naming both calls, within a second, and
    rank 0's tensor is untouched."""
    descs = ["allreduce(float32, 3 elements, SUM, small-allreduce",
             f"allreduce(float32, {LIMIT} elements, SUM, ring" if how == "large"
             else "broadcast(float32, 3 elements, root 0"]
    if rank == 0:
        x = torch.full((3,), 1.0)
        call = lambda: dist.all_reduce(x)  # noqa: E731
    elif how == "large":
        x = torch.full((LIMIT,), 2.0)  # 64 KiB: ring
        call = lambda: dist.all_reduce(x)  # noqa: E731
    else:
        x = torch.full((3,), 2.0)
        call = lambda: dist.broadcast(x, src=0)  # noqa: E731
    before = x.clone()
    dist.barrier(group=mp.GLOO)
    t0 = time.monotonic()
    try:
        call()
        msg = "no error"
    except dist.DistBackendError as e:
        msg = str(e)
    elapsed = time.monotonic() - t0
    f = []
    if "ranks disagree about collective #1" not in msg or any(
            f"rank {r} called {d}" not in msg for r, d in enumerate(descs)):
        f.append(f"message lacks both calls ({descs}): {msg}")
    if elapsed > 1.0:
        f.append(f"took {elapsed:.2f} s: {msg}")
    if rank == 0 and not torch.equal(x, before):
        f.append(f"rank 0 wrote its tensor: {x.tolist()}")
    return f


@pytest.mark.parametrize("how", ["large", "broadcast"])
def test_small_against_another_call_raises_on_both(how):
    mp.run_checks(2, mixed_world, how, transport="shm", pg_timeout_s=30)


def unchecked_count_world(rank, p):
    """Without the fingerprint a small message is its payload alone: ranks that pass
    2 and 3 elements see a message of the wrong size and both raise naming the
    peer (the size check of engine/fingerprint.h's openingError), nothing written."""
    g = dist.new_group(backend="ringcoll", pg_options=ringcoll.Options(fingerprint=False))
    x = torch.full((2 + rank,), 1.0)
    before = x.clone()
    dist.barrier(group=mp.GLOO)
    try:
        dist.all_reduce(x, group=g)
        msg = "no error"
    except dist.DistBackendError as e:
        msg = str(e)
    f = []
    peer = 1 - rank
    if f"rank {peer} sent a message of {4 * (2 + peer)} bytes where this rank expected " \
            f"{4 * (2 + rank)}" not in msg:
        f.append(f"message: {msg}")
    if not torch.equal(x, before):
        f.append(f"wrote {x.tolist()}")
    return f


def test_small_without_fingerprint_reports_a_size_mismatch():
    mp.run_checks(2, unchecked_count_world, transport="shm", pg_timeout_s=30)
