"""The GPU suite. Runs on a machine with a CUDA build of ringcoll:

    python -m pytest tests/test_gpu.py            # see README "GPU tests"

* single-GPU part (>= 1 GPU): ringcoll's CUDA kernels against torch's own ops on
  one device, every dtype x op, sizes around the 16-byte pack boundaries, aligned,
  equally offset (head/pack/tail) and differently offset (the unaligned fallback);
* multi-rank part (>= 1 GPU): every collective x dtype x op x size (0, 1, p-1, p+1,
  large, 64 MiB) against the exact reference and stock NCCL on the same ranks, AVG
  against NCCL within one unit in the last place, async ops on a side stream, DDP,
  and failures (a late rank, a killed rank) in both error-handling modes. With one
  GPU the worlds are 2, 3 and 4 ranks sharing it (ringcoll/gpu.py: a per-rank
  NCCL_HOSTID puts NCCL, under both backends, on its socket transport over
  loopback); with N >= 2 GPUs, one rank per GPU (N ranks, at most 8).

Everything here is skipped, with the reason, where it cannot run (no GPU or a CPU
build of ringcoll).
"""

from __future__ import annotations

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
FLOATS = {torch.float32, torch.float64, torch.float16, torch.bfloat16}


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

def gpu_world(p, fn, *args, timeout=600, env=None, **kwargs):
    """mp.run_world on GPUs: with fewer GPUs than ranks, the ranks share them."""
    rank_env = None
    if p > NGPU:
        from ringcoll.gpu import share_gpu_env
        per_rank = [share_gpu_env(r) for r in range(p)]
        rank_env = {k: [e[k] for e in per_rank] for k in per_rank[0]}
    return mp.run_world(p, fn, *args, timeout=timeout, env=env, rank_env=rank_env, **kwargs)


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
                if dtype != torch.bool:  # NCCL has no bool
                    y = inputs[rank].cuda()
                    dist.all_reduce(y, op=cases.reduce_op(op), group=nccl)
                    check(same(y.cpu(), want), f"nccl disagrees with the reference: "
                                               f"{dtype} {op} n={n}")
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


def gpu_avg(rank, p):
    """AVG on floats against NCCL. NCCL pre-multiplies each input by 1/p and sums;
    ringcoll sums then divides once. The sums here are exact (small integers), so
    with p a power of two both are exact and must agree bit for bit; otherwise each
    element may differ by one unit in the last place (NCCL's roundings of x/p)."""
    _set_device(rank)
    nccl = dist.new_group(backend="nccl")
    f = []
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        for n in (1, p + 1, 4099):
            gen = torch.Generator().manual_seed(17 * rank + n)
            x = torch.randint(-50, 50, (n,), generator=gen).to(dtype).cuda()
            y = x.clone()
            dist.all_reduce(x, op=dist.ReduceOp.AVG)
            dist.all_reduce(y, op=dist.ReduceOp.AVG, group=nccl)
            if p & (p - 1) == 0:
                if not torch.equal(x, y):
                    f.append(f"{dtype} n={n}: differs from NCCL with p={p}")
                continue
            ulp = (torch.nextafter(y, torch.full_like(y, float("inf"))) - y).abs()
            bad = (x - y).abs() > ulp
            if bad.any():
                i = int(bad.nonzero()[0])
                f.append(f"{dtype} n={n}: {int(bad.sum())} elements > 1 ulp from NCCL, "
                         f"first [{i}] {x[i].item()} vs {y[i].item()}")
    return f


@pytest.mark.parametrize("p", WORLDS)
def test_gpu_avg_within_one_ulp_of_nccl(p):
    for r, f in enumerate(gpu_world(p, gpu_avg)):
        assert not f, f"rank {r}:\n" + "\n".join(f)


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
