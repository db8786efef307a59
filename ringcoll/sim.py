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
from .model import (BLOCKED, DTYPE_BYTES, SCHEDULE_NAME, Transfers, alltoall_counts,
                    critical_path, elements, payments, staging_term, transfers, transfers_of)

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
    counts = (lambda q, m: alltoall_counts(q, m)) if collective == "all_to_all" else \
        (lambda q, m: None)
    if p <= CHECK_MAX_P:
        checker.check(algo, collective, p, n, hosts=_hosts(p, per_host), counts=counts(p, n))
        return f"p={p} n={n}"
    q = CHECK_MAX_P
    pow2 = p & (p - 1) == 0
    while q > 2 and ((q & (q - 1) == 0) != pow2 or q % 2 != p % 2):
        q -= 1
    m = max(q, n // q * q) if collective in BLOCKED else n
    if checker.refusal(algo, collective, q, m):
        return f"not checked: {algo} does not serve the smaller world p={q} the checker samples"
    checker.check(algo, collective, q, m, hosts=_hosts(q, per_host), counts=counts(q, m))
    return (f"p={q} n={m}, {per_host} ranks a host (sampled: the checker walks every rank, "
            f"too slow at p={p})")


def simulate(algo, collective, topo: Topology, nbytes: int, dtype="float32",
             verify=True) -> Result:
    """Checks the schedule (unless verify=False) and predicts one call's time; a
    checker.NotApplicable where the algorithm declares it does not serve the call."""
    p = topo.p
    collective = checker.torch_name(collective)
    if collective not in SCHEDULE_NAME:
        raise ValueError(f"unknown collective {collective!r} (known: "
                         f"{', '.join(SCHEDULE_NAME)}; c10d's names too)")
    n = elements(collective, nbytes, p, DTYPE_BYTES[dtype])
    why = checker.refusal(algo, collective, p, n, nbytes, root=0)  # root 0, as simulated
    if why:
        raise checker.NotApplicable(why)
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
                                f"{scheds[0]['name'] if scheds else '?'} p={p} n={n}",
                                alltoall_counts(p, n) if collective == "all_to_all" else None)
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


def table(algos, ranks=(8, 64, 1024), sizes=(1 << 10, 1 << 20, 64 << 20), per_host=8,
          collective="all_reduce") -> str:
    """The predicted time (us) of each algorithm for each world and size, a
    markdown table; '-' where an algorithm declares it does not apply (named under
    the table)."""
    out = [f"| ranks (hosts x {per_host}) | size | " + " | ".join(algos) + " |",
           "|---|---|" + "---|" * len(algos)]
    skipped = {}
    for p in ranks:
        topo = Topology(hosts=max(1, p // per_host), per_host=min(p, per_host), intra=INTRA,
                        inter=INTER, gamma=GAMMA)
        for nb in sizes:
            t = {}
            for a in algos:
                try:
                    t[a] = simulate(a, collective, topo, nb).seconds
                except checker.NotApplicable as e:
                    skipped.setdefault(a, str(e))
            shown = {a: f"{t[a] * 1e6:,.0f}" if a in t else "-" for a in algos}
            best = shown[min(t, key=t.get)] if t else None  # every one showing the best
            cells = [(f"**{v}**" if v == best else v) for v in shown.values()]
            out.append(f"| {p} ({topo.hosts} x {topo.per_host}) | {_size(nb)} | "
                       + " | ".join(cells) + " |")
    out += [f"\n-: {why}" for why in skipped.values()]
    return "\n".join(out)


def _size(b):
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if b >= 1 << shift:
            return f"{b >> shift} {unit}"
    return f"{b} B"


def plot(path, collectives, ranks=(8, 64, 1024), sizes=None, per_host=8) -> None:
    """The tables' predictions as a PNG: one panel per collective, time against size
    (log-log), one colour per algorithm and one line style per world size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .model import providers

    sizes = sizes or [1 << k for k in range(10, 27, 2)]
    styles = ["-", "--", ":", "-."]
    fig, axes = plt.subplots(1, len(collectives), figsize=(5 * len(collectives), 4.4),
                             squeeze=False)
    for ax, coll in zip(axes[0], collectives):
        algos = providers(coll)
        for i, p in enumerate(ranks):
            topo = Topology(hosts=max(1, p // per_host), per_host=min(p, per_host), intra=INTRA,
                            inter=INTER, gamma=GAMMA)
            for j, a in enumerate(algos):
                pts = []
                for nb in sizes:
                    try:
                        pts.append((nb, simulate(a, coll, topo, nb).seconds * 1e6))
                    except checker.NotApplicable:
                        continue
                if pts:
                    ax.plot(*zip(*pts), styles[i % len(styles)], color=plt.cm.tab10(j % 10),
                            label=f"{a} p={p}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("size (bytes)")
        ax.set_ylabel("predicted time (us)")
        ax.set_title(coll)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6)
    fig.suptitle(f"predicted time, float32, {per_host} ranks a host (ringcoll.sim)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None) -> int:
    from .bench.records import parse_size
    from .model import providers

    ap = argparse.ArgumentParser(prog="python -m ringcoll.sim", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--algo", default=None,
                    help="one algorithm (default: a table of every algorithm that provides "
                         "the collective, as docs/MODEL.md's)")
    ap.add_argument("--collective", default="all_reduce",
                    help="torch's or c10d's name (all_reduce, allreduce, all_to_all, "
                         "alltoall, gather, ...), or 'all' for a table of each; default "
                         "all_reduce")
    ap.add_argument("--hosts", type=int, default=1)
    ap.add_argument("--per-host", type=int, default=8)
    ap.add_argument("--size", type=parse_size, default=1 << 20)
    ap.add_argument("--plot", default=None, metavar="PATH",
                    help="with the tables: also draw them as a PNG, one panel per collective")
    a = ap.parse_args(argv)
    try:
        load_from_environment()
    except ImportError as e:
        print(f"python -m ringcoll.sim: {e}", file=sys.stderr)
        return 2
    colls = list(SCHEDULE_NAME) if a.collective == "all" else [checker.torch_name(a.collective)]
    bad = [c for c in colls if c not in SCHEDULE_NAME]
    if bad:
        print(f"python -m ringcoll.sim: unknown collective {a.collective!r} (known: "
              f"{', '.join(SCHEDULE_NAME)}, c10d's names, or all)", file=sys.stderr)
        return 2
    if a.algo is None:
        for coll in colls:
            print(f"# predicted {coll} time (us), float32; intra-host alpha {INTRA.alpha:g} s "
                  f"beta {INTRA.beta:g} s/B, inter-host alpha {INTER.alpha:g} s beta "
                  f"{INTER.beta:g} s/B, gamma {GAMMA:g} s/B; bold: fastest")
            print(table(providers(coll), collective=coll))
            print()
        if a.plot:
            plot(a.plot, colls)
            print(f"# wrote {a.plot}")
        return 0
    topo = Topology(a.hosts, a.per_host, INTRA, INTER, gamma=GAMMA)
    for coll in colls:
        try:
            r = simulate(a.algo, coll, topo, a.size)
        except checker.NotApplicable as e:
            print(f"{a.algo} {coll} {a.size} B on {a.hosts} x {a.per_host}: skipped: {e}")
            continue
        except ValueError as e:  # an algorithm that does not provide it, say
            print(f"python -m ringcoll.sim: {e}", file=sys.stderr)
            return 1
        print(f"{a.algo} {coll} {a.size} B on {a.hosts} x {a.per_host}: "
              f"{r.seconds * 1e6:.1f} us, {r.steps} steps; checked {r.checked}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
