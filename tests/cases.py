"""Exact inputs and references shared by the multi-process tests.

Inputs are small integers chosen per (rank, index) so that every result is exact in
every dtype whatever the reduction order (the nccl-tests idea): sums of at most 8
ranks stay <= 40; PRODUCT inputs are 1 except a 2 at one rank in four (at most 4
for p <= 8); AVG inputs are multiples of p so the mean is an integer. Every rank can compute every other rank's input, so the
reference is computed locally in float64/int64 and compared bitwise.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

DTYPES = [
    torch.float32, torch.float64, torch.float16, torch.bfloat16,
    torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool,
]
FLOATS = {torch.float32, torch.float64, torch.float16, torch.bfloat16}

R = dist.ReduceOp
OPS = ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "PREMUL_SUM", "BAND", "BOR", "BXOR"]
PREMUL_FACTOR = 2.0


def op_valid(op: str, dtype) -> bool:
    """Whether ringcoll supports (op, dtype); the rest must raise."""
    if op in ("BAND", "BOR", "BXOR"):
        return dtype not in FLOATS
    if op == "PREMUL_SUM":
        return dtype in FLOATS
    if op == "AVG":
        return dtype != torch.bool
    return True


def reduce_op(op: str):
    if op == "PREMUL_SUM":
        return dist._make_nccl_premul_sum(PREMUL_FACTOR)
    return getattr(R, op)


def counts(p: int, large: int = 1000) -> list[int]:
    return sorted({0, 1, max(p - 1, 0), p + 1, large})


def make_input(rank: int, n: int, dtype, op: str, p: int, salt: int = 0) -> torch.Tensor:
    i = torch.arange(n, dtype=torch.int64) + salt
    if dtype == torch.bool:
        v = ((i + rank) % 3) == 0
        return v
    if op == "PRODUCT":
        # at most 2 factors of 2 across ranks (positions rank and rank+1 mod 4 of i)
        v = 1 + (((i + rank) % 4) == 0).to(torch.int64)
    elif op == "AVG":
        v = p * (((3 * i + rank) % 4) + 1)
    elif op in ("MIN", "MAX"):
        v = ((7 * i + 3 * rank) % 5) - (0 if dtype == torch.uint8 else 2)
    elif op in ("BAND", "BOR", "BXOR"):
        v = ((5 * i + 3 * rank) % 16) + 1
    else:
        v = ((7 * i + 3 * rank) % 5) + 1
    return v.to(dtype)


def reference(inputs: list[torch.Tensor], op: str, dtype, p: int) -> torch.Tensor:
    """The exact reduction of all ranks' inputs, in dtype."""
    if dtype == torch.bool:
        stack = torch.stack(inputs)
        if op in ("SUM", "MAX", "BOR"):
            return stack.any(0)
        if op in ("PRODUCT", "MIN", "BAND"):
            return stack.all(0)
        if op == "BXOR":
            return (stack.to(torch.int64).sum(0) % 2).to(torch.bool)
        raise ValueError(op)
    wide = torch.stack([t.to(torch.float64 if dtype in FLOATS else torch.int64) for t in inputs])
    if op == "SUM":
        out = wide.sum(0)
    elif op == "AVG":
        out = wide.sum(0) / p if dtype in FLOATS else torch.div(wide.sum(0), p, rounding_mode="trunc")
    elif op == "PREMUL_SUM":
        out = (wide * PREMUL_FACTOR).sum(0)
    elif op == "PRODUCT":
        out = wide.prod(0)
    elif op == "MIN":
        out = wide.min(0).values
    elif op == "MAX":
        out = wide.max(0).values
    elif op == "BAND":
        out = wide[0].clone()
        for t in wide[1:]:
            out &= t
    elif op == "BOR":
        out = wide[0].clone()
        for t in wide[1:]:
            out |= t
    elif op == "BXOR":
        out = wide[0].clone()
        for t in wide[1:]:
            out ^= t
    else:
        raise ValueError(op)
    return out.to(dtype)


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality (dtype, shape and values; NaN never appears in our inputs)."""
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


def gloo_or_none(fn):
    """fn() run on the gloo reference group; None where gloo does not support the
    dtype, op or call (its error says so), so the caller checks against the exact
    expected values alone."""
    try:
        return fn()
    except (RuntimeError, ValueError) as e:
        text = str(e).lower()
        if "support" in text or "invalid" in text or "cannot use" in text:
            return None
        raise


def check_same(failures, what, got, want, gloo_out=None):
    """Appends to `failures` where ringcoll's `got` differs from `want` (the exact
    expected values), and where gloo's output, when there is one, does (a bad test)."""
    if not same(got, want):
        bad = ((got != want).nonzero()[:5].flatten().tolist()
               if got.shape == want.shape else f"shape {tuple(got.shape)}")
        failures.append(f"{what}: ringcoll differs from expected at {bad}: "
                        f"got {got.flatten()[:8].tolist()} want {want.flatten()[:8].tolist()}")
    if gloo_out is not None and not same(gloo_out, want):
        failures.append(f"{what}: gloo differs from the expected values (bad test)")


def error_text(fn):
    """The message fn() raises, or "no error" (argument-error tests check it)."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the message is checked
        return str(e)
    return "no error"


def avg_tolerance_ulps(p: int) -> int:
    """How far NCCL's AVG may be from the correctly rounded average, in ulps_apart:
    NCCL pre-multiplies each input by 1/p (p roundings, and 1/p itself rounded) and
    sums (p - 1 roundings). An emulation of that arithmetic on non-negative small
    integers (all orders of the sum; tests/test_functors.py) gave at most 2 ulps at
    p = 3 and 5, 3 at p = 6 and 7: p - 1 covers them. With inputs of both signs there
    is no such bound: where the exact average is near 0, NCCL's result is off by the
    rounding of the large terms, thousands of its ulps (the first GPU run of the AVG
    test used such inputs and failed at p = 3)."""
    return 0 if p & (p - 1) == 0 else p - 1


def rounded_average(inputs: list[torch.Tensor], p: int) -> torch.Tensor:
    """The average of small-integer inputs as ringcoll computes it: the exact sum,
    divided once (16-bit types in float, then rounded)."""
    dtype = inputs[0].dtype
    total = sum(t.to(torch.float64) for t in inputs)  # exact for small integers
    acc = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    return (total.to(acc) / p).to(dtype)


def ulps_apart(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """|a - b| in units in the last place of the larger magnitude of the two."""
    big = torch.maximum(a.abs(), b.abs())
    return (a - b).abs() / (torch.nextafter(big, torch.full_like(big, float("inf"))) - big)
