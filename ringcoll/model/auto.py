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

A candidate whose schedules cannot be built for this group (an algorithm written
in Python whose function raises for this world size, say powers of two only)
drops out of the choice for that collective, never failing the group: resolve()
records why in `dropped`, which the backend's creator prints under RINGCOLL_DEBUG.
"""

from __future__ import annotations

from .. import _C
from . import (COLLECTIVES, SELECT_NAME, Calibration, CalibrationError, layers_of, predict,
               providers, transfers)

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


def _first_line(e: BaseException) -> str:
    text = (str(e).strip().splitlines() or [""])[0]
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def predictions(collective: str, p: int, transport: str, cal: Calibration, sizes,
                dropped: dict | None = None) -> dict:
    """{algorithm: [predicted seconds at each of `sizes`]} of every candidate whose
    schedules can be built. A candidate that is not built in and fails (its function
    raises, or returns no schedule) is left out, with the reason in
    dropped[(algorithm, collective)]; a built-in one that fails, or a calibration
    that cannot price the transport, is an error (a bug, or the user's file)."""
    out = {}
    for a in candidates(collective, p):
        try:
            out[a] = [predict(a, collective, p, b, transport, cal) for b in sizes]
        except CalibrationError:
            raise
        except Exception as e:  # noqa: BLE001 - any error of a user's algorithm
            if _C.is_builtin(a):
                raise
            if dropped is not None:
                dropped[(a, collective)] = _first_line(e)
    return out


def choices(collective: str, p: int, transport: str, cal: Calibration,
            dropped: dict | None = None) -> list[tuple]:
    """[(algorithm, lo, hi)] covering every size: hi None for the last. `dropped`
    (a dict) receives the candidates left out and why (predictions())."""
    t = predictions(collective, p, transport, cal, GRID, dropped)
    algos = list(t)
    winners = [min(algos, key=lambda a: (t[a][i], algos.index(a))) for i in range(len(GRID))]
    out = []
    for i, (b, w) in enumerate(zip(GRID, winners)):
        lo = 0 if i == 0 else b
        if out and out[-1][0] == w:
            continue
        if out:
            out[-1] = (out[-1][0], out[-1][1], lo)
        out.append((w, lo, None))
    return out


def entry(collective: str, p: int, transport: str, cal: Calibration,
          dropped: dict | None = None) -> str:
    """'allreduce=tree:0-16K,ring' for one collective."""
    parts = [a if hi is None else f"{a}:{_size(lo)}-{_size(hi)}"
             for a, lo, hi in choices(collective, p, transport, cal, dropped)]
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


def resolve(value: str, p: int, transport: str, cal: Calibration,
            dropped: dict | None = None) -> str:
    """`value` with every `auto` replaced by the model's choice, plus the note.
    A value without auto comes back unchanged. ValueError if auto is mixed with
    other choices of one collective. `dropped` (a dict) receives, per (algorithm,
    collective), why a candidate was left out (predictions())."""
    if not wants_auto(value):
        return value
    try:
        return _resolve(value, p, transport, cal, {} if dropped is None else dropped)
    finally:
        transfers.cache_clear()  # resolved once per group: keep no tables (large at big p)
        layers_of.cache_clear()


def left_out(dropped: dict) -> str:
    """dropped (resolve()'s) as one line for RINGCOLL_DEBUG; '' when empty."""
    return "; ".join(f"{a} for {c} ({why})" for (a, c), why in dropped.items())


def _resolve(value: str, p: int, transport: str, cal: Calibration, dropped: dict) -> str:
    body = value.split("#", 1)[0].strip()
    # The collective by either spelling, c10d's (allreduce) or torch's (all_reduce).
    by_select = {SELECT_NAME[c]: c for c in COLLECTIVES} | {c: c for c in COLLECTIVES}
    if body == "auto":
        entries = [entry(c, p, transport, cal, dropped) for c in AUTO_COLLECTIVES]
        # barrier is an all-reduce of p bytes
        t = predictions("all_reduce", p, transport, cal, [p], dropped)
        algos = list(t)
        entries.append("barrier=" + min(algos, key=lambda a: (t[a][0], algos.index(a))))
    else:
        entries = []
        for e in body.split(";"):
            name, _, rest = e.partition("=")
            if "auto" in _names(rest):
                if rest.strip() != "auto" or name.strip() not in by_select:
                    raise ValueError(f"RINGCOLL_ALGO: in '{e.strip()}', auto must be the only "
                                     f"choice of a collective ({', '.join(by_select)})")
                e = entry(by_select[name.strip()], p, transport, cal, dropped)
            entries.append(e.strip())
    return (";".join(entries) + f"# auto: predicted fastest (model {cal.source}, "
            f"{transport}, p={p})")


def select(value: str, collective: str, nbytes: int) -> str:
    """The algorithm a RINGCOLL_ALGO value runs for `collective` (bench name) of
    `nbytes` bytes, by the backend's own parser."""
    return _C.select(value, SELECT_NAME[collective], nbytes)[0]
