"""The CPU reducer's SIMD SUM kernels (csrc/reduce/simd_*.cc) against its functor
loops ("scalar" level), bit for bit, at every SIMD level this machine runs.

The reference for every element is the functor path's own output, with one
exception the contract (csrc/reduce/cpu_simd.h) spells out: where a and b are
both NaN the functor loops return a's or b's NaN depending on how the compiler
ordered the add at that position, so there the test checks that the functor gave
one of the two and that the kernel gave a's (what a + b alone, a lone NaN, gives).

Inputs: every 16-bit pattern against a set of partners (zeros, ones, extremes,
subnormals, infinities, NaNs, random) in both orders, random bit patterns (all
exponents, NaN payloads, subnormals), every length 0..70 and a few large ones,
views at element offsets 0..7 (aligned and misaligned against each other), dst
aliasing a, and reduce2 with and without its second destination.
"""

from __future__ import annotations

import pytest
import torch

from ringcoll import _C

LEVELS = _C.cpu_simd_levels()
SIMD = [lv for lv in LEVELS if lv != "scalar"]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
INT_VIEW = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}

# Partners for the every-pattern test, as raw bits.
PARTNERS = {
    torch.bfloat16: [0x0000, 0x8000, 0x3F80, 0xBF80, 0x7F7F, 0xFF7F, 0x0001, 0x8001, 0x0080,
                     0x007F, 0x7F80, 0xFF80, 0x7FC0, 0xFFC0, 0x7F81, 0xFFFF, 0x3F81, 0x4B00],
    torch.float16: [0x0000, 0x8000, 0x3C00, 0xBC00, 0x7BFF, 0xFBFF, 0x0001, 0x8001, 0x0400,
                    0x03FF, 0x7C00, 0xFC00, 0x7E00, 0xFE00, 0x7C01, 0xFFFF, 0x3C01, 0x6400],
}

needs_simd = pytest.mark.skipif(not SIMD, reason="no SIMD level on this machine or build")
simd_levels = pytest.mark.parametrize("level", SIMD or ["none"])


def name(x):
    return str(x).replace("torch.", "")


def bits(t):
    return t.view(INT_VIEW[t.dtype])


def random_bits(n, dtype, seed):
    """n values of `dtype` with uniformly random bit patterns."""
    g = torch.Generator().manual_seed(seed)
    w = 32 if dtype == torch.float32 else 16
    raw = torch.randint(-(1 << (w - 1)), 1 << (w - 1), (n,), generator=g, dtype=torch.int64)
    return raw.to(INT_VIEW[dtype]).view(dtype)


def every_pattern(dtype):
    """All 65536 values of a 16-bit dtype, in bit order."""
    return torch.arange(1 << 16, dtype=torch.int32).to(torch.int16).view(dtype)


def from_bits(values, dtype):
    v = torch.tensor(values, dtype=torch.int64)
    w = 32 if dtype == torch.float32 else 16
    return torch.where(v >= 1 << (w - 1), v - (1 << w), v).to(INT_VIEW[dtype]).view(dtype)


def expected(a, b):
    """(want, also): the functor loops' bits for a + b with a's NaN where both
    inputs are NaN, and the same with b's NaN there (what the functor loops may
    also give; equal to want everywhere else)."""
    want = _C.cpu_reduce(a, b, "sum", level="scalar")
    both = torch.isnan(a.float()) & torch.isnan(b.float())
    if not both.any():
        return want, want
    # A lone NaN gives the same bits whatever the operand order: the functor's own
    # conversion of a's (or b's) NaN.
    a_nan = _C.cpu_reduce(a, torch.zeros_like(a), "sum", level="scalar")
    b_nan = _C.cpu_reduce(b, torch.zeros_like(b), "sum", level="scalar")
    w, wa, wb = bits(want), bits(a_nan), bits(b_nan)
    assert bool(((w == wa) | (w == wb))[both].all()), "functor loops gave neither input's NaN"
    return torch.where(both, a_nan, want), torch.where(both, b_nan, want)


def assert_sum(got, a, b, level, what, want=None):
    """got is a + b as `level` must give it: a SIMD level a's NaN where both are
    NaN, the functor loops ("scalar") either. want: expected(a, b) if known."""
    want, also = expected(a, b) if want is None else want
    assert got.dtype == want.dtype and got.shape == want.shape, what
    bad = bits(got) != bits(want)
    if level == "scalar":
        bad &= bits(got) != bits(also)
    if bad.any():
        i = int(bad.nonzero()[0])
        hx = lambda t: hex(int(bits(t)[i]) & (0xFFFFFFFF if t.dtype == torch.float32 else 0xFFFF))
        pytest.fail(f"{what}: {int(bad.sum())} of {got.numel()} differ; first at {i}: "
                    f"a={hx(a)} b={hx(b)} got={hx(got)} want={hx(want)}")


def check(level, a, b, what):
    assert_sum(_C.cpu_reduce(a, b, "sum", level=level), a, b, level, what)


# --------------------------------------------------------------------------------
# levels


def test_levels_and_names():
    assert LEVELS[0] == "scalar"
    assert set(LEVELS) <= {"scalar", "avx2", "avx512"}
    assert LEVELS == sorted(LEVELS, key=["scalar", "avx2", "avx512"].index)
    x = torch.ones(3)
    with pytest.raises(RuntimeError, match="unknown SIMD level"):
        _C.cpu_reduce(x, x, "sum", level="sse9")


@pytest.mark.parametrize("dtype", DTYPES, ids=name)
def test_auto_is_the_widest_level(dtype):
    a, b = random_bits(999, dtype, 1), random_bits(999, dtype, 2)
    assert torch.equal(bits(_C.cpu_reduce(a, b, "sum")),
                       bits(_C.cpu_reduce(a, b, "sum", level=LEVELS[-1])))


# --------------------------------------------------------------------------------
# values


@needs_simd
@simd_levels
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=name)
def test_every_16bit_pattern_against_partners(level, dtype):
    every = every_pattern(dtype)
    partners = torch.cat([from_bits(PARTNERS[dtype], dtype), random_bits(6, dtype, 3)])
    a = every.repeat(partners.numel())
    b = partners.repeat_interleave(every.numel())
    check(level, a, b, f"{level} {name(dtype)} pattern + partner")
    check(level, b, a, f"{level} {name(dtype)} partner + pattern")


@needs_simd
@simd_levels
@pytest.mark.parametrize("dtype", DTYPES, ids=name)
def test_random_bit_patterns(level, dtype):
    n = 1 << 20
    a, b = random_bits(n, dtype, 10), random_bits(n, dtype, 11)
    check(level, a, b, f"{level} {name(dtype)} random bits")
    # Every 16-bit pattern against every other, in a random pairing.
    if dtype != torch.float32:
        every = every_pattern(dtype)
        perm = torch.randperm(1 << 16, generator=torch.Generator().manual_seed(12))
        check(level, every, every[perm], f"{level} {name(dtype)} permuted patterns")


FLOAT32_SPECIALS = [0x00000000, 0x80000000, 0x3F800000, 0xBF800000, 0x7F7FFFFF, 0xFF7FFFFF,
                    0x00800000, 0x80800000, 0x00000001, 0x80000001, 0x007FFFFF, 0x7F800000,
                    0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FC12345,
                    0x3F800001, 0x4B000000, 0x33800000, 0xB3800000]


@needs_simd
@simd_levels
def test_float32_all_pairs_of_specials(level):
    s = from_bits(FLOAT32_SPECIALS, torch.float32)
    a = s.repeat(s.numel())
    b = s.repeat_interleave(s.numel())
    check(level, a, b, f"{level} float32 specials")
    # Finite sums too: normal draws (cancellation to +0, rounding) and subnormals.
    g = torch.Generator().manual_seed(20)
    x = torch.randn(5000, generator=g)
    tiny = torch.randn(5000, generator=g) * 1e-39
    for u, v, what in [(x, -x, "cancel"), (x, x * 3, "normal"), (tiny, tiny, "subnormal"),
                       (x * 3e38, x * 3e38, "overflow")]:
        check(level, u, v, f"{level} float32 {what}")


# --------------------------------------------------------------------------------
# lengths, alignment, aliasing, second destination

LENGTHS = list(range(71)) + [1000, 4097, 65536 + 13]
# (offset of a, of b, of dst) in elements: equal offsets keep the three in step
# (the aligned main loop after a head), unequal ones misalign them against dst.
OFFSETS = [(0, 0, 0), (1, 1, 1), (3, 3, 3), (7, 7, 7), (1, 0, 0), (0, 2, 5), (5, 3, 1),
           (7, 6, 0)]
SENTINEL = {torch.float32: 0x5A5A5A5A, torch.bfloat16: 0x5A5A, torch.float16: 0x5A5A}


def buffer_view(src, offset, pad=8):
    """src copied into a larger buffer at `offset`; (view, buffer)."""
    buf = torch.empty(src.numel() + offset + pad, dtype=src.dtype)
    bits(buf).fill_(SENTINEL[src.dtype])
    view = buf[offset:offset + src.numel()]
    view.copy_(src)
    return view, buf


def assert_untouched(buf, offset, n, what):
    """Nothing outside [offset, offset + n) of buf was written."""
    outside = torch.cat([bits(buf)[:offset], bits(buf)[offset + n:]])
    assert bool((outside == SENTINEL[buf.dtype]).all()), f"{what}: wrote outside the view"


def empty_view(n, dtype, offset):
    return buffer_view(torch.empty(n, dtype=dtype), offset)


@needs_simd
@simd_levels
@pytest.mark.parametrize("dtype", DTYPES, ids=name)
def test_lengths_and_offsets(level, dtype):
    for n in LENGTHS:
        a0, b0 = random_bits(n, dtype, n), random_bits(n, dtype, n + 1000)
        want = expected(a0, b0)
        for oa, ob, od in OFFSETS:
            what = f"{level} {name(dtype)} n={n} offsets a={oa} b={ob} dst={od}"
            a, _ = buffer_view(a0, oa)
            b, _ = buffer_view(b0, ob)
            out, obuf = empty_view(n, dtype, od)
            _C.cpu_reduce(a, b, "sum", out=out, level=level)
            assert_sum(out, a0, b0, level, what, want)
            assert_untouched(obuf, od, n, what)
            assert torch.equal(bits(a), bits(a0)) and torch.equal(bits(b), bits(b0)), what


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("dtype", DTYPES, ids=name)
def test_in_place_and_second_destination(level, dtype):
    for n in [0, 1, 15, 16, 17, 33, 70, 4097]:
        a0, b0 = random_bits(n, dtype, 7 * n), random_bits(n, dtype, 7 * n + 1)
        want = expected(a0, b0)
        for oa, ob, od2 in [(0, 0, 0), (3, 3, 3), (1, 2, 5), (6, 0, 7)]:
            what = f"{level} {name(dtype)} n={n} offsets a={oa} b={ob} dst2={od2}"
            # dst aliases a, no second destination.
            a, abuf = buffer_view(a0, oa)
            b, _ = buffer_view(b0, ob)
            _C.cpu_reduce(a, b, "sum", out=a, level=level)
            assert_sum(a, a0, b0, level, what + " in place", want)
            assert_untouched(abuf, oa, n, what)
            # dst aliases a, and a second destination.
            a, abuf = buffer_view(a0, oa)
            out2, buf2 = empty_view(n, dtype, od2)
            _C.cpu_reduce(a, b, "sum", out=a, out2=out2, level=level)
            assert_sum(a, a0, b0, level, what + " in place, dst", want)
            assert_sum(out2, a0, b0, level, what + " in place, dst2", want)
            assert_untouched(abuf, oa, n, what)
            assert_untouched(buf2, od2, n, what)
            # Out of place with a second destination.
            out, buf1 = empty_view(n, dtype, (od2 + 1) % 8)
            out2, buf2 = empty_view(n, dtype, od2)
            a, _ = buffer_view(a0, oa)
            _C.cpu_reduce(a, b, "sum", out=out, out2=out2, level=level)
            assert_sum(out, a0, b0, level, what + " dst", want)
            assert_sum(out2, a0, b0, level, what + " dst2", want)
            assert_untouched(buf2, od2, n, what)
            assert torch.equal(bits(a), bits(a0)), what


# reduce2 on the functor loops: every dtype x op, dst2 equal to dst.
OTHER_DTYPES = [torch.float64, torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64,
                torch.bool, torch.float8_e4m3fn, torch.float8_e5m2]
OPS = ["sum", "product", "min", "max", "band", "bor", "bxor"]


def supported(dtype, op):
    if dtype.is_floating_point and op in ("band", "bor", "bxor"):
        return False
    return not (dtype in (torch.float8_e4m3fn, torch.float8_e5m2) and op == "product")


@pytest.mark.parametrize("dtype", DTYPES + OTHER_DTYPES, ids=name)
def test_reduce2_every_dtype_and_op(dtype):
    g = torch.Generator().manual_seed(5)
    n = 1000
    src = lambda: torch.randint(-100, 100, (n + 3,), generator=g).to(dtype)[3:]  # misaligned
    a, b = src(), src()
    for op in (o for o in OPS if supported(dtype, o)):
        for level in LEVELS:
            want = _C.cpu_reduce(a, b, op, level=level)
            out2 = torch.empty_like(a)
            got = _C.cpu_reduce(a, b, op, out2=out2, level=level)
            raw = lambda t: t.view(torch.uint8)
            assert torch.equal(raw(got), raw(want)), f"{name(dtype)} {op} {level} dst"
            assert torch.equal(raw(out2), raw(want)), f"{name(dtype)} {op} {level} dst2"


def test_bad_destinations_are_refused():
    x = torch.ones(4)
    with pytest.raises(RuntimeError, match="out must be"):
        _C.cpu_reduce(x, x, "sum", out=torch.ones(5))
    with pytest.raises(RuntimeError, match="out2 must be"):
        _C.cpu_reduce(x, x, "sum", out2=torch.ones(4, dtype=torch.float64))


@needs_simd
@simd_levels
@pytest.mark.parametrize("dtype", DTYPES, ids=name)
def test_flush_denormal_mode(level, dtype):
    # With FTZ/DAZ set (torch.set_flush_denormal) the float adds of both paths
    # flush alike; the conversions are integer code or F16C, which ignore them.
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU has no flush-denormal mode")
    try:
        if dtype == torch.float32:
            a, b = random_bits(1 << 18, dtype, 30), random_bits(1 << 18, dtype, 31)
        else:
            partners = from_bits(PARTNERS[dtype], dtype)
            a = every_pattern(dtype).repeat(partners.numel())
            b = partners.repeat_interleave(1 << 16)
        check(level, a, b, f"{level} {name(dtype)} flush-denormal")
    finally:
        torch.set_flush_denormal(False)


# --------------------------------------------------------------------------------
# the streaming (non-temporal) copy the executor uses for buffers beyond the cache


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("streaming", [False, True])
def test_copy_exact_bytes_at_every_offset(level, streaming):
    gen = torch.Generator().manual_seed(7)
    for n in list(range(0, 70)) + [4096, 65536 + 13]:
        for src_off in (0, 1, 5, 31):
            for dst_off in (0, 3, 17, 32):
                src_buf = torch.randint(0, 256, (n + 64,), dtype=torch.uint8, generator=gen)
                dst_buf = torch.full((n + 64,), 0xAB, dtype=torch.uint8)
                src = src_buf[src_off:src_off + n]
                dst = dst_buf[dst_off:dst_off + n]
                _C.cpu_copy(src, dst, streaming, level)
                assert torch.equal(dst, src), (level, streaming, n, src_off, dst_off)
                # nothing outside the destination is touched
                assert (dst_buf[:dst_off] == 0xAB).all() and (dst_buf[dst_off + n:] == 0xAB).all()
