"""The per-element functors (csrc/reduce/functors.h) through the CPU reducer,
against torch's own arithmetic, for every dtype x op pair; the same functions run
in the CUDA kernels, so this covers the GPU arithmetic too."""

from __future__ import annotations

import pytest
import torch

from ringcoll import _C

INTS = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64]
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
OPS = ["sum", "product", "min", "max", "band", "bor", "bxor"]


def ref(a, b, op, dtype):
    if dtype == torch.bool:
        return {"sum": a | b, "product": a & b, "min": a & b, "max": a | b,
                "band": a & b, "bor": a | b, "bxor": a ^ b}[op]
    if dtype in (torch.float16, torch.bfloat16):
        a, b = a.float(), b.float()  # one float op, one rounding
    r = {"sum": lambda: a + b, "product": lambda: a * b, "min": lambda: torch.minimum(a, b),
         "max": lambda: torch.maximum(a, b), "band": lambda: a & b, "bor": lambda: a | b,
         "bxor": lambda: a ^ b}[op]()
    return r.to(dtype)


def inputs(dtype, n, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(n, generator=g) > 0.5, torch.rand(n, generator=g) > 0.5
    if dtype in INTS:
        info = torch.iinfo(dtype)
        return (torch.randint(info.min, info.max, (n,), generator=g, dtype=torch.int64).to(dtype),
                torch.randint(info.min, info.max, (n,), generator=g, dtype=torch.int64).to(dtype))
    # Wide magnitudes: subnormals, values near overflow, exact ties.
    mag = torch.exp2(torch.randint(-26, 17, (n,), generator=g).float())
    a = (torch.randn(n, generator=g) * mag).to(dtype)
    b = (torch.randn(n, generator=g) * mag).to(dtype)
    return a, b


def bits(t):
    return t.view(torch.int16) if t.element_size() == 2 else t


@pytest.mark.parametrize("dtype", FLOATS + INTS + [torch.bool])
@pytest.mark.parametrize("op", OPS)
def test_functor_matches_torch(dtype, op):
    if op in ("band", "bor", "bxor") and dtype in FLOATS:
        with pytest.raises(RuntimeError):
            _C.cpu_reduce(torch.ones(2, dtype=dtype), torch.ones(2, dtype=dtype), op)
        return
    for n in (0, 1, 7, 1000):
        a, b = inputs(dtype, n, seed=n)
        got = _C.cpu_reduce(a, b, op)
        want = ref(a, b, op, dtype)
        if op in ("min", "max"):
            # Which of -0.0 and +0.0 min/max return is unspecified; values must match.
            assert torch.equal(got, want), f"{dtype} {op} n={n}"
        else:
            assert torch.equal(bits(got), bits(want)), f"{dtype} {op} n={n}"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_rounding_edges(dtype):
    info = torch.finfo(dtype)
    a = torch.tensor([info.max, info.max, info.tiny, info.tiny / 4, 1.0, -0.0, 0.0,
                      float("inf"), 1.0, 3.0], dtype=dtype)
    # half ulp at 1.0 exercises round-half-to-even; max + max overflows to inf;
    # subnormal + subnormal; -0 + 0 == +0.
    b = torch.tensor([info.max, -info.max, info.tiny / 2, info.tiny / 4, info.eps / 2, 0.0, -0.0,
                      1.0, info.eps * 1.5, info.eps], dtype=dtype)
    got = _C.cpu_reduce(a, b, "sum")
    assert torch.equal(bits(got), bits((a.float() + b.float()).to(dtype)))


@pytest.mark.parametrize("dtype", INTS)
def test_integer_wraparound(dtype):
    info = torch.iinfo(dtype)
    a = torch.tensor([info.max, info.min, info.max], dtype=dtype)
    b = torch.tensor([1, -1 if info.min < 0 else 1, info.max], dtype=dtype)
    assert torch.equal(_C.cpu_reduce(a, b, "sum"), a + b)
    assert torch.equal(_C.cpu_reduce(a, b, "product"), a * b)


@pytest.mark.parametrize("dtype", FLOATS + INTS)
def test_scale_passes(dtype):
    x = (torch.arange(-50, 50) * 3).to(dtype) if dtype != torch.uint8 else (torch.arange(100) * 2).to(dtype)
    got = _C.cpu_scale(x, "divide", 3)
    if dtype in FLOATS:
        want = (x.double() / 3).to(dtype) if dtype in (torch.float32, torch.float64) \
            else (x.float() / 3).to(dtype)
        assert torch.equal(bits(got), bits(want))
        got = _C.cpu_scale(x, "multiply", 0.5)
        want = (x.float() * 0.5).to(dtype) if dtype in (torch.float16, torch.bfloat16) else x * 0.5
        assert torch.equal(bits(got), bits(want))
    else:
        assert torch.equal(got, torch.div(x, 3, rounding_mode="trunc"))
