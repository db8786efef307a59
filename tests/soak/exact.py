"""Exact inputs and references: what every call of the soak reads and what it must
produce, computed on the rank from the call's (dtype, op, rank, salt) alone.

Inputs are small integers whose reduction over p <= 8 ranks is exact in every dtype,
so a result either equals the reference bit for bit or is wrong: no tolerance hides a
misplaced block or a lost contribution."""

from __future__ import annotations

PREMUL_FACTOR = 2.0  # the factor of every PREMUL_SUM call


def dtypes():
    import torch

    return [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
            torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool,
            torch.float8_e4m3fn, torch.float8_e5m2, torch.complex64]


def kind_of(dtype) -> str:
    import torch

    if dtype == torch.bool:
        return "bool"
    if dtype.is_complex:
        return "complex"
    if dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        return "float8"
    return "float" if dtype.is_floating_point else "int"


def reduce_ops_for(dtype) -> list:
    """The (op, dtype) pairs ringcoll supports (docs/SUPPORTED.md)."""
    return {"bool": ["SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"],
            "complex": ["SUM", "AVG", "PREMUL_SUM"],
            "float8": ["SUM", "MIN", "MAX"],
            "float": ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "PREMUL_SUM"],
            "int": ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"],
            }[kind_of(dtype)]


def _hash(n, rank, salt):
    """A per-(element, rank, call) pseudo-random int64 in [0, 2^19): a block that lands
    in the wrong place shows, whatever its offset."""
    import torch

    i = torch.arange(n, dtype=torch.int64)
    h = (i * 2654435761 + (rank * 7919 + salt % 1000003 + 1) * 40503) & 0xFFFFFFFF
    return (h ^ (h >> 13)) & 0x7FFFF


def values(n, dtype, rank, salt, op=None, p=1):
    """Rank `rank`'s input of one call: small integers whose reduction over p <= 8 ranks
    is exact in `dtype` (`op` None: any values the dtype holds exactly, for calls that
    only move data)."""
    import torch

    kind = kind_of(dtype)
    h = _hash(n, rank, salt)
    if kind == "bool":
        return (h & 1).bool()
    signed = dtype != torch.uint8
    if op is None:
        lo, hi = {"float8": (-7, 7), "int": (-100, 100) if signed else (0, 200)}.get(
            kind, (-256, 256))  # (bfloat16 holds the integers to 256)
        if dtype == torch.int8:
            lo, hi = -128, 127
    elif op == "PRODUCT":  # 2 at one rank per element, else 1, signs random: |prod| = 2
        two = (h % p) == rank
        v = 1 + two.to(torch.int64)
        if signed:
            v = v * (1 - 2 * ((h >> 7) & 1))
        return v.to(dtype)
    elif op in ("MIN", "MAX"):
        lo, hi = (-5, 5) if signed else (0, 10)
    elif op in ("BAND", "BOR", "BXOR"):
        lo, hi = 0, 63
    elif kind == "float8":
        lo, hi = -1, 1  # |sum| <= 8: exact in both float8 types
    elif op == "AVG":  # multiples of p: the mean is an integer
        lo, hi = ((-1, 1) if signed else (0, 1)) if dtype.itemsize == 1 else (-3, 3)
        return (p * ((h % (hi - lo + 1)) + lo)).to(dtype)
    else:  # SUM, PREMUL_SUM: |2 * sum| <= 48
        lo, hi = (-3, 3) if signed else (0, 3)
    v = (h % (hi - lo + 1)) + lo
    if kind == "complex":
        im = (_hash(n, rank, salt + 1) % (hi - lo + 1)) + lo
        return torch.complex(v.double(), im.double()).to(dtype)
    return v.to(dtype)


def reference(inputs, op, dtype, p):
    """The exact reduction of every rank's input, widened (float64, int64, complex128;
    bool stays bool)."""
    import torch

    kind = kind_of(dtype)
    if kind == "bool":
        s = torch.stack(inputs)
        if op in ("SUM", "MAX", "BOR"):
            return s.any(0)
        if op in ("PRODUCT", "MIN", "BAND"):
            return s.all(0)
        return (s.to(torch.int64).sum(0) % 2).bool()  # BXOR
    wide = {"complex": torch.complex128, "int": torch.int64}.get(kind, torch.float64)
    w = torch.stack([t.to(wide) for t in inputs])
    if op == "SUM":
        return w.sum(0)
    if op == "AVG":
        return w.sum(0) / p if kind != "int" else torch.div(w.sum(0), p, rounding_mode="trunc")
    if op == "PREMUL_SUM":
        return (w * PREMUL_FACTOR).sum(0)
    if op == "PRODUCT":
        return w.prod(0)
    if op == "MIN":
        return w.min(0).values
    if op == "MAX":
        return w.max(0).values
    out = w[0].clone()
    for t in w[1:]:
        out = out & t if op == "BAND" else out | t if op == "BOR" else out ^ t
    return out


def differs(got, want) -> str | None:
    """None if `got` (in its dtype) equals `want` (exact, widened or not), else where."""
    import torch

    if tuple(got.shape) != tuple(want.shape):
        return f"shape {tuple(got.shape)}, want {tuple(want.shape)}"
    if want.dtype == got.dtype and got.dtype.itemsize == 1:
        a, b = got.view(torch.uint8), want.view(torch.uint8)
    else:
        wide = want.dtype if want.dtype in (torch.float64, torch.int64, torch.complex128,
                                            torch.bool) else {
            "complex": torch.complex128, "int": torch.int64}.get(kind_of(got.dtype),
                                                                  torch.float64)
        if got.dtype == torch.bool:
            wide = torch.bool
        a, b = got.to(wide), want.to(wide)
    if torch.equal(a, b):
        return None
    bad = (a != b).nonzero().flatten()
    i = int(bad[0])
    return (f"{bad.numel()} of {a.numel()} elements differ, first at {i}: got "
            f"{a[i].item()} want {b[i].item()}")

