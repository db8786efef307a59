"""The GPU suite. Runs on a machine with a CUDA build of ringcoll:

    python -m pytest tests/test_gpu.py            # see docs/GPU.md, "Running it on a GPU"

* single-GPU part (>= 1 GPU): ringcoll's CUDA kernels against torch's own ops on
  one device, every dtype x op, sizes around the 16-byte pack boundaries, aligned,
  equally offset (head/pack/tail) and differently offset (the unaligned fallback);
* multi-rank part (>= 1 GPU): every collective x dtype x op x size (0, 1, p-1, p+1,
  large, 64 MiB) against the exact reference and stock NCCL on the same ranks, AVG
  against NCCL within cases.avg_tolerance_ulps(p), async ops on a side stream, DDP,
  and failures (a late rank, a killed rank) in both error-handling modes. With one
  GPU the worlds are 2, 3 and 4 ranks sharing it (ringcoll/gpu.py: a per-rank
  NCCL_HOSTID puts NCCL, under both backends, on its socket transport over
  loopback); with N >= 2 GPUs, one rank per GPU (N ranks, at most 8).

Everything here is skipped, with the reason, where it cannot run (no GPU or a CPU
build of ringcoll).
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist

import ringcoll
from tests import cases, mp
from tests.cases import DTYPES, OPS, same

HAVE_CUDA_BUILD = bool(ringcoll.build_info().get("cuda"))
NGPU = torch.cuda.device_count() if torch.cuda.is_available() else 0

pytestmark = pytest.mark.skipif(
    not (HAVE_CUDA_BUILD and NGPU >= 1),
    reason=f"needs a CUDA build of ringcoll and a GPU (cuda build: {HAVE_CUDA_BUILD}, "
           f"GPUs visible: {NGPU})")
# World sizes of the multi-rank part: ranks share the one GPU, or one rank per GPU.
WORLDS = [2, 3, 4] if NGPU == 1 else [min(NGPU, 8)] if NGPU else []

KERNEL_OPS = ["sum", "product", "min", "max", "band", "bor", "bxor"]
# The dtypes ProcessGroupNCCL reduces (its ncclDataType map; bool is left out here too,
# since ringcoll's bool SUM is OR and NCCL's is a uint8 sum).
NCCL_DTYPES = {torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
               torch.uint8, torch.int32, torch.int64}
FLOATS = {torch.float32, torch.float64, torch.float16, torch.bfloat16}
# (dtype, op) where stock NCCL is not a reference: ProcessGroupNCCL hands NCCL the
# factor of a bfloat16 PREMUL_SUM as a 4-byte float (unpackPreMulSum<float,
# ncclBfloat16>), and NCCL reads a 2-byte bfloat16 from it, so its result is not the
# exact one (seen at p = 2, 3 and 4 on an H200, torch 2.11, NCCL 2.28.9). ringcoll
# is still checked against the exact reference there.
NCCL_WRONG = {(torch.bfloat16, "PREMUL_SUM")}


def _torch_ref(a, b, op, dtype):
    if dtype == torch.bool:
        return {"sum": a | b, "product": a & b, "min": a & b, "max": a | b, "band": a & b,
                "bor": a | b, "bxor": a ^ b}[op]
    if dtype in FLOATS:
        fa, fb = (a.float(), b.float()) if dtype in (torch.float16, torch.bfloat16) else (a, b)
        r = {"sum": fa + fb, "product": fa * fb, "min": torch.minimum(fa, fb),
             "max": torch.maximum(fa, fb)}[op]
        return r.to(dtype)
    return {"sum": a + b, "product": a * b, "min": torch.minimum(a, b),
            "max": torch.maximum(a, b), "band": a & b, "bor": a | b, "bxor": a ^ b}[op]


def _inputs(n, dtype, gen, dev):
    if dtype == torch.bool:
        return torch.rand(n, generator=gen) > 0.5, torch.rand(n, generator=gen) > 0.5
    if dtype in FLOATS:
        return ((torch.randn(n, generator=gen) * 100).to(dtype),
                (torch.randn(n, generator=gen) * 100).to(dtype))
    info = torch.iinfo(dtype)
    lo, hi = max(info.min, -1000), min(info.max, 1000)
    return (torch.randint(lo, hi, (n,), generator=gen).to(dtype),
            torch.randint(lo, hi, (n,), generator=gen).to(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", KERNEL_OPS)
def test_kernels_match_torch(dtype, op):
    if op in ("band", "bor", "bxor") and dtype in FLOATS:
        pytest.skip("bitwise ops are for integers and bool")
    gen = torch.Generator().manual_seed(1)
    dev = torch.device("cuda", 0)
    for n in (0, 1, 7, 15, 16, 17, 33, 1000, (1 << 20) + 3):
        for off_a, off_b, off_o in ((0, 0, 0), (1, 1, 1), (3, 3, 3), (0, 1, 2)):
            a_full, b_full = _inputs(n + 8, dtype, gen, dev)
            a = a_full.to(dev)[off_a:off_a + n]
            b = b_full.to(dev)[off_b:off_b + n]
            out = torch.empty(n + 8, dtype=dtype, device=dev)[off_o:off_o + n]
            ringcoll._C.cuda_reduce(a, b, op, out)
            want = _torch_ref(a, b, op, dtype)
            assert torch.equal(out, want), f"{dtype} {op} n={n} offsets={off_a, off_b, off_o}"
            # The same functors on the CPU give the same bits.
            cpu = ringcoll._C.cpu_reduce(a.cpu(), b.cpu(), op)
            assert torch.equal(cpu, out.cpu())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int32,
                                   torch.int8, torch.float64])
@pytest.mark.parametrize("op", ["sum", "product", "max"])
def test_kernels_fold_many_like_one_at_a_time(dtype, op):
    """The fused fold (one kernel for one-shot's p - 1 inputs) gives the bits of k
    reduce kernels in the same order: rounding after every op, as each launch does."""
    gen = torch.Generator().manual_seed(2)
    dev = torch.device("cuda", 0)
    for n in (1, 7, 33, 1000, (1 << 18) + 5):
        for k in (1, 2, 3, 8):
            for off in (0, 1, 3):
                dst0 = _inputs(n + 8, dtype, gen, dev)[0].to(dev)
                srcs = [_inputs(n + 8, dtype, gen, dev)[0].to(dev)[off:off + n] for _ in range(k)]
                want = dst0[off:off + n].clone()
                for s_ in srcs:
                    ringcoll._C.cuda_reduce(want, s_, op, want)
                got = dst0.clone()[off:off + n]
                ringcoll._C.cuda_reduce_many(got, srcs, op)
                # exact (products of several inputs overflow half types to inf alike)
                torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True,
                                           msg=f"{dtype} {op} n={n} k={k} off={off}")
    a = torch.zeros(128, dtype=torch.float32, device=dev)
    with pytest.raises(RuntimeError, match="cuda_reduce_many"):  # sources off dst's offset
        ringcoll._C.cuda_reduce_many(a[1:33], [a[64:96]], "sum")


def test_kernel_stop_words():
    """cuda_reduce with each stop word benchmarks/kernel_bw.py times: the same result
    (the words are never set here), and an unknown one refused, naming it."""
    a = torch.arange(1 << 20, dtype=torch.float32, device="cuda")
    want = a + a
    for word in ("", "host", "device"):
        out = torch.empty_like(a)
        ringcoll._C.cuda_reduce(a, a, "sum", out, stop_word=word)
        assert torch.equal(out, want), word
    with pytest.raises(RuntimeError, match="stop_word='latched'.*'host' or 'device'"):
        ringcoll._C.cuda_reduce(a, a, "sum", torch.empty_like(a), stop_word="latched")


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
@pytest.mark.parametrize("op", ["sum", "min", "max"])
def test_fp8_kernels_match_cpu_functors(dtype, op):
    pats = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dtype)
    a, b = pats.repeat_interleave(256), pats.repeat(256)
    out = torch.empty_like(a, device="cuda")
    ringcoll._C.cuda_reduce(a.cuda(), b.cuda(), op, out)
    got, cpu = out.cpu(), ringcoll._C.cpu_reduce(a, b, op)
    # NaN's sign is not specified: the GPU's float ops return a canonical NaN where
    # the CPU's propagate the input's sign. Every other element must match bit for bit.
    nan = torch.isnan(cpu.float())
    assert torch.equal(torch.isnan(got.float()), nan)
    assert torch.equal(got.view(torch.uint8)[~nan], cpu.view(torch.uint8)[~nan])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int32])
def test_scale_kernels(dtype):
    x = (torch.arange(1001) % 13 * 6).to(dtype)
    got = ringcoll._C.cuda_scale(x.cuda(), "divide", 3)
    assert torch.equal(got.cpu(), ringcoll._C.cpu_scale(x, "divide", 3))
    if dtype in FLOATS:
        got = ringcoll._C.cuda_scale(x.cuda(), "multiply", 0.5)
        assert torch.equal(got.cpu(), ringcoll._C.cpu_scale(x, "multiply", 0.5))


def world_of_one_cuda(rank, p):
    """The whole CUDA path (NCCL communicator, comm stream, kernels, Work, device
    future) in a world of one: no transfers, but every other piece runs."""
    torch.cuda.set_device(0)
    f = []
    x = torch.arange(10, dtype=torch.float32, device="cuda") * 3
    dist.all_reduce(x, op=dist.ReduceOp.AVG)
    if not torch.equal(x.cpu(), torch.arange(10, dtype=torch.float32) * 3):
        f.append(f"AVG {x.tolist()}")
    y = torch.ones(5, dtype=torch.float16, device="cuda")
    dist.all_reduce(y, op=dist._make_nccl_premul_sum(4.0))
    if not torch.equal(y.cpu(), torch.full((5,), 4.0, dtype=torch.float16)):
        f.append(f"PREMUL_SUM {y.tolist()}")
    out = torch.empty(4, device="cuda")
    dist.all_gather_into_tensor(out, torch.arange(4.0, device="cuda"))
    if not torch.equal(out.cpu(), torch.arange(4.0)):
        f.append(f"all_gather {out.tolist()}")
    rs = torch.empty(3, device="cuda", dtype=torch.int64)
    dist.reduce_scatter_tensor(rs, torch.arange(3, device="cuda"))
    if not torch.equal(rs.cpu(), torch.arange(3)):
        f.append(f"reduce_scatter {rs.tolist()}")
    # Async on a side stream: wait() orders the caller's stream, the future chains.
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        z = torch.full((1 << 20,), 2.0, device="cuda")
        w = dist.all_reduce(z, op=dist.ReduceOp.AVG, async_op=True)
        fut = w.get_future().then(lambda fu: fu.value()[0] * 2)
        w.wait()
        z2 = z + 1
    torch.cuda.synchronize()
    if not torch.equal(z2.cpu(), torch.full((1 << 20,), 3.0)):
        f.append("async AVG then add")
    if not torch.equal(fut.wait().cpu(), torch.full((1 << 20,), 4.0)):
        f.append("future then()")
    # CPU tensors in the same group keep using the CPU path.
    c = torch.ones(3)
    dist.all_reduce(c)
    if not torch.equal(c, torch.ones(3)):
        f.append(f"cpu {c.tolist()}")
    # A tensor on the wrong device is refused with both devices named.
    try:
        dist.all_gather_into_tensor(torch.empty(4), torch.ones(4, device="cuda"))
        f.append("mixed devices not refused")
    except (RuntimeError, ValueError) as e:
        if "ringcoll::all_gather_into_tensor" not in str(e) and "device" not in str(e).lower():
            f.append(f"mixed devices message: {e}")
    return f


def test_world_of_one_cuda_path():
    failures = mp.run_world(1, world_of_one_cuda, timeout=300)[0]
    assert not failures, "\n".join(failures)


# ---------------------------------------------------------------- multi-rank part

def _then_leave_together(rank, p, fn, *args):
    """fn, then every rank waits until all ranks' device work is done before any
    exits. A rank that exits while a peer still receives from it takes its NCCL
    proxy (and the data that proxy had yet to put on the socket) with it, and the
    peer's collective fails with "remote process exited" (seen on the 2026-11-23
    run: DDP at p = 3 and 4, in turn)."""
    import time

    out = fn(rank, p, *args)
    torch.cuda.synchronize()
    store = dist.distributed_c10d._get_default_store()
    store.add("gpu_world/done", 1)
    while store.add("gpu_world/done", 0) < p:  # bounded by run_world's timeout
        time.sleep(0.01)
    return out


def gpu_world(p, fn, *args, timeout=600, env=None, together=True, **kwargs):
    """mp.run_world on GPUs: with fewer GPUs than ranks, the ranks share them.
    together=False for the failure tests, whose ranks die or leave on purpose."""
    rank_env = None
    if p > NGPU:
        from ringcoll.gpu import share_gpu_env
        per_rank = [share_gpu_env(r) for r in range(p)]
        rank_env = {k: [e[k] for e in per_rank] for k in per_rank[0]}
    if together:
        fn, args = _then_leave_together, (fn, *args)
    return mp.run_world(p, fn, *args, timeout=timeout, env=env, rank_env=rank_env, **kwargs)


def _assert_no_failures(per_rank):
    """Each rank returned its list of failed checks: none may have failed."""
    failures = [f"rank {r}: {x}" for r, fs in enumerate(per_rank) for x in fs]
    assert not failures, f"{len(failures)} failures:\n" + "\n".join(failures[:40])


def _set_device(rank):
    from ringcoll.gpu import device_for
    torch.cuda.set_device(device_for(rank, torch.cuda.device_count()))


def gpu_matrix(rank, p):
    _set_device(rank)
    nccl = dist.new_group(backend="nccl")
    f = []
    checks = 0

    def check(ok, what):
        nonlocal checks
        checks += 1
        if not ok:
            f.append(what)

    for dtype in DTYPES:
        for op in OPS:
            if not cases.op_valid(op, dtype):
                continue
            for n in cases.counts(p, large=1001):
                inputs = [cases.make_input(r, n, dtype, op, p) for r in range(p)]
                want = cases.reference(inputs, op, dtype, p)
                x = inputs[rank].cuda()
                dist.all_reduce(x, op=cases.reduce_op(op))
                check(same(x.cpu(), want), f"all_reduce {dtype} {op} n={n}")
                if (dtype in NCCL_DTYPES and op not in ("BAND", "BOR", "BXOR")
                        and (dtype, op) not in NCCL_WRONG):
                    # NCCL has no bitwise ops, and ProcessGroupNCCL no int16 (it
                    # raises "Unsupported data type")
                    y = inputs[rank].cuda()
                    dist.all_reduce(y, op=cases.reduce_op(op), group=nccl)
                    check(same(y.cpu(), want), f"nccl disagrees with the reference: "
                                               f"{dtype} {op} n={n}")
                    check(same(y, x), f"ringcoll differs from nccl: {dtype} {op} n={n}")
                for root in range(p):
                    z = inputs[rank].cuda()
                    dist.reduce(z, dst=root, op=cases.reduce_op(op))
                    if rank == root:
                        check(same(z.cpu(), want), f"reduce {dtype} {op} n={n} root={root}")
                m = n
                rs_inputs = [cases.make_input(r, p * m, dtype, op, p) for r in range(p)]
                rs_want = cases.reference(rs_inputs, op, dtype, p)[rank * m:(rank + 1) * m]
                out = torch.empty(m, dtype=dtype, device="cuda")
                dist.reduce_scatter_tensor(out, rs_inputs[rank].cuda(), op=cases.reduce_op(op))
                check(same(out.cpu(), rs_want), f"reduce_scatter {dtype} {op} m={m}")
                # In place: the output is this rank's block of the input.
                buf = rs_inputs[rank].cuda()
                dist.reduce_scatter_tensor(buf[rank * m:(rank + 1) * m], buf,
                                           op=cases.reduce_op(op))
                check(same(buf[rank * m:(rank + 1) * m].cpu(), rs_want),
                      f"reduce_scatter in place {dtype} {op} m={m}")
        for m in cases.counts(p, large=1001):
            parts = [cases.make_input(r, m, dtype, "SUM", p, salt=r) for r in range(p)]
            out = torch.empty(p * m, dtype=dtype, device="cuda")
            dist.all_gather_into_tensor(out, parts[rank].cuda())
            check(same(out.cpu(), torch.cat(parts)), f"all_gather_into_tensor {dtype} m={m}")
            out = torch.zeros(p * m, dtype=dtype, device="cuda")
            out[rank * m:(rank + 1) * m] = parts[rank].cuda()
            dist.all_gather_into_tensor(out, out[rank * m:(rank + 1) * m])
            check(same(out.cpu(), torch.cat(parts)), f"all_gather in place {dtype} m={m}")
            lst = [torch.empty(m, dtype=dtype, device="cuda") for _ in range(p)]
            dist.all_gather(lst, parts[rank].cuda())
            check(all(same(a.cpu(), b) for a, b in zip(lst, parts)), f"all_gather list {dtype} m={m}")
            for root in range(p):
                x = parts[root].cuda() if rank == root else torch.zeros(m, dtype=dtype, device="cuda")
                dist.broadcast(x, src=root)
                check(same(x.cpu(), parts[root]), f"broadcast {dtype} m={m} root={root}")
    # Large: 64 MiB of float32 against NCCL, bit for bit (exact small-integer sums).
    n = 16 << 20
    x = cases.make_input(rank, n, torch.float32, "SUM", p).cuda()
    y = x.clone()
    dist.all_reduce(x)
    dist.all_reduce(y, group=nccl)
    check(torch.equal(x, y), "64 MiB all_reduce differs from NCCL")
    out, ref = (torch.empty(n // p * p, device="cuda") for _ in range(2))
    dist.all_gather_into_tensor(out, x[:n // p])
    dist.all_gather_into_tensor(ref, x[:n // p], group=nccl)
    check(torch.equal(out, ref), "16M-element all_gather differs from NCCL")
    rs, rs_ref = torch.empty(n // p, device="cuda"), torch.empty(n // p, device="cuda")
    dist.reduce_scatter_tensor(rs, x[:n // p * p])
    dist.reduce_scatter_tensor(rs_ref, x[:n // p * p], group=nccl)
    check(torch.equal(rs, rs_ref), "16M-element reduce_scatter differs from NCCL")
    torch.cuda.synchronize()
    return {"failures": f, "checks": checks}


@pytest.mark.parametrize("p", WORLDS)
def test_gpu_collectives_vs_nccl(p):
    per_rank = gpu_world(p, gpu_matrix, timeout=900)
    failures = [f"rank {r}: {x}" for r, res in enumerate(per_rank) for x in res["failures"]]
    checks = sum(res["checks"] for res in per_rank)
    print(f"p={p}: {checks} checks, {len(failures)} failures")
    assert not failures, f"{len(failures)} of {checks} checks failed:\n" + "\n".join(failures[:40])


def gpu_exchange(rank, p):
    """gather, scatter, all_to_all and all_to_all_single (even and uneven splits) on
    CUDA tensors: exact (sender, receiver, index) blocks, and the same bytes as
    NCCL's; and oneshot's all-reduce, whose scratch is device memory."""
    from datetime import timedelta

    from tests.test_algorithms import _block, _splits

    _set_device(rank)
    nccl = dist.new_group(backend="nccl")
    f = []
    for dtype in (torch.float32, torch.int64, torch.bfloat16):
        for n in (0, 1, p + 1, 1000):
            for root in range(p):
                out = [torch.zeros(n, dtype=dtype, device="cuda") for _ in range(p)]
                dist.gather(_block(rank, root, n, dtype).cuda(), out if rank == root else None,
                            dst=root)
                want = [_block(q, root, n, dtype) for q in range(p)]
                if rank == root and not all(same(a.cpu(), b) for a, b in zip(out, want)):
                    f.append(f"gather {dtype} n={n} root={root}")
                ins = [_block(root, q, n, dtype, salt=1).cuda() for q in range(p)]
                y = torch.zeros(n, dtype=dtype, device="cuda")
                dist.scatter(y, ins if rank == root else None, src=root)
                y_nccl = torch.zeros(n, dtype=dtype, device="cuda")
                dist.scatter(y_nccl, ins if rank == root else None, src=root, group=nccl)
                if not same(y.cpu(), _block(root, rank, n, dtype, salt=1)):
                    f.append(f"scatter {dtype} n={n} root={root}")
                if not torch.equal(y, y_nccl):
                    f.append(f"scatter differs from nccl {dtype} n={n} root={root}")
            send = [_splits(rank, d, p, n) for d in range(p)]
            recv = [_splits(s_, rank, p, n) for s_ in range(p)]
            x = torch.cat([_block(rank, d, send[d], dtype, salt=2) for d in range(p)]).cuda()
            y = torch.zeros(sum(recv), dtype=dtype, device="cuda")
            y_nccl = torch.zeros_like(y)
            dist.all_to_all_single(y, x, recv, send)
            dist.all_to_all_single(y_nccl, x, recv, send, group=nccl)
            if not same(y.cpu(), torch.cat([_block(s_, rank, recv[s_], dtype, salt=2)
                                            for s_ in range(p)])):
                f.append(f"all_to_all_single uneven {dtype} n={n}")
            if not torch.equal(y, y_nccl):
                f.append(f"all_to_all_single differs from nccl {dtype} n={n}")
            outs = [torch.zeros(n, dtype=dtype, device="cuda") for _ in range(p)]
            dist.all_to_all(outs, [_block(rank, d, n, dtype).cuda() for d in range(p)])
            if not all(same(o.cpu(), _block(s_, rank, n, dtype)) for s_, o in enumerate(outs)):
                f.append(f"all_to_all {dtype} n={n}")
    one = dist.new_group(backend="ringcoll", timeout=timedelta(seconds=60),
                         pg_options=ringcoll.Options(algo="oneshot"))
    for n in (1, p + 1, 4099):
        inputs = [cases.make_input(r, n, torch.float32, "SUM", p) for r in range(p)]
        x = inputs[rank].cuda()
        dist.all_reduce(x, group=one)
        if not same(x.cpu(), cases.reference(inputs, "SUM", torch.float32, p)):
            f.append(f"oneshot all_reduce n={n}")
    torch.cuda.synchronize()
    return f


@pytest.mark.parametrize("p", WORLDS)
def test_gpu_exchange_and_oneshot_vs_nccl(p):
    _assert_no_failures(gpu_world(p, gpu_exchange, timeout=600))


def gpu_p2p(rank, p):
    """send/recv and batch_isend_irecv of CUDA tensors (ringcoll's point-to-point
    stream path: an NCCL communicator of its own, ringcoll's batching), the ring and
    every-pair patterns of tests/test_stream_p2p.py, exact payloads, and the same
    bytes as NCCL's point-to-point moves (the CPU emulation runs these in CI)."""
    from tests.test_p2p import payload

    _set_device(rank)
    nccl = dist.new_group(backend="nccl")
    f = []
    right, left = (rank + 1) % p, (rank - 1) % p
    for dtype in (torch.float32, torch.int64, torch.bfloat16, torch.uint8):
        for n in (0, 1, 1000, 1 << 20):
            mine = payload(rank, right, 1, n, dtype).cuda()
            got = torch.full((n,), 1, dtype=dtype, device="cuda")
            got_nccl = torch.zeros_like(got)
            for g, out in ((None, got), (nccl, got_nccl)):
                if rank == 0:
                    dist.send(mine, right, group=g, tag=1)
                    dist.recv(out, left, group=g, tag=1)
                else:
                    dist.recv(out, left, group=g, tag=1)
                    dist.send(mine, right, group=g, tag=1)
            if not torch.equal(got.cpu(), payload(left, rank, 1, n, dtype)):
                f.append(f"ring pass {dtype} n={n}")
            if not torch.equal(got, got_nccl):
                f.append(f"ring pass differs from nccl {dtype} n={n}")
    outs = {q: torch.zeros(33, device="cuda") for q in range(p) if q != rank}
    ops = [dist.P2POp(dist.irecv, t, q, tag=4) for q, t in outs.items()]
    ops += [dist.P2POp(dist.isend, payload(rank, q, 4, 33).cuda(), q, tag=4)
            for q in range(p) if q != rank]
    reqs = dist.batch_isend_irecv(ops)
    if len(reqs) != 1:
        f.append(f"batch_isend_irecv returned {len(reqs)} works, expected 1")
    for r in reqs:
        r.wait()
    for q, t in outs.items():
        if not torch.equal(t.cpu(), payload(q, rank, 4, 33)):
            f.append(f"batch all pairs from rank {q}")
    torch.cuda.synchronize()
    return f


@pytest.mark.parametrize("p", WORLDS)
def test_gpu_p2p_vs_nccl(p):
    _assert_no_failures(gpu_world(p, gpu_p2p, timeout=600))


def gpu_avg(rank, p):
    """AVG on floats: ringcoll sums (exactly: integers in [0, 32), so every partial
    sum of up to 8 ranks is below 256, exact even in bfloat16) then divides once, so
    it must equal cases.rounded_average bit for bit. NCCL must agree with it within
    cases.avg_tolerance_ulps(p): bit for bit when p is a power of two (1/p is exact
    and so is every partial sum)."""
    _set_device(rank)
    nccl = dist.new_group(backend="nccl")
    f = []
    tol = cases.avg_tolerance_ulps(p)
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        for n in (1, p + 1, 4099):
            inputs = [torch.randint(0, 32, (n,), generator=torch.Generator().manual_seed(
                17 * r + n)).to(dtype) for r in range(p)]
            want = cases.rounded_average(inputs, p)
            x = inputs[rank].cuda()
            y = x.clone()
            dist.all_reduce(x, op=dist.ReduceOp.AVG)
            dist.all_reduce(y, op=dist.ReduceOp.AVG, group=nccl)
            if not torch.equal(x.cpu(), want):
                f.append(f"{dtype} n={n}: ringcoll is not the correctly rounded average")
            bad = cases.ulps_apart(x, y) > tol
            if bad.any():
                i = int(bad.nonzero()[0])
                f.append(f"{dtype} n={n}: {int(bad.sum())} elements > {tol} ulp from NCCL "
                         f"(p={p}), first [{i}] {x[i].item()} vs {y[i].item()}")
    return f


@pytest.mark.parametrize("p", WORLDS)
def test_gpu_avg_against_nccl(p):
    for r, f in enumerate(gpu_world(p, gpu_avg)):
        assert not f, f"rank {r}:\n" + "\n".join(f)


def gpu_op(rank, p):
    """ringcoll.ops.all_reduce_ on CUDA tensors, by each route: the eager entry, the
    dispatcher's (torch.ops.ringcoll.all_reduce_, as modes and compiled code reach it),
    and the eager entry on a side stream whose input was written on that stream just
    before. Exact, equal to NCCL's all-reduce, and the result ordered before what the
    caller's stream does next. The eager routes must really take the eager entry (a
    spy on it), and on the side stream the input's copy runs behind a sleep, so a
    collective not ordered after the caller's stream would read the empty tensor."""
    import ringcoll.ops

    _set_device(rank)
    nccl = dist.new_group(backend="nccl")
    name = dist.distributed_c10d._get_default_group().group_name
    side = torch.cuda.Stream()
    took = []
    real_eager = ringcoll.ops._eager

    def spy(t, g):
        r = real_eager(t, g)
        took.append(r)
        return r

    ringcoll.ops._eager = spy
    f = []
    for dtype in sorted(NCCL_DTYPES, key=str):
        for n in cases.counts(p, large=(1 << 20) + 3):
            inputs = [cases.make_input(r, n, dtype, "SUM", p) for r in range(p)]
            want = cases.reference(inputs, "SUM", dtype, p)
            ref = inputs[rank].cuda()
            dist.all_reduce(ref, group=nccl)
            for route in ("eager", "dispatcher", "side stream"):
                x = inputs[rank].cuda()
                took.clear()
                if route == "eager":
                    if ringcoll.ops.all_reduce_(x) is not x:
                        f.append("all_reduce_ does not return its argument")
                elif route == "dispatcher":
                    torch.ops.ringcoll.all_reduce_.default(x, name)
                else:
                    src, x = x, torch.empty_like(x)
                    side.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(side):
                        torch.cuda._sleep(20_000_000)  # about 10 ms: the copy runs late
                        x.copy_(src)
                        ringcoll.ops.all_reduce_(x)
                        x.add_(0)  # read on the side stream, after the op
                    torch.cuda.current_stream().wait_stream(side)
                if route != "dispatcher" and took != [True]:
                    f.append(f"{route} {dtype} n={n}: the eager entry answered {took}")
                cases.check_same(f, f"{route} {dtype} n={n}", x.cpu(), want, ref.cpu())
    ringcoll.ops._eager = real_eager
    return f


@pytest.mark.parametrize("p", WORLDS)
def test_gpu_op_matches_nccl(p):
    for r, f in enumerate(gpu_world(p, gpu_op)):
        assert not f, f"rank {r}:\n" + "\n".join(f[:40])


def gpu_stress(rank, p, ops):
    """`ops` async all-reduces issued on a side stream, waited for at the end."""
    _set_device(rank)
    xs, works = [], []
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        for k in range(ops):
            x = torch.full((1 + (k * 37) % 5000,), float(rank + k % 3), device="cuda")
            xs.append(x)
            works.append(dist.all_reduce(x, async_op=True))
        for w in works:
            w.wait()
    torch.cuda.synchronize()
    return [k for k, x in enumerate(xs)
            if not torch.equal(x, torch.full_like(x, float(sum(r + k % 3 for r in range(p)))))]


@pytest.mark.parametrize("p", WORLDS)
def test_gpu_async_ops_on_a_side_stream(p):
    for bad in gpu_world(p, gpu_stress, 300 if p > NGPU else 1000, timeout=900):
        assert not bad, f"wrong results for async ops {bad[:10]}"


def gpu_ddp(rank, p):
    from tests.test_ddp import train

    _set_device(rank)
    nccl = dist.new_group(backend="nccl")
    ring = train(rank, p, None, device="cuda")
    ref = train(rank, p, nccl, device="cuda")
    return ring, ref


@pytest.mark.parametrize("p", WORLDS)
def test_gpu_ddp_matches_nccl(p):
    for ring, ref in gpu_world(p, gpu_ddp, timeout=900):
        for a, b in zip(ring, ref):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- failures
# Two ranks sharing the GPU (or on two GPUs), a 4 s group timeout. After a first
# collective (the communicator exists), rank 1 is late by far more than the timeout,
# or is killed. Rank 0 must learn it from the collective that failed, in time, and
# no wrong result may reach its tensor: the reductions queued behind the stuck
# transfer are stopped, so x keeps its input.

PG_TIMEOUT_S = 4


def _fail_env(mode):
    return {"blocking": {"RINGCOLL_BLOCKING_WAIT": "1"},
            "raise": {"RINGCOLL_ASYNC_ERROR_HANDLING": "raise"},
            "teardown": {}}[mode]


def gpu_peer_failure(rank, p, mode, what, stderr_path):
    import os
    import signal
    import time

    _set_device(rank)
    x = torch.full((1 << 20,), float(rank + 1), device="cuda")
    dist.all_reduce(x)  # the communicator is up; x = 3
    torch.cuda.synchronize()
    # Rank 1 fails only once rank 0's first collective finished on its device: a peer
    # that dies while #1 is still running there fails #1, rightly, and the test is
    # about #2.
    store = dist.distributed_c10d._get_default_store()
    if rank == 0:
        store.set("first_done", "1")
    if rank == 1:
        store.wait(["first_done"])
        if what == "killed":
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(PG_TIMEOUT_S + 6)  # late: rank 0 gave up long ago
        return None
    if mode == "teardown":
        # The process ends in C++; its stderr goes to a file the test reads.
        fd = os.open(stderr_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(fd, 2)
    y = torch.full((1 << 20,), 5.0, device="cuda")
    t0 = time.monotonic()
    err = None
    try:
        w = dist.all_reduce(y, async_op=True)
        w.wait()
        torch.cuda.synchronize()
        if mode != "blocking":
            # async: the failure shows at the next call on the group
            deadline = time.monotonic() + PG_TIMEOUT_S + 10
            while time.monotonic() < deadline:
                dist.all_reduce(torch.ones(1, device="cuda"))
                torch.cuda.synchronize()
                time.sleep(0.05)
    except Exception as e:  # noqa: BLE001 - the error is what we test
        err = f"{type(e).__name__}: {e}"
    elapsed = time.monotonic() - t0
    torch.cuda.synchronize()
    return {"err": err, "elapsed": elapsed, "y_unchanged": bool(torch.all(y == 5.0))}


@pytest.mark.parametrize("what", ["late", "killed"])
@pytest.mark.parametrize("mode", ["blocking", "raise", "teardown"])
def test_gpu_peer_failure_surfaces_in_the_collective(mode, what, tmp_path):
    import time

    stderr_path = str(tmp_path / "rank0.stderr")
    t0 = time.monotonic()
    res = gpu_world(2, gpu_peer_failure, mode, what, stderr_path, env=_fail_env(mode),
                    pg_timeout_s=PG_TIMEOUT_S, may_exit=(0, 1) if mode == "teardown" else (1,),
                    timeout=120, together=False)
    if mode == "teardown":
        assert res[0] is None, f"rank 0 should have been ended, returned {res[0]}"
        text = open(stderr_path).read()
        print(f"[{mode}/{what}] rank 0 stderr:\n{text.strip()}")
        assert "ringcoll::allreduce #2 (rank 0 of 2)" in text, text
        assert "rank 1" in text and "RINGCOLL_ASYNC_ERROR_HANDLING=teardown" in text, text
        assert time.monotonic() - t0 < 100
        return
    r0 = res[0]
    print(f"[{mode}/{what}] rank 0 after {r0['elapsed']:.2f} s: {r0['err']}")
    assert r0["err"] is not None, "the failed collective raised nothing"
    assert "DistBackendError" in r0["err"], r0["err"]
    assert "ringcoll::allreduce #2 (rank 0 of 2)" in r0["err"], r0["err"]
    assert "rank 1" in r0["err"], r0["err"]
    if what == "late":
        assert "Timed out after 4000 ms" in r0["err"], r0["err"]
    # Within the group timeout (+ the watchdog's and the socket's reaction).
    assert r0["elapsed"] < PG_TIMEOUT_S + 2, r0
    assert r0["y_unchanged"], "a wrong result was written into the failed collective's tensor"


def gpu_init_late(rank, p):
    import time

    _set_device(rank)
    if rank == 1:
        time.sleep(PG_TIMEOUT_S + 6)
        return None
    t0 = time.monotonic()
    try:
        dist.all_reduce(torch.ones(4, device="cuda"))
        torch.cuda.synchronize()
        return {"err": None, "elapsed": time.monotonic() - t0}
    except Exception as e:  # noqa: BLE001
        return {"err": f"{type(e).__name__}: {e}", "elapsed": time.monotonic() - t0}


def test_gpu_init_times_out():
    r0 = gpu_world(2, gpu_init_late, pg_timeout_s=PG_TIMEOUT_S, may_exit=(1,), timeout=120,
                   together=False)[0]
    print(f"[init] rank 0 after {r0['elapsed']:.2f} s: {r0['err']}")
    assert r0["err"] and "Timed out after 4000 ms creating the NCCL communicator" in r0["err"], r0
    assert r0["elapsed"] < PG_TIMEOUT_S + 2, r0


def gpu_mismatch(rank, p, kind):
    import time

    _set_device(rank)
    dist.all_reduce(torch.ones(4, device="cuda"))  # the communicator is up
    torch.cuda.synchronize()
    n, dtype, op = 1000, torch.float32, dist.ReduceOp.SUM
    if rank == 1:
        if kind == "op":
            op = dist.ReduceOp.MAX
        elif kind == "dtype":
            dtype = torch.int32
        elif kind == "count":
            n = 1002
    x = torch.full((n,), 7, dtype=dtype, device="cuda")
    t0 = time.monotonic()
    try:
        dist.all_reduce(x, op=op)
        torch.cuda.synchronize()
        err = None
    except Exception as e:  # noqa: BLE001
        err = f"{type(e).__name__}: {e}"
    torch.cuda.synchronize()
    return {"err": err, "elapsed": time.monotonic() - t0, "unchanged": bool(torch.all(x == 7))}


@pytest.mark.parametrize("kind", ["op", "dtype", "count"])
def test_gpu_fingerprint_mismatch(kind):
    """The headers ride in a batch of their own (always the same size, so it
    completes even when the payloads' sizes differ) and are compared on the device:
    with blocking wait, every rank raises naming both calls, well before the group's
    timeout, and no reduction runs. A timeout or any other error fails this test."""
    res = gpu_world(2, gpu_mismatch, kind, together=False,
                    env={"RINGCOLL_BLOCKING_WAIT": "1", "RINGCOLL_GPU_FINGERPRINT": "1"},
                    pg_timeout_s=PG_TIMEOUT_S, timeout=120)
    for r, out in enumerate(res):
        print(f"[mismatch {kind}] rank {r} after {out['elapsed']:.2f} s: {out['err']}")
    for r, out in enumerate(res):
        assert out["err"] is not None, f"rank {r}: nothing raised"
        assert "DistBackendError" in out["err"], out
        assert "ranks disagree" in out["err"] and "Timed out" not in out["err"], out
        for r2 in (0, 1):
            assert f"rank {r2} called allreduce" in out["err"], out
        assert out["elapsed"] < 1.5, out


def gpu_abort(rank, p):
    import time

    _set_device(rank)
    dist.all_reduce(torch.ones(4, device="cuda"))
    torch.cuda.synchronize()
    if rank == 1:
        time.sleep(PG_TIMEOUT_S + 4)
        return None
    x = torch.ones(1 << 20, device="cuda")
    w = dist.all_reduce(x, async_op=True)
    time.sleep(0.5)
    t0 = time.monotonic()
    dist.distributed_c10d._abort_process_group()
    took = time.monotonic() - t0
    try:
        w.wait()
        err = None
    except Exception as e:  # noqa: BLE001
        err = f"{type(e).__name__}: {e}"
    torch.cuda.synchronize()
    return {"abort_s": took, "err": err, "unchanged": bool(torch.all(x == 1))}


def test_gpu_abort_releases_a_stuck_collective():
    r0 = gpu_world(2, gpu_abort, env={"RINGCOLL_ASYNC_ERROR_HANDLING": "raise"},
                   pg_timeout_s=PG_TIMEOUT_S, may_exit=(1,), timeout=120, together=False)[0]
    print(f"[abort] {r0}")
    assert r0["abort_s"] < 2.5, r0
    assert r0["err"] and "aborted" in r0["err"], r0
    assert r0["unchanged"], r0


def gpu_fingerprint_roots(rank, p):
    """Back-to-back reduce calls with every root and tiny counts, with the device
    fingerprint on: no call may report a mismatch."""
    _set_device(rank)
    for n in (0, 1, p + 1):
        for root in range(p):
            x = torch.ones(n, device="cuda")
            dist.reduce(x, dst=root)
            torch.cuda.synchronize()
    return True


# The first GPU run (2026-11-23) showed a false mismatch here: a rank that only sends
# in a collective (a reduce's non-root) was done once its sends were posted, before
# its received headers were checked, so the next collective checked the stale one.
# Fixed in Execution::done(), not yet re-run on a GPU.
def test_gpu_fingerprint_no_false_mismatch():
    gpu_world(3, gpu_fingerprint_roots, env={"RINGCOLL_GPU_FINGERPRINT": "1",
                                             "RINGCOLL_BLOCKING_WAIT": "1"},
              pg_timeout_s=PG_TIMEOUT_S, timeout=120)


def gpu_destroy_early(rank, p):
    """Rank 1 destroys the group right after its last collective is enqueued; rank 0
    is slow to finish the same collective. The orderly end (finalize) must let rank
    0 receive everything: its result is exact, and nothing raises."""
    import time

    _set_device(rank)
    n = 4 << 20
    x = torch.full((n,), float(rank + 1), device="cuda")
    dist.all_reduce(x)  # the communicator is up
    torch.cuda.synchronize()
    x.fill_(float(rank + 1))
    if rank == 0:
        time.sleep(0.3)  # rank 1 is already in destroy_process_group
    dist.all_reduce(x)
    t0 = time.monotonic()
    dist.destroy_process_group()
    took = time.monotonic() - t0
    torch.cuda.synchronize()
    return {"exact": bool(torch.all(x == float(sum(range(1, p + 1))))), "destroy_s": took}


def test_gpu_destroy_lets_a_slow_peer_finish():
    res = gpu_world(2, gpu_destroy_early, pg_timeout_s=PG_TIMEOUT_S, timeout=120,
                    together=False)
    print(f"[destroy early] {res}")
    for r, out in enumerate(res):
        assert out["exact"], f"rank {r}: wrong result after a peer's destroy: {out}"
        assert out["destroy_s"] < 2 * 2 + 1, out  # grace for the work, then for finalize


# --- What programs do (tests/test_programs.py), on the GPU path itself. ---

def gpu_polling(rank, p, rounds):
    """tests/test_programs.py's tight poll on CUDA tensors: is_completed() with the
    GIL held in a loop, the input a temporary the caller drops at once; exact."""
    _set_device(rank)
    failures = []
    n = 4096
    out = torch.zeros(n * p, device="cuda")
    for i in range(rounds):
        w = dist.all_gather_into_tensor(out, torch.full((n,), float(rank + i), device="cuda"),
                                        async_op=True)
        while not w.is_completed():
            pass
        w.wait()
        want = (torch.arange(p, dtype=torch.float32, device="cuda") + i).repeat_interleave(n)
        if not torch.equal(out, want):
            failures.append(f"round {i}: {(out != want).sum().item()} wrong elements")
            break
    return failures


@pytest.mark.parametrize("p", WORLDS[:1])
def test_gpu_polling_is_completed_in_a_tight_loop(p):
    _assert_no_failures(gpu_world(p, gpu_polling, 300, timeout=300))


def gpu_first_call_aborted(rank, p):
    """tests/test_programs.py's first call on a stream path that waits for a rank
    that never makes it: here the NCCL communicator's creation. An abort() from
    another thread ends it at once (the unique id's wait and NCCL's init poll it)."""
    import threading
    import time

    _set_device(rank)
    if rank == 1:
        time.sleep(6)
        return None
    outcome = {}

    def first_call():
        t0 = time.monotonic()
        try:
            dist.all_reduce(torch.ones(8, device="cuda"))
            torch.cuda.synchronize()
            outcome["err"] = None
        except Exception as e:  # noqa: BLE001
            outcome["err"] = f"{type(e).__name__}: {e}"
        outcome["elapsed"] = time.monotonic() - t0

    t = threading.Thread(target=first_call)
    t.start()
    time.sleep(1.0)
    t0 = time.monotonic()
    dist.group.WORLD.abort()
    outcome["abort_s"] = time.monotonic() - t0
    t.join(timeout=30)
    outcome["alive"] = t.is_alive()
    return outcome


def test_gpu_first_call_waiting_for_a_missing_rank_ends_on_abort():
    r0 = gpu_world(2, gpu_first_call_aborted, pg_timeout_s=60, may_exit=(1,), timeout=120,
                   together=False)[0]
    print(f"[first call aborted] {r0}")
    assert not r0["alive"] and r0["abort_s"] < 5 and r0["elapsed"] < 6, r0
    assert r0["err"] and "aborted" in r0["err"], r0


def gpu_capture(rank, p):
    """torch.cuda.graph captures ringcoll's all-reduce, reduce-scatter, all-gather and
    a send/recv ring beside NCCL's same calls; 100 replays with new inputs before each
    must equal NCCL's replayed results exactly; a barrier inside the capture raises
    (backend/capture.h)."""
    _set_device(rank)
    nccl = dist.new_group(backend="nccl")
    f = []
    n = 4099
    bufs = {g: {"ar": torch.zeros(n, device="cuda"),
                "rs_in": torch.zeros(n * p, device="cuda"), "rs": torch.zeros(n, device="cuda"),
                "ag_in": torch.zeros(n, device="cuda"), "ag": torch.zeros(n * p, device="cuda"),
                "send": torch.zeros(n, device="cuda"), "recv": torch.zeros(n, device="cuda")}
            for g in ("ringcoll", "nccl")}

    def calls(t, group):
        dist.all_reduce(t["ar"], group=group)
        dist.reduce_scatter_tensor(t["rs"], t["rs_in"], group=group)
        dist.all_gather_into_tensor(t["ag"], t["ag_in"], group=group)
        ops = [dist.P2POp(dist.isend, t["send"], (rank + 1) % p, group=group),
               dist.P2POp(dist.irecv, t["recv"], (rank - 1) % p, group=group)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()

    graphs = {}
    for name, group in (("ringcoll", None), ("nccl", nccl)):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            calls(bufs[name], group)  # warm-up outside the capture, as torch asks
        torch.cuda.current_stream().wait_stream(side)
        graphs[name] = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graphs[name]):
            calls(bufs[name], group)
    try:
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            dist.barrier()
        f.append("a barrier was captured")
    except Exception as e:  # noqa: BLE001
        if "barrier cannot be captured" not in str(e):
            f.append(f"barrier under capture: {e}")
    for k in range(100):
        for j, key in enumerate(("ar", "rs_in", "ag_in", "send")):
            v = ((torch.arange(bufs["nccl"][key].numel(), device="cuda") * 7 + rank * 5 + k * 3
                  + j) % 11).float()
            for name in graphs:
                bufs[name][key].copy_(v)
        for name in graphs:
            graphs[name].replay()
        torch.cuda.synchronize()
        for key in ("ar", "rs", "ag", "recv"):
            if not torch.equal(bufs["ringcoll"][key], bufs["nccl"][key]):
                f.append(f"replay {k}: {key} differs from NCCL's")
        if f:
            break
    return f


@pytest.mark.parametrize("p", WORLDS)
def test_gpu_capture_vs_nccl(p):
    _assert_no_failures(gpu_world(p, gpu_capture, timeout=600))


PY_ALGOS_GPU = ("pyring", "swing", "twolevel", "bruck")  # written in Python


def gpu_python_algorithms(rank, p):
    """Each algorithm written in Python, on CUDA tensors, in a group of its own
    (Options(gpu_algo=...)): what it provides against NCCL's result, exact, at counts
    0, 1, p - 1, p + 1 and 70001; where it declares it does not serve p, the group's
    refusal says so."""
    import ringcoll
    from ringcoll import _C

    _set_device(rank)
    nccl = dist.new_group(backend="nccl")
    f = []
    for algo in PY_ALGOS_GPU:
        provides = _C.provides(algo)
        group = dist.new_group(backend="ringcoll", pg_options=ringcoll.Options(gpu_algo=algo))
        for n in (0, 1, p - 1, p + 1, 70001):
            if "allreduce" in provides and not _C.refusal(algo, "allreduce", p, n):
                for dtype, op in ((torch.float32, dist.ReduceOp.SUM),
                                  (torch.int32, dist.ReduceOp.MAX)):
                    v = ((torch.arange(n) * 7 + rank * 5) % 11).to(dtype).cuda()
                    x, y = v.clone(), v.clone()
                    dist.all_reduce(x, op=op, group=group)
                    dist.all_reduce(y, op=op, group=nccl)
                    if not torch.equal(x, y):
                        f.append(f"{algo} all_reduce {dtype} n={n} differs from NCCL")
            if "allgather" in provides and not _C.refusal(algo, "allgather", p, n * p):
                v = ((torch.arange(n) * 3 + rank) % 13).float().cuda()
                out = torch.empty(n * p, device="cuda")
                ref = torch.empty(n * p, device="cuda")
                dist.all_gather_into_tensor(out, v, group=group)
                dist.all_gather_into_tensor(ref, v, group=nccl)
                if not torch.equal(out, ref):
                    f.append(f"{algo} all_gather n={n} differs from NCCL")
        dist.destroy_process_group(group)
    torch.cuda.synchronize()
    return f


@pytest.mark.parametrize("p", WORLDS)
def test_gpu_python_algorithms_vs_nccl(p):
    pyring = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "examples", "pyring.py")
    _assert_no_failures(gpu_world(p, gpu_python_algorithms, timeout=600,
                                  env={"RINGCOLL_ALGO_MODULES": pyring}))
