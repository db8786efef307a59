"""The simulator: any registered schedule on a topology of hosts, with no processes.

    python -m ringcoll.sim                     # the table of docs/MODEL.md (8, 64, 1024 ranks)
    python -m ringcoll.sim --algo rhd --collective all_reduce --hosts 16 --per-host 8 \
        --size 64M

    from ringcoll import sim
    topo = sim.Topology(hosts=8, per_host=8, intra=sim.Link(1.5e-6, 8e-11),
                        inter=sim.Link(2e-5, 1e-10), gamma=1e-10)
    sim.simulate("ring", "all_reduce", topo, nbytes=64 << 20)   # -> Result

A topology is `hosts` hosts of `per_host` ranks each (rank r on host r // per_host,
so the ring, which runs host by host, crosses each host boundary once) and two
link classes: between ranks of one host (intra) and between hosts (inter), each
with alpha (seconds per message end) and beta (seconds per byte end); gamma is
seconds per byte reduced, `copy` seconds per byte a call's entry copies
(ringcoll.model's staging), `step` seconds per step in which anything moves
(ringcoll.model's rounds); `cores` per host (None: one per rank) and `wake` model
ranks outnumbering cores as ringcoll.model does.

The simulation reads every rank's schedule (_C.schedule_table) step by step. A
rank's time in a step is the sum over its transfers, cut into segments of at most
`chunk_bytes` as the executor cuts them, of alpha + bytes * beta of the link to
that peer, plus gamma per byte it reduces (and the fingerprint's header, one
message each way to each peer and ring neighbour, in a step of its own). A step
lasts as long as its slowest rank (or, on a host whose ranks outnumber its cores,
their total work over the cores), steps follow one another, and the call pays its
staging copies (a step of their own, the same rule) and `overhead` once: the
assumptions of ringcoll.model, so that on one host with the model's constants the
two agree (tests/test_model.py), while here each transfer pays its own link. The
model and the simulator share that arithmetic (ringcoll.model.payments and
critical_path); tests/test_model.py checks it against a plain walk of the rules.

Before predicting, the schedule is proved by ringcoll.check's generic checker at
the call's n (its cost grows with the schedule's transfers, not with n). For large
worlds it proves a smaller world instead (the largest world size <= CHECK_MAX_P
with the same shape: a power of two for a power of two, else a non-power of two of
the same parity) and says so in Result.checked.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

import numpy as np

from . import check as checker
from ._modules import load_from_environment
from .model import (DTYPE_BYTES, Transfers, critical_path, elements, payments, staging_term,
                    transfers, transfers_of)

CHECK_MAX_P = 64


@dataclass(frozen=True)
class Link:
    alpha: float  # seconds per message end
    beta: float   # seconds per byte end


@dataclass(frozen=True)
class Topology:
    hosts: int
    per_host: int
    intra: Link
    inter: Link
    gamma: float = 0.0
    overhead: float = 0.0
    cores: int | None = None  # per host; None: one per rank
    wake: float = 0.0         # per message end when a host's ranks outnumber its cores
    chunk_bytes: int = 1 << 20
    fingerprint: bool = True
    copy: float = 0.0         # per byte a rank's call copies (ringcoll.model's staging)
    step: float = 0.0         # per step in which anything moves (ringcoll.model's rounds)

    def __post_init__(self):
        if self.hosts < 1 or self.per_host < 1:
            raise ValueError(f"Topology: {self.hosts} hosts x {self.per_host} ranks per host "
                             "(need at least 1 x 1)")
        if self.chunk_bytes < 64:
            raise ValueError(f"Topology: chunk_bytes={self.chunk_bytes} is below the "
                             "executor's 64-byte minimum segment")

    @property
    def p(self) -> int:
        return self.hosts * self.per_host


@dataclass
class Result:
    seconds: float
    steps: int
    counts: np.ndarray  # along the critical path: (1, msgs, bytes, reduced, wake msgs,
                        # bytes copied, steps)
    checked: str        # what the checker proved


def _hosts(p, per_host) -> tuple:
    """Params.hosts of p ranks, per_host to a host (the last host may be smaller);
    empty on one host."""
    return tuple(r // per_host for r in range(p)) if p > per_host else ()


def _check(algo, collective, p, n, per_host) -> str:
    """Runs the checker on (p, n) and this topology's hosts, or on a smaller world
    with hosts of the same size; returns what it proved."""
    if p <= CHECK_MAX_P:
        checker.check(algo, collective, p, n, hosts=_hosts(p, per_host))
        return f"p={p} n={n}"
    q = CHECK_MAX_P
    pow2 = p & (p - 1) == 0
    while q > 2 and ((q & (q - 1) == 0) != pow2 or q % 2 != p % 2):
        q -= 1
    m = max(q, n // q * q) if collective in ("reduce_scatter", "all_gather") else n
    checker.check(algo, collective, q, m, hosts=_hosts(q, per_host))
    return (f"p={q} n={m}, {per_host} ranks a host (sampled: the checker walks every rank, "
            f"too slow at p={p})")


def simulate(algo, collective, topo: Topology, nbytes: int, dtype="float32",
             verify=True) -> Result:
    """Checks the schedule (unless verify=False) and predicts one call's time."""
    p = topo.p
    n = elements(collective, nbytes, p, DTYPE_BYTES[dtype])
    checked = _check(algo, collective, p, n, topo.per_host) if verify else "not checked"
    return _simulate(transfers(algo, collective, p, n, _hosts(p, topo.per_host)), collective,
                     topo, n, dtype, checked)


def simulate_schedules(scheds, collective, topo: Topology, n: int, dtype="float32",
                       verify=True, checked="not checked") -> Result:
    """simulate() for schedules given as data (one dict per rank, as _C.schedule
    returns them) over n elements: a ScheduleError if the checker refuses them."""
    p = topo.p
    if len(scheds) != p:
        raise ValueError(f"{len(scheds)} schedules for a topology of {p} ranks")
    if verify:
        checker.check_schedules(scheds, collective, p, n, 0,
                                f"{scheds[0]['name'] if scheds else '?'} p={p} n={n}")
        checked = f"p={p} n={n}"
    return _simulate(transfers_of(scheds), collective, topo, n, dtype, checked)


def _simulate(tr: Transfers, collective, topo: Topology, n: int, dtype, checked) -> Result:
    p, elem = topo.p, DTYPE_BYTES[dtype]
    cores = topo.cores or topo.per_host
    crowded = topo.per_host > cores
    pay = payments(tr, elem, topo.chunk_bytes, topo.fingerprint)
    # each payment at its own link's price
    inter = pay.rank // topo.per_host != pay.peer // topo.per_host
    alpha = np.where(inter, topo.inter.alpha, topo.intra.alpha) + (topo.wake if crowded else 0.0)
    beta = np.where(inter, topo.inter.beta, topo.intra.beta)
    cost = pay.per_step(pay.msgs * alpha + pay.nbytes * beta + pay.reduced * topo.gamma)
    seconds, crit = critical_path(cost, pay.counts(), topo.per_host, cores)
    crit[5] = staging_term(collective, p, n, elem, topo.per_host, cores)
    total = topo.overhead + seconds + crit[6] * topo.step + crit[5] * topo.copy
    return Result(total, tr.steps, crit, checked)


# The table of docs/MODEL.md: two link classes, 8 ranks per host.
INTRA = Link(alpha=1.5e-6, beta=8e-11)   # shared memory: ~1.5 us per message end, ~12 GB/s
INTER = Link(alpha=2.5e-5, beta=1e-10)   # a 10 GB/s (80 Gb/s) network, 25 us per message end
GAMMA = 1e-10                            # reducing float32: ~10 GB/s


def table(algos, ranks=(8, 64, 1024), sizes=(1 << 10, 1 << 20, 64 << 20), per_host=8) -> str:
    out = [f"| ranks (hosts x {per_host}) | size | " + " | ".join(algos) + " |",
           "|---|---|" + "---|" * len(algos)]
    for p in ranks:
        topo = Topology(hosts=max(1, p // per_host), per_host=min(p, per_host), intra=INTRA,
                        inter=INTER, gamma=GAMMA)
        for nb in sizes:
            t = {a: simulate(a, "all_reduce", topo, nb).seconds for a in algos}
            shown = {a: f"{v * 1e6:,.0f}" for a, v in t.items()}
            best = shown[min(t, key=t.get)]  # every algorithm that shows the best figure
            cells = [(f"**{v}**" if v == best else v) for v in shown.values()]
            out.append(f"| {p} ({topo.hosts} x {topo.per_host}) | {_size(nb)} | "
                       + " | ".join(cells) + " |")
    return "\n".join(out)


def _size(b):
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if b >= 1 << shift:
            return f"{b >> shift} {unit}"
    return f"{b} B"


def main(argv=None) -> int:
    from .bench.records import parse_size
    from .model import providers

    ap = argparse.ArgumentParser(prog="python -m ringcoll.sim", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--algo", default=None,
                    help="one algorithm (default: the table of docs/MODEL.md)")
    ap.add_argument("--collective", default="all_reduce")
    ap.add_argument("--hosts", type=int, default=1)
    ap.add_argument("--per-host", type=int, default=8)
    ap.add_argument("--size", type=parse_size, default=1 << 20)
    a = ap.parse_args(argv)
    try:
        load_from_environment()
    except ImportError as e:
        print(f"python -m ringcoll.sim: {e}", file=sys.stderr)
        return 2
    if a.algo is None:
        print(f"# predicted all-reduce time (us), float32; intra-host alpha {INTRA.alpha:g} s "
              f"beta {INTRA.beta:g} s/B, inter-host alpha {INTER.alpha:g} s beta "
              f"{INTER.beta:g} s/B, gamma {GAMMA:g} s/B; bold: fastest")
        print(table(providers("all_reduce")))
        return 0
    topo = Topology(a.hosts, a.per_host, INTRA, INTER, gamma=GAMMA)
    r = simulate(a.algo, a.collective, topo, a.size)
    print(f"{a.algo} {a.collective} {a.size} B on {a.hosts} x {a.per_host}: "
          f"{r.seconds * 1e6:.1f} us, {r.steps} steps; checked {r.checked}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
