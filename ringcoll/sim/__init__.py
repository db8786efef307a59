"""The simulator: any registered schedule on a topology of hosts, leaves and spines,
with no processes.

    python -m ringcoll.sim                     # the table of docs/MODEL.md (8, 64, 1024 ranks)
    python -m ringcoll.sim --algo rhd --collective all_reduce --hosts 16 --per-host 8 \\
        --size 64M
    python -m ringcoll.sim --algo ring --hosts 2048 --per-host 8 --hosts-per-leaf 32 \\
        --leaves-per-spine 8 --oversubscription 2 --nic host --size 64M
    python -m ringcoll.sim --topology cluster.json --algo swing --size 1M

    from ringcoll import sim
    topo = sim.Topology(hosts=8, per_host=8, intra=sim.Link(1.5e-6, 8e-11),
                        inter=sim.Link(2e-5, 1e-10), gamma=1e-10, nic="host")
    sim.simulate("ring", "all_reduce", topo, nbytes=64 << 20)   # -> Result

The topology (topology.py) places ranks on hosts, hosts under leaf switches and
leaves under spines, with a Link (alpha per message end, beta per byte end) per
level, NICs per host or per rank, oversubscribed uplinks and block or cyclic
placement. The model (cost.py): in each step every rank pays its messages' ends,
`ports` at a time; a message is done no sooner than the busiest shared resource it
crosses (NIC, uplink) has drained every byte crossing it in that step; reductions
pay gamma and local copies `copy` per byte; a step lasts as long as its slowest
rank (or a crowded host's work over its cores); steps add up, plus `step` per step
in which anything moves, the call's staging copies (ringcoll.model's) and
`overhead`. With one port and nothing shared beyond a rank's own messages this is
ringcoll.model's arithmetic, so on one host the two agree (tests/test_model.py).

What it reads (steps.py): every rank's schedule when the table is small, else one
period of ranks by the schedule's symmetry (rank r moving as rank r mod S does,
checked on sampled ranks), with the topology's own period, else by the symmetry of
its messages alone (one-shot, whose ranks fold in rank order: each step charged the
most work any rank read does there); so 16384 ranks take seconds and little memory
for every shipped all-reduce (docs/MODEL.md). Result.how says which.

Before predicting, the schedule is proved by ringcoll.check's generic checker at
the call's n (its cost grows with the schedule's transfers, not with n). For large
worlds it proves a smaller world instead (the largest world size <= CHECK_MAX_P
with the same shape: a power of two for a power of two, else a non-power of two of
the same parity) and says so in Result.checked.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .. import check as checker
from ..model import (BLOCKED, DEFAULT_COPY, DTYPE_BYTES, SCHEDULE_NAME, elements,
                     staging_term)
from . import cost, steps
from .topology import Link, Topology

__all__ = ["Link", "Topology", "Result", "simulate", "simulate_schedules", "table", "plot",
           "INTRA", "INTER", "GAMMA", "COPY", "CHECK_MAX_P"]

CHECK_MAX_P = 64


@dataclass
class Result:
    seconds: float
    steps: int
    counts: np.ndarray  # along the critical path: (1, msgs, bytes, reduced, wake msgs,
                        # bytes copied, steps)
    checked: str        # what the checker proved
    how: str = ""       # which schedules were read (steps.py)


def _hosts(p, per_host) -> tuple:
    """Params.hosts of p ranks, per_host to a host (the last host may be smaller);
    empty on one host."""
    return tuple(r // per_host for r in range(p)) if p > per_host else ()


def _check(algo, collective, topo: Topology, n) -> str:
    """Runs the checker on (p, n) and this topology's hosts, or on a smaller world
    with hosts of the same size and placement; returns what it proved."""
    from ..model import alltoall_counts

    p, per_host = topo.p, topo.per_host
    counts = (lambda q, m: alltoall_counts(q, m)) if collective == "all_to_all" else \
        (lambda q, m: None)
    if p <= CHECK_MAX_P:
        checker.check(algo, collective, p, n, hosts=topo.params_hosts(), counts=counts(p, n))
        return f"p={p} n={n}"
    q = CHECK_MAX_P
    pow2 = p & (p - 1) == 0
    while q > 2 and ((q & (q - 1) == 0) != pow2 or q % 2 != p % 2):
        q -= 1
    m = max(q, n // q * q) if collective in BLOCKED else n
    if checker.refusal(algo, collective, q, m):
        return f"not checked: {algo} does not serve the smaller world p={q} the checker samples"
    small = -(-q // per_host)
    hosts = (tuple(r % small for r in range(q)) if topo.placement == "cyclic" and small > 1
             else _hosts(q, per_host))
    checker.check(algo, collective, q, m, hosts=hosts, counts=counts(q, m))
    return (f"p={q} n={m}, {per_host} ranks a host (sampled: the checker walks every rank, "
            f"too slow at p={p})")


def _collective(collective) -> str:
    coll = checker.torch_name(collective)
    if coll not in SCHEDULE_NAME:
        raise ValueError(f"unknown collective {collective!r} (known: "
                         f"{', '.join(SCHEDULE_NAME)}; c10d's names too)")
    return coll


def simulate(algo, collective, topo: Topology, nbytes: int, dtype="float32",
             verify=True) -> Result:
    """Checks the schedule (unless verify=False) and predicts one call's time; a
    checker.NotApplicable where the algorithm declares it does not serve the call,
    steps.TooLarge where its schedules are too large to read and have no symmetry."""
    p = topo.p
    collective = _collective(collective)
    n = elements(collective, nbytes, p, DTYPE_BYTES[dtype])
    why = checker.refusal(algo, collective, p, n, nbytes, root=0)  # root 0, as simulated
    if why:
        raise checker.NotApplicable(why)
    checked = _check(algo, collective, topo, n) if verify else "not checked"
    return _simulate(steps.read(algo, collective, topo, n), collective, topo, n, dtype,
                     checked)


def simulate_schedules(scheds, collective, topo: Topology, n: int, dtype="float32",
                       verify=True, checked="not checked") -> Result:
    """simulate() for schedules given as data (one dict per rank, as _C.schedule
    returns them) over n elements: a ScheduleError if the checker refuses them."""
    from ..model import alltoall_counts

    p = topo.p
    collective = _collective(collective)
    if len(scheds) != p:
        raise ValueError(f"{len(scheds)} schedules for a topology of {p} ranks")
    if verify:
        checker.check_schedules(scheds, collective, p, n, 0,
                                f"{scheds[0]['name'] if scheds else '?'} p={p} n={n}",
                                alltoall_counts(p, n) if collective == "all_to_all" else None)
        checked = f"p={p} n={n}"
    return _simulate(steps.given(scheds, topo), collective, topo, n, dtype, checked)


def _simulate(st: steps.Steps, collective, topo: Topology, n: int, dtype, checked) -> Result:
    """The call's time from its priced steps (cost.py): each group's step time as
    many times as the steps it stands for, plus the rounds, the staging copies and
    the overhead; counts along the critical path."""
    p, elem = topo.p, DTYPE_BYTES[dtype]
    cores = topo.cores or topo.per_host
    seconds, counts, moves = cost.price(st, topo, elem)
    c = st.counts.astype(np.float64)
    msgs, nbytes, reduced, copied = c @ counts
    moved = float(c @ moves)
    staged = staging_term(collective, p, n, elem, topo.per_host, cores)
    crowded = topo.per_host > cores
    crit = np.array([1.0, msgs, nbytes, reduced, msgs if crowded else 0.0, copied + staged,
                     moved])
    # the steps' local copies are in their step times already; the staging is not
    total = topo.overhead + float(c @ seconds) + moved * topo.step + staged * topo.copy
    return Result(total, st.steps, crit, checked, st.how)


# The table of docs/MODEL.md: two link classes, 8 ranks per host.
INTRA = Link(alpha=1.5e-6, beta=8e-11)   # shared memory: ~1.5 us per message end, ~12 GB/s
INTER = Link(alpha=2.5e-5, beta=1e-10)   # a 10 GB/s (80 Gb/s) network, 25 us per message end
GAMMA = 1e-10                            # reducing float32: ~10 GB/s
COPY = DEFAULT_COPY                      # a memcpy: ~10 GB/s


def default_topology(hosts=1, per_host=8, **kw) -> Topology:
    """The table's constants (INTRA, INTER, GAMMA, COPY) on hosts x per_host; `kw`
    sets any other field (or replaces these)."""
    return Topology(hosts, per_host, **{"intra": INTRA, "inter": INTER, "gamma": GAMMA,
                                        "copy": COPY, **kw})


def table(algos, ranks=(8, 64, 1024), sizes=(1 << 10, 1 << 20, 64 << 20), per_host=8,
          collective="all_reduce", topo: Topology | None = None) -> str:
    """The predicted time (us) of each algorithm for each world and size, a
    markdown table; '-' where an algorithm declares it does not apply (named under
    the table). `topo`: the links and the rest of the topology, whose hosts and
    per_host each world replaces (default: default_topology())."""
    base = topo or default_topology()
    out = [f"| ranks (hosts x {per_host}) | size | " + " | ".join(algos) + " |",
           "|---|---|" + "---|" * len(algos)]
    skipped = {}
    for p in ranks:
        t_ = replace(base, hosts=max(1, p // per_host), per_host=min(p, per_host))
        for nb in sizes:
            t = {}
            for a in algos:
                try:
                    t[a] = simulate(a, collective, t_, nb).seconds
                except checker.NotApplicable as e:
                    skipped.setdefault(a, str(e))
            shown = {a: f"{t[a] * 1e6:,.0f}" if a in t else "-" for a in algos}
            best = shown[min(t, key=t.get)] if t else None  # every one showing the best
            cells = [(f"**{v}**" if v == best else v) for v in shown.values()]
            out.append(f"| {p} ({t_.hosts} x {t_.per_host}) | {_size(nb)} | "
                       + " | ".join(cells) + " |")
    out += [f"\n-: {why}" for why in skipped.values()]
    return "\n".join(out)


def _size(b):
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if b >= 1 << shift:
            return f"{b >> shift} {unit}"
    return f"{b} B"


def plot(path, collectives, ranks=(8, 64, 1024), sizes=None, per_host=8,
         topo: Topology | None = None) -> None:
    """The tables' predictions as a PNG: one panel per collective, time against size
    (log-log), one colour per algorithm and one line style per world size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..model import providers

    base = topo or default_topology()
    sizes = sizes or [1 << k for k in range(10, 27, 2)]
    styles = ["-", "--", ":", "-."]
    fig, axes = plt.subplots(1, len(collectives), figsize=(5 * len(collectives), 4.4),
                             squeeze=False)
    for ax, coll in zip(axes[0], collectives):
        algos = providers(coll)
        for i, p in enumerate(ranks):
            t_ = replace(base, hosts=max(1, p // per_host), per_host=min(p, per_host))
            for j, a in enumerate(algos):
                pts = []
                for nb in sizes:
                    try:
                        pts.append((nb, simulate(a, coll, t_, nb).seconds * 1e6))
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
