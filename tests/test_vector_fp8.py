"""Host-side checks of code the CUDA kernels share: the 16-byte vector/tail split
and the float8 functors (CPU reducer, same RC_HD functions), plus float8 through
the CPU backend."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from ringcoll import _C
from tests import mp

FP8 = [torch.float8_e4m3fn, torch.float8_e5m2]


@pytest.mark.parametrize("es", [1, 2, 4, 8])
def test_vector_split_aligned(es):
    per = 16 // es
    for count in range(0, 3 * per + 2):
        assert _C.vector_split(4096, 8192, 12288, count, es) == (0, count // per, count % per)


def test_vector_split_offsets_and_fallbacks():
    # Same offset (4 bytes, float32): 3 head elements to reach the boundary.
    assert _C.vector_split(4, 20, 36, 100, 4) == (3, 24, 1)
    # Fewer elements than the head: all head.
    assert _C.vector_split(4, 20, 36, 2, 4) == (2, 0, 0)
    # Different offsets: the unaligned fallback, all scalar.
    assert _C.vector_split(0, 4, 0, 100, 4) == (100, 0, 0)
    # Offset not a whole element (2 bytes into a float32): fallback.
    assert _C.vector_split(2, 2, 2, 100, 4) == (100, 0, 0)
    # half at offset 14: one head element, then packs of 8.
    assert _C.vector_split(14, 30, 46, 17, 2) == (1, 2, 0)


@pytest.mark.parametrize("offset", [0, 1, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int8, torch.float64])
def test_cpu_reduce_at_offsets(offset, dtype):
    # Inputs sliced at an offset reach the CPU reducer misaligned against the fresh
    # output: the fallback path; offset 0 takes the pack path.
    a = (torch.arange(1000 + offset) % 7).to(dtype)[offset:]
    b = (torch.arange(1000 + offset) % 5).to(dtype)[offset:]
    got = _C.cpu_reduce(a, b, "sum")
    assert torch.equal(got, (a.double() + b.double()).to(dtype))


def _fp8_ref(a, b, op, dtype):
    fa, fb = a.float(), b.float()
    r = {"sum": fa + fb, "min": torch.minimum(fa, fb), "max": torch.maximum(fa, fb)}[op]
    return r.to(dtype)


def _same_fp8(x, y):
    xn, yn = torch.isnan(x.float()), torch.isnan(y.float())
    return torch.equal(xn, yn) and torch.equal(x.view(torch.uint8)[~xn], y.view(torch.uint8)[~yn])


@pytest.mark.parametrize("dtype", FP8)
@pytest.mark.parametrize("op", ["sum", "min", "max"])
def test_fp8_functors_all_pairs_of_patterns(dtype, op):
    """Every pair of float8 bit patterns (65536 pairs): decode, the op in float and
    round-to-nearest-even encode agree with torch's own float8 conversions."""
    pats = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dtype)
    a = pats.repeat_interleave(256)
    b = pats.repeat(256)
    got = _C.cpu_reduce(a, b, op)
    want = _fp8_ref(a, b, op, dtype)
    if op in ("min", "max"):
        # min/max with a NaN operand, and which zero they pick, are unspecified
        # (gloo and NCCL differ too); all other pairs must match by value.
        ok = ~(torch.isnan(a.float()) | torch.isnan(b.float()))
        assert torch.equal(got.float()[ok], want.float()[ok]), f"{dtype} {op}"
    else:
        # Overflow is ringcoll's own contract (e4m3fn saturates to +-448 as torch
        # >= 2.13 converts; e5m2 goes to inf); older torch turned e4m3fn overflow
        # into NaN, so those elements are checked against the contract, the rest
        # bit for bit against torch.
        exact = a.float() + b.float()
        if dtype == torch.float8_e4m3fn:
            over = exact.abs() >= 464  # rounds beyond 448
            sat = torch.full_like(exact, 448.0).copysign(exact).to(dtype)
            assert torch.equal(got[over & ~torch.isnan(exact)].view(torch.uint8),
                               sat[over & ~torch.isnan(exact)].view(torch.uint8))
            keep = ~over
            got, want = got[keep], want[keep]
        assert _same_fp8(got, want), f"{dtype} {op}: {(got.view(torch.uint8) != want.view(torch.uint8)).sum()} differ"


@pytest.mark.parametrize("dtype", FP8)
def test_fp8_rounding_from_float(dtype):
    # Random floats over the whole range, through multiply-by-1 (encode path).
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(20000, generator=g) * torch.exp2(torch.randint(-20, 18, (20000,), generator=g).float()))
    x8 = x.to(dtype)
    got = _C.cpu_scale(x8, "multiply", 1.0)
    assert _same_fp8(got, x8)
    halves = _C.cpu_scale(x8, "multiply", 0.5)
    assert _same_fp8(halves, (x8.float() * 0.5).to(dtype))


def test_fp8_bad_ops():
    a = torch.zeros(4, dtype=torch.float8_e4m3fn)
    for op in ("product", "band"):
        with pytest.raises(RuntimeError):
            _C.cpu_reduce(a, a, op)


def fp8_allreduce(rank, p):
    f = []
    for dtype in FP8:
        for op in ("SUM", "MIN", "MAX"):
            inputs = [((torch.arange(33) + r) % 2).float() for r in range(p)]
            stack = torch.stack(inputs)
            want = {"SUM": stack.sum(0), "MIN": stack.min(0).values,
                    "MAX": stack.max(0).values}[op].to(dtype)
            x = inputs[rank].to(dtype)
            dist.all_reduce(x, op=getattr(dist.ReduceOp, op))
            if not torch.equal(x.view(torch.uint8), want.view(torch.uint8)):
                f.append(f"{dtype} {op}: {x.float().tolist()}")
        try:
            dist.all_reduce(torch.zeros(3, dtype=dtype), op=dist.ReduceOp.PRODUCT)
            f.append(f"{dtype} PRODUCT did not raise")
        except RuntimeError as e:
            if "ringcoll::allreduce" not in str(e) or "PRODUCT" not in str(e):
                f.append(f"{dtype} PRODUCT message: {e}")
    return f


def test_fp8_allreduce_cpu(transport):
    mp.run_checks(3, fp8_allreduce, transport=transport)
