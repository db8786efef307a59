"""RINGCOLL_ALGO=auto: the cost model's choice, written as an explicit selection.

Why resolve in Python, at group creation: the choice depends on the world size,
the transport and the calibration, all known when the group is created, and on
nothing that changes later; written out as an ordinary RINGCOLL_ALGO value
(csrc/schedules/select.h) it is parsed, checked and logged by the one selector the
backend already has, costs nothing per call, and can be printed, pasted and
replayed. The value carries a note after '#' that RINGCOLL_DEBUG prints as the
reason ("auto: predicted fastest (model ..., shm, p=4)").

    resolve("auto", p=4, transport="shm", cal=model.load())
    -> "allreduce=tree:0-16K,twoshot:16K-256K,ring;...# auto: predicted fastest (...)"

`auto` may stand for the whole value or for one collective's choices
("allreduce=auto;broadcast=tree"). The choice is made at byte sizes 2^k (4 B to
1 GiB) for float32 buffers; an algorithm wins the range from its first winning
size to the next size another wins, and the largest size's winner covers
everything above. The winner at 2^k holds for [2^k, 2^(k+1)) (sizes below 4 B go
with 4 B), so a power-of-2 size runs exactly the algorithm predicted fastest at
that size: every all-reduce and broadcast `python -m ringcoll.model` measures, and
its all-gathers and reduce-scatters when p divides the size (at p = 3 they are cut
to a multiple of p, 60 B say, and run the winner at the power of 2 below). Ties
keep the earlier-registered algorithm, so the result is a pure function of (p,
transport, calibration).
"""

from __future__ import annotations

from .. import _C
from . import COLLECTIVES, SELECT_NAME, Calibration, layers_of, predict, providers, transfers

# 4 B .. 1 GiB
GRID = [2 ** k for k in range(2, 31)]
AUTO_COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce")


def _size(b: int) -> str:
    for shift, unit in ((30, "G"), (20, "M"), (10, "K")):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift}{unit}"
    return str(b)


def candidates(collective: str, p: int) -> list[str]:
    """The algorithms auto chooses among: every provider (CUDA tensors get a choice
    of their own, resolved for the "nccl" transport)."""
    return providers(collective)


def choices(collective: str, p: int, transport: str, cal: Calibration) -> list[tuple]:
    """[(algorithm, lo, hi)] covering every size: hi None for the last."""
    algos = candidates(collective, p)
    winners = []
    for b in GRID:
        t = {a: predict(a, collective, p, b, transport, cal) for a in algos}
        winners.append(min(algos, key=lambda a: (t[a], algos.index(a))))
    out = []
    for i, (b, w) in enumerate(zip(GRID, winners)):
        lo = 0 if i == 0 else b
        if out and out[-1][0] == w:
            continue
        if out:
            out[-1] = (out[-1][0], out[-1][1], lo)
        out.append((w, lo, None))
    return out


def entry(collective: str, p: int, transport: str, cal: Calibration) -> str:
    """'allreduce=tree:0-16K,ring' for one collective."""
    parts = [a if hi is None else f"{a}:{_size(lo)}-{_size(hi)}"
             for a, lo, hi in choices(collective, p, transport, cal)]
    return f"{SELECT_NAME[collective]}=" + ",".join(parts)


def wants_auto(value: str | None) -> bool:
    """Whether a RINGCOLL_ALGO value names `auto` anywhere."""
    if not value:
        return False
    body = value.split("#", 1)[0]
    if body.strip() == "auto":
        return True
    return any("auto" in _names(e.partition("=")[2]) for e in body.split(";"))


def _names(choices: str) -> list[str]:
    return [c.split(":", 1)[0].strip() for c in choices.split(",")]


def resolve(value: str, p: int, transport: str, cal: Calibration) -> str:
    """`value` with every `auto` replaced by the model's choice, plus the note.
    A value without auto comes back unchanged. ValueError if auto is mixed with
    other choices of one collective."""
    if not wants_auto(value):
        return value
    try:
        return _resolve(value, p, transport, cal)
    finally:
        transfers.cache_clear()  # resolved once per group: keep no tables (large at big p)
        layers_of.cache_clear()


def _resolve(value: str, p: int, transport: str, cal: Calibration) -> str:
    body = value.split("#", 1)[0].strip()
    # The collective by either spelling, c10d's (allreduce) or torch's (all_reduce).
    by_select = {SELECT_NAME[c]: c for c in COLLECTIVES} | {c: c for c in COLLECTIVES}
    if body == "auto":
        entries = [entry(c, p, transport, cal) for c in AUTO_COLLECTIVES]
        # barrier is an all-reduce of p bytes
        algos = candidates("all_reduce", p)
        t = {a: predict(a, "all_reduce", p, p, transport, cal) for a in algos}
        entries.append("barrier=" + min(algos, key=lambda a: (t[a], algos.index(a))))
    else:
        entries = []
        for e in body.split(";"):
            name, _, rest = e.partition("=")
            if "auto" in _names(rest):
                if rest.strip() != "auto" or name.strip() not in by_select:
                    raise ValueError(f"RINGCOLL_ALGO: in '{e.strip()}', auto must be the only "
                                     f"choice of a collective ({', '.join(by_select)})")
                e = entry(by_select[name.strip()], p, transport, cal)
            entries.append(e.strip())
    return (";".join(entries) + f"# auto: predicted fastest (model {cal.source}, "
            f"{transport}, p={p})")


def select(value: str, collective: str, nbytes: int) -> str:
    """The algorithm a RINGCOLL_ALGO value runs for `collective` (bench name) of
    `nbytes` bytes, by the backend's own parser."""
    return _C.select(value, SELECT_NAME[collective], nbytes)[0]
