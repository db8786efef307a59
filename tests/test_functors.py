"""The per-element functors (csrc/reduce/functors.h) through the CPU reducer,
against torch's own arithmetic, for every dtype x op pair; the same functions run
in the CUDA kernels, so this covers the GPU arithmetic too.

References: sum -> torch.add (bool: logical_or), product -> torch.mul (bool:
logical_and), min/max -> torch.minimum/maximum (bool: logical_and/or), band/bor/bxor
-> torch.bitwise_and/or/xor. Half and bfloat16 are computed in float32 and rounded
once with .to(dtype) (round to nearest even), and compared bit for bit. Integers
wrap, as torch's do. NaN propagation is not part of the contract: positions where
the reference is NaN only need a NaN result.
"""

from __future__ import annotations

import math

import pytest
import torch

from ringcoll import _C

INTS = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64]
HALVES = [torch.float16, torch.bfloat16]
FLOATS = [torch.float32, torch.float64] + HALVES
ALL = FLOATS + INTS + [torch.bool]
OPS = ["sum", "product", "min", "max", "band", "bor", "bxor"]
BITWISE = {"band", "bor", "bxor"}
LENGTHS = [0, 1, 7, 1000]

SUPPORTED = [(d, op) for d in ALL for op in OPS if not (op in BITWISE and d in FLOATS)]
UNSUPPORTED = [(d, op) for d in FLOATS for op in sorted(BITWISE)]


def name(x):
    return str(x).replace("torch.", "")


# --------------------------------------------------------------------------------
# references and comparison


def ref(a, b, op, dtype):
    if dtype == torch.bool:
        return {"sum": torch.logical_or, "product": torch.logical_and,
                "min": torch.logical_and, "max": torch.logical_or,
                "band": torch.bitwise_and, "bor": torch.bitwise_or,
                "bxor": torch.bitwise_xor}[op](a, b)
    if op in ("min", "max"):  # exact in every type: no widening needed
        return (torch.minimum if op == "min" else torch.maximum)(a, b)
    if dtype in HALVES:
        a, b = a.float(), b.float()  # one float op, one rounding (RNE) back
    fn = {"sum": torch.add, "product": torch.mul, "band": torch.bitwise_and,
          "bor": torch.bitwise_or, "bxor": torch.bitwise_xor}[op]
    return fn(a, b).to(dtype)


def raw(t):
    """The storage bits, so that -0.0 vs 0.0 and the rounding direction count."""
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def assert_same(got, want, what, signed_zero=True):
    assert got.dtype == want.dtype and got.shape == want.shape, what
    if got.numel() == 0:
        return
    if got.is_floating_point():
        nan = torch.isnan(want)
        assert torch.equal(torch.isnan(got), nan), f"{what}: NaN positions differ"
        g, w = got[~nan], want[~nan]
        if signed_zero:
            bad = raw(g) != raw(w)
        else:
            bad = g != w
    else:
        bad = raw(got) != raw(want)  # bool: also the byte must be 0/1
    if bad.any():
        i = bad.nonzero()[0].item()
        g, w = (got[~nan], want[~nan]) if got.is_floating_point() else (got, want)
        pytest.fail(f"{what}: {int(bad.sum())} of {got.numel()} elements differ, "
                    f"first: got {g[i].item()!r} want {w[i].item()!r}")


def check(a, b, op, what):
    got = _C.cpu_reduce(a, b, op)
    # min/max may return either zero for (-0.0, +0.0): only the value must match.
    assert_same(got, ref(a, b, op, a.dtype), what, signed_zero=op not in ("min", "max"))


# --------------------------------------------------------------------------------
# inputs


def specials(dtype):
    """Edge values of the type: zeros of both signs, infinities, extremes,
    subnormals, values next to 1 and next to the overflow threshold."""
    if dtype == torch.bool:
        return [False, True]
    if dtype in INTS:
        info = torch.iinfo(dtype)
        vals = [0, 1, 2, 3, 7, 16, info.max, info.max - 1, info.max // 2 + 1]
        if info.min < 0:
            vals += [-1, -2, -3, -16, info.min, info.min + 1, info.min // 2]
        return vals
    info = torch.finfo(dtype)
    sub = info.tiny * info.eps  # smallest subnormal
    base = [0.0, 1.0, 1.5, 3.0, 1.0 + info.eps, info.eps, info.eps / 2, info.eps / 4,
            info.max, info.max / 2, info.max * 0.75, info.tiny, info.tiny / 2,
            info.tiny / 4, sub, 3 * sub, info.tiny - sub, math.inf, 0.5, 0.75]
    if dtype == torch.float16:
        base += [60000.0, 65504.0, 65488.0, 32768.0, 2048.0, 2050.0,
                 1e-5, 6e-8, 3e-8]
    if dtype == torch.bfloat16:
        base += [256.0, 258.0, 3.0e38, 1e-38, 1e-40]
    return base + [-v for v in base]


def finite_or_inf(bits_i16, dtype):
    """Random 16-bit patterns as `dtype`, each NaN replaced by an infinity."""
    f = bits_i16.view(dtype).float()
    return torch.where(torch.isnan(f), torch.copysign(torch.full_like(f, math.inf), f), f).to(dtype)


def random_inputs(dtype, n, g):
    """Two length-n tensors of `dtype`, mixing every input class the brief names."""
    if n == 0:
        return torch.empty(0, dtype=dtype), torch.empty(0, dtype=dtype)
    if dtype == torch.bool:
        return (torch.rand(n, generator=g) > 0.5), (torch.rand(n, generator=g) > 0.5)
    sp = torch.tensor(specials(dtype), dtype=dtype)

    def one():
        if dtype in INTS:
            info = torch.iinfo(dtype)
            small = torch.randint(-9 if info.min < 0 else 0, 10, (n,), generator=g)
            wide = torch.randint(info.min, info.max, (n,), generator=g, dtype=torch.int64)
            pick = torch.randint(0, 3, (n,), generator=g)
            x = torch.where(pick == 0, small, wide).to(dtype)
        elif dtype in HALVES:
            bits = torch.randint(-32768, 32768, (n,), generator=g, dtype=torch.int32).to(torch.int16)
            x = finite_or_inf(bits, dtype)
            small = torch.randint(-9, 10, (n,), generator=g).to(dtype)
            pick = torch.randint(0, 3, (n,), generator=g)
            x = torch.where(pick == 0, small, x)
        else:
            mag = torch.exp2(torch.randint(-160, 160, (n,), generator=g).double())
            x = (torch.randn(n, generator=g, dtype=torch.float64) * mag).to(dtype)
            small = torch.randint(-9, 10, (n,), generator=g).to(dtype)
            pick = torch.randint(0, 3, (n,), generator=g)
            x = torch.where(pick == 0, small, x)
        # Sprinkle the edge values in.
        idx = torch.randint(0, len(sp), (n,), generator=g)
        use = torch.rand(n, generator=g) < 0.2
        return torch.where(use, sp[idx], x)

    return one(), one()


# --------------------------------------------------------------------------------
# every dtype x op pair


@pytest.mark.parametrize("dtype,op", SUPPORTED, ids=[f"{name(d)}-{o}" for d, o in SUPPORTED])
def test_functor_matches_torch(dtype, op):
    g = torch.Generator().manual_seed(1234 + ALL.index(dtype) * 17 + OPS.index(op))
    for n in LENGTHS:
        a, b = random_inputs(dtype, n, g)
        check(a, b, op, f"{name(dtype)} {op} n={n}")


@pytest.mark.parametrize("dtype,op", SUPPORTED, ids=[f"{name(d)}-{o}" for d, o in SUPPORTED])
def test_functor_all_pairs_of_edge_values(dtype, op):
    sp = specials(dtype)
    a = torch.tensor([x for x in sp for _ in sp], dtype=dtype)
    b = torch.tensor([y for _ in sp for y in sp], dtype=dtype)
    check(a, b, op, f"{name(dtype)} {op} edges")


@pytest.mark.parametrize("dtype", HALVES, ids=name)
@pytest.mark.parametrize("op", ["sum", "product", "min", "max"])
def test_functor_every_16bit_value(dtype, op):
    # Every non-NaN 16-bit pattern against a shuffled partner and against a few
    # fixed values: all subnormals, both zeros, all exponents, both infinities.
    bits = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16)
    a = bits.view(dtype)
    a = a[~torch.isnan(a)]
    g = torch.Generator().manual_seed(7)
    check(a, a[torch.randperm(a.numel(), generator=g)], op, f"{name(dtype)} {op} shuffled")
    for v in (0.5, -1.0, 3.0, 0.0, -0.0):
        check(a, torch.full_like(a, v), op, f"{name(dtype)} {op} with {v}")


# --------------------------------------------------------------------------------
# the rounding and overflow edges, spelled out


def test_half_rounding_edges():
    h = torch.float16
    cases = [  # (a, b, op, expected)
        (1.0, 2.0 ** -11, "sum", 1.0),                               # tie -> even (down)
        (1.0 + 2.0 ** -10, 2.0 ** -11, "sum", 1.0 + 2.0 ** -9),      # tie -> even (up)
        (2048.0, 1.0, "sum", 2048.0),                                # 2049: tie -> 2048
        (2050.0, 1.0, "sum", 2052.0),                                # 2051: tie -> 2052
        (65504.0, 16.0, "sum", math.inf),                            # 65520: tie -> inf
        (65504.0, 15.0, "sum", 65504.0),
        (60000.0, 6000.0, "sum", math.inf),
        (-65504.0, -16.0, "sum", -math.inf),
        (2.0 ** -24, 0.5, "product", 0.0),                           # subnormal tie -> 0
        (3 * 2.0 ** -24, 0.5, "product", 2.0 ** -23),                # 1.5 quanta -> 2
        (5 * 2.0 ** -24, 0.5, "product", 2.0 ** -23),                # 2.5 quanta -> 2
        (2.0 ** -14 - 2.0 ** -24, 2.0 ** -24, "sum", 2.0 ** -14),    # subnormal -> normal
        (2.0 ** -24, 2.0 ** -24, "sum", 2.0 ** -23),
        (-0.0, -0.0, "sum", -0.0),
        (-0.0, 0.0, "sum", 0.0),
        (1.0, -1.0, "sum", 0.0),
        (-0.0, 5.0, "product", -0.0),
        (math.inf, 1.0, "sum", math.inf),
        (math.inf, -2.0, "product", -math.inf),
        (256.0, 256.0, "product", math.inf),
    ]
    for a, b, op, want in cases:
        ta, tb = torch.tensor([a], dtype=h), torch.tensor([b], dtype=h)
        got = _C.cpu_reduce(ta, tb, op)
        assert_same(got, torch.tensor([want], dtype=h), f"half {a} {op} {b}")
        assert_same(got, ref(ta, tb, op, h), f"half {a} {op} {b} vs torch")


def test_bfloat16_rounding_edges():
    bf = torch.bfloat16
    big = torch.finfo(bf).max
    cases = [
        (1.0, 2.0 ** -8, "sum", 1.0),                                # tie -> even (down)
        (1.0 + 2.0 ** -7, 2.0 ** -8, "sum", 1.0 + 2.0 ** -6),        # tie -> even (up)
        (256.0, 1.0, "sum", 256.0),
        (258.0, 1.0, "sum", 260.0),
        (big, big, "sum", math.inf),
        (-big, -big, "sum", -math.inf),
        (2.0 ** -133, 0.5, "product", 0.0),                          # subnormal tie -> 0
        (3 * 2.0 ** -133, 0.5, "product", 2.0 ** -132),
        (-0.0, -0.0, "sum", -0.0),
        (-0.0, 0.0, "sum", 0.0),
        (-0.0, 3.0, "product", -0.0),
    ]
    for a, b, op, want in cases:
        ta, tb = torch.tensor([a], dtype=bf), torch.tensor([b], dtype=bf)
        got = _C.cpu_reduce(ta, tb, op)
        assert_same(got, torch.tensor([want], dtype=bf), f"bf16 {a} {op} {b}")
        assert_same(got, ref(ta, tb, op, bf), f"bf16 {a} {op} {b} vs torch")


@pytest.mark.parametrize("dtype", INTS, ids=name)
def test_integer_wraparound(dtype):
    info = torch.iinfo(dtype)
    a = torch.tensor([info.max, info.min, info.max, info.max // 2 + 1, 16], dtype=dtype)
    b = torch.tensor([1, -1 if info.min < 0 else 255 if dtype == torch.uint8 else 1,
                      info.max, 2, 16], dtype=dtype)
    assert_same(_C.cpu_reduce(a, b, "sum"), torch.add(a, b), f"{name(dtype)} sum")
    assert_same(_C.cpu_reduce(a, b, "product"), torch.mul(a, b), f"{name(dtype)} product")
    if dtype == torch.int8:
        assert _C.cpu_reduce(a, b, "sum")[0].item() == -128
        assert _C.cpu_reduce(torch.tensor([-128], dtype=dtype), torch.tensor([-1], dtype=dtype),
                             "product").item() == -128
    if dtype == torch.uint8:
        assert _C.cpu_reduce(a, b, "sum")[0].item() == 0
        assert _C.cpu_reduce(a, b, "product")[4].item() == 0  # 16 * 16 = 256


# --------------------------------------------------------------------------------
# refusals


@pytest.mark.parametrize("dtype,op", UNSUPPORTED, ids=[f"{name(d)}-{o}" for d, o in UNSUPPORTED])
def test_bitwise_on_floating_is_refused(dtype, op):
    x = torch.ones(3, dtype=dtype)
    with pytest.raises(RuntimeError, match="not supported"):
        _C.cpu_reduce(x, x, op)


def test_bad_arguments_are_refused():
    x = torch.ones(3)
    with pytest.raises(RuntimeError, match="unknown op"):
        _C.cpu_reduce(x, x, "avg")
    with pytest.raises(RuntimeError):
        _C.cpu_reduce(x, x.double(), "sum")
    with pytest.raises(RuntimeError):
        _C.cpu_reduce(x, torch.ones(4), "sum")
    with pytest.raises(RuntimeError, match="unknown scale"):
        _C.cpu_scale(x, "add", 2)


def test_non_contiguous_inputs():
    a = torch.arange(20, dtype=torch.float32)[::2]
    b = torch.arange(40, dtype=torch.float32).view(10, 4)[:, 1]
    assert_same(_C.cpu_reduce(a, b, "sum"), a + b, "strided")


# --------------------------------------------------------------------------------
# the scaling passes behind AVG and PREMUL_SUM


def scale_inputs(dtype, g, n=1000):
    if dtype in INTS:
        info = torch.iinfo(dtype)
        sp = torch.tensor(specials(dtype), dtype=torch.int64)
        wide = torch.randint(info.min, info.max, (n,), generator=g, dtype=torch.int64)
        small = torch.randint(-20 if info.min < 0 else 0, 21, (n,), generator=g)
        return torch.cat([sp, wide, small]).to(dtype)
    sp = torch.tensor(specials(dtype), dtype=dtype)
    if dtype in HALVES:
        bits = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16)
        x = bits.view(dtype)
        return torch.cat([sp, x[~torch.isnan(x)]])
    mag = torch.exp2(torch.randint(-160, 160, (n,), generator=g).double())
    x = (torch.randn(n, generator=g, dtype=torch.float64) * mag).to(dtype)
    return torch.cat([sp, x, torch.arange(-50, 50, dtype=dtype)])


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=name)
@pytest.mark.parametrize("divisor", [1, 2, 3, 7, 16])
def test_scale_divide(dtype, divisor):
    g = torch.Generator().manual_seed(divisor)
    x = scale_inputs(dtype, g)
    got = _C.cpu_scale(x, "divide", divisor)
    if dtype in INTS:
        want = torch.div(x, divisor, rounding_mode="trunc")  # C++ truncates toward zero
    elif dtype in HALVES:
        want = (x.float() / divisor).to(dtype)
    else:
        want = x / divisor
    assert_same(got, want, f"{name(dtype)} / {divisor}")
    assert_same(_C.cpu_scale(x[:0], "divide", divisor), x[:0], "empty")


@pytest.mark.parametrize("dtype", FLOATS, ids=name)
@pytest.mark.parametrize("factor", [0.5, 0.25, 1.0 / 3.0, -0.125, 3.0, 1e-3])
def test_scale_multiply_floating(dtype, factor):
    g = torch.Generator().manual_seed(11)
    x = scale_inputs(dtype, g)
    got = _C.cpu_scale(x, "multiply", factor)
    if dtype in HALVES:
        # The factor is rounded to float, multiplied in float, rounded back once.
        want = (x.float() * torch.tensor(factor, dtype=torch.float32)).to(dtype)
    else:
        want = x * torch.tensor(factor, dtype=dtype)
    assert_same(got, want, f"{name(dtype)} * {factor}")


@pytest.mark.parametrize("dtype", INTS, ids=name)
@pytest.mark.parametrize("factor", [0.5, 0.25, 1.0 / 3.0, -0.5, 1.0])
def test_scale_multiply_integer(dtype, factor):
    # Integers: v * factor in double, truncated toward zero. Factors of magnitude
    # <= 1 keep the result in range (out-of-range conversion is not defined).
    info = torch.iinfo(dtype)
    if info.min == 0:
        factor = abs(factor)  # a negative result is out of range for unsigned
    g = torch.Generator().manual_seed(5)
    x = scale_inputs(dtype, g)
    if dtype == torch.int64:
        x = x[(x.abs() < 2 ** 52) & (x != info.min)]  # exact in double
    got = _C.cpu_scale(x, "multiply", factor)
    want = torch.trunc(x.double() * factor).to(dtype)
    assert_same(got, want, f"{name(dtype)} * {factor}")


def test_nccl_avg_emulation_within_the_gpu_tolerance():
    """The bound test_gpu.py allows between ringcoll's AVG (sum, then one division)
    and NCCL's (each input times 1/p in the dtype, then summed in the dtype), checked
    on the CPU by emulating NCCL's arithmetic for every order of the sum."""
    import itertools

    from tests.cases import avg_tolerance_ulps, rounded_average, ulps_apart

    for p in (2, 3, 4, 5):
        for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
            gen = torch.Generator().manual_seed(p)
            xs = [torch.randint(0, 32, (4099,), generator=gen).to(dtype) for _ in range(p)]
            ring = rounded_average(xs, p)
            scale = torch.tensor(1.0 / p, dtype=dtype)
            terms = [(x * scale).to(dtype) for x in xs]
            for order in itertools.permutations(range(p)):
                nccl = terms[order[0]]
                for k in order[1:]:
                    nccl = (nccl + terms[k]).to(dtype)
                worst = float(ulps_apart(ring, nccl).max())
                assert worst <= avg_tolerance_ulps(p), (p, dtype, order, worst)
