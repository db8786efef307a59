"""The steps the simulator prices, read from the schedules: every rank's (small
tables), or one period's, by the schedule's symmetry (large worlds).

What a step's price depends on is, for each rank, the kind, peer and size of each
transfer: a step is kept as rows (group, rank, peer, kind, elements), a group being
a step or a set of steps priced alike (`counts`: how many steps each group stands
for), for the representative ranks 0..L-1 (`period` L; every rank when L = p).

  * every rank (exact): ringcoll.model's table of all ranks' schedules, one group a
    step. Its size grows with ranks x steps (the ring at 16384 ranks: 1.1e9 rows),
    so it is used up to FULL_ROWS rows, and for an algorithm written in Python (or
    an all-to-all, whose counts take Python) only when building every rank's
    schedule at rank 0's pace takes at most FULL_SECONDS (swing: 16384 x 57 ms).
  * symmetry (otherwise): many schedules repeat with the rank: rank r's transfers in
    each step are rank r mod S's moved by r - r mod S (peers, same kinds and sizes):
    S = 1 for the ring, biring and twoshot, 2 for swing, a host's ranks for twolevel.
    The simulator tries S = 1, 2, ... up to MAX_PERIOD (a divisor of p), refusing
    one as soon as rank S differs from rank 0; it builds the schedules of ranks
    0..S-1 and checks the claim on sampled ranks (up to SAMPLED + 3: the next
    period's first and last, the middle's, the last ranks', each topology unit's
    first), then groups the steps whose S ranks move alike (kind, peer offset,
    size): the ring's 32766 steps at 16384 ranks are two groups, twoshot's 16384
    each its own. With the topology's period T (Topology.period), ranks 0..lcm(S, T)
    - 1 stand for all. rhd's and tree's partners depend on a rank's bits (no period;
    their tables are small).
  * symmetry of the messages (otherwise, when the table is too large): one-shot's
    ranks all send and receive alike (step i: to r-1-i, from r+1+i), but each folds
    in rank order, so which receive reduces and how many local reductions follow
    depend on the rank. The period is then looked for in the messages alone (a
    receive as a receive, local transfers aside), and what a rank reduces and copies
    in a step is the most that any rank read (the period's checks, the ranks the
    search built, the first and last ENDS) does there, charged to every rank as a
    local reduction and copy. Exact where that rank's messages cost as much as any
    rank's in the step (one-shot on every uncrowded topology tested: rank 0 reduces
    in every step that moves); otherwise high by at most that work, and where ranks
    outnumber cores by up to a host's ranks' work over its cores (Result.how says
    so); low only if a rank not read works more than every rank read. Its steps (one-shot's p - 1 offsets) times the topology's period must stay
    within FULL_ROWS.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .. import _C
from ..model import SCHEDULE_NAME, transfers, transfers_of
from .topology import Topology, lcm

# kinds, as priced (cost.py)
SEND, RECV_COPY, RECV_REDUCE, LOCAL_COPY, LOCAL_REDUCE, HEADER = range(6)
FULL_ROWS = 8_000_000  # the most rows of every rank's table that are read whole
FULL_SECONDS = 2.0     # the most a Python schedule's every rank may take to build
MAX_PERIOD = 64        # the longest schedule period tried
SAMPLED = 6
ENDS = 4             # the first and last ranks read for symmetric_messages' envelope


class TooLarge(ValueError):
    """The schedule is too large to read whole and has no symmetry to use."""


@dataclass
class Steps:
    p: int
    period: int                 # L: ranks 0..L-1 stand for all
    counts: np.ndarray          # steps each group stands for (the header's group: 1)
    rows: np.ndarray            # (group, rank, peer, kind, elements), int64
    steps: int                  # the schedule's steps (the header aside)
    how: str                    # "every rank's schedule" or the symmetry used


def _kinds(kind: np.ndarray, local: np.ndarray) -> np.ndarray:
    """ringcoll.model's KINDS as priced: a receive reduces in either operand order."""
    out = np.where(kind == 0, SEND, np.where(kind == 1, RECV_COPY, RECV_REDUCE))
    out = np.where(local & (out == RECV_COPY), LOCAL_COPY, out)
    return np.where(local & (out == RECV_REDUCE), LOCAL_REDUCE, out)


def from_table(tr, header: bool) -> Steps:
    """Every rank's schedule (ringcoll.model.Transfers), one group a step; empty
    transfers and sends to the rank itself cost nothing and are dropped."""
    rows = tr.rows[tr.rows[:, 4] < tr.rows[:, 5]]
    local = rows[:, 3] == rows[:, 0]
    keep = ~(local & (rows[:, 2] == 0))
    rows, local = rows[keep], local[keep]
    out = np.stack([rows[:, 1] + header, rows[:, 0], rows[:, 3], _kinds(rows[:, 2], local),
                    rows[:, 5] - rows[:, 4]], axis=1)
    counts = np.ones(tr.steps + header, dtype=np.int64)
    if header:
        out = np.concatenate([_header_rows(out, tr.p, tr.p), out])
    return Steps(tr.p, tr.p, counts, out, tr.steps, "every rank's schedule")


def _header_rows(rows: np.ndarray, p: int, period: int) -> np.ndarray:
    """The fingerprint's step (group 0): each rank of 0..period-1 with each distinct
    peer it moves anything with and its ring neighbours, one row a peer."""
    moved = rows[rows[:, 3] < LOCAL_COPY]
    keys = np.unique(moved[:, 1] * p + moved[:, 2])
    ranks = np.arange(period)
    keys = np.unique(np.concatenate([keys, ranks * p + (ranks + 1) % p,
                                     ranks * p + (ranks - 1) % p]))
    keys = keys[keys // p != keys % p]
    zeros = np.zeros(len(keys), dtype=np.int64)
    return np.stack([zeros, keys // p, keys % p, zeros + HEADER, zeros], axis=1)


def every_rank(algo, collective, topo: Topology, n: int) -> Steps:
    return from_table(transfers(algo, collective, topo.p, n, topo.params_hosts()),
                      bool(topo.fingerprint and topo.p > 1))


def given(scheds, topo: Topology) -> Steps:
    return from_table(transfers_of(scheds), bool(topo.fingerprint and topo.p > 1))


@dataclass(eq=False)
class _Rank:
    """One rank's schedule as the symmetry readings compare it: rows (step, kind as
    priced, peer offset, elements), by step and each step's in sorted order, empty
    transfers and sends to itself left out; `steps` its number of steps. Arrays, not
    a Python object a transfer: one-shot's rank has 32766 of them at 16384 ranks."""
    steps: int
    rows: np.ndarray

    @staticmethod
    def of(steps: int, step, kind, off, el) -> "_Rank":
        order = np.lexsort((el, off, kind, step))  # as sorted() orders each step's tuples
        return _Rank(steps, np.stack([step, kind, off, el], axis=1)[order])

    def key(self) -> tuple:
        """Equal for two ranks that move alike."""
        return self.steps, self.rows.tobytes()

    def per_step(self) -> list:
        """Each step's transfers, a tuple of (kind, peer offset, elements) a step."""
        cuts = np.searchsorted(self.rows[:, 0], np.arange(self.steps + 1)).tolist()
        items = self.rows[:, 1:].tolist()
        return [tuple(map(tuple, items[cuts[i]:cuts[i + 1]])) for i in range(self.steps)]

    def messages(self) -> "_Rank":
        """The rank as the messages-only symmetry compares it: its messages (a receive
        as a receive, whether it reduces or copies aside), local transfers left out,
        the message-less steps at its end dropped."""
        m = self.rows[self.rows[:, 1] < LOCAL_COPY]
        kind = np.where(m[:, 1] == SEND, SEND, RECV_COPY)
        steps = int(m[-1, 0]) + 1 if len(m) else 0
        return _Rank.of(steps, m[:, 0], kind, m[:, 2], m[:, 3])

    def work(self) -> np.ndarray:
        """(elements reduced, elements copied locally) in each step: shape (steps, 2)."""
        k, st, el = self.rows[:, 1], self.rows[:, 0], self.rows[:, 3].astype(np.float64)
        red = np.bincount(st, np.where((k == RECV_REDUCE) | (k == LOCAL_REDUCE), el, 0),
                          self.steps)
        cop = np.bincount(st, np.where(k == LOCAL_COPY, el, 0), self.steps)
        return np.stack([red, cop], axis=1).astype(np.int64)


def _one_rank(algo, collective, topo: Topology, n: int, r: int) -> _Rank:
    """Rank r's schedule (_Rank)."""
    p = topo.p
    if collective == "all_to_all":
        m = n // p
        d = _C.schedule(algo, "alltoall", p, r, 2 * n, 0, [], [m] * p, [m] * p,
                        list(topo.params_hosts()))
        names = {"send": 0, "recv_copy": 1, "recv_reduce": 2, "recv_reduce_first": 3}
        rows = np.array([(i, names[k], q, b, e) for i, st in enumerate(d["steps"])
                         for k, q, b, e in st["transfers"]], dtype=np.int64).reshape(-1, 5)
        nsteps = len(d["steps"])
    else:  # one rank's table
        table, steps_of, _ = _C.schedule_table(algo, SCHEDULE_NAME[collective], p, n, 0,
                                               list(topo.params_hosts()), [r])
        rows, nsteps = table.numpy()[:, 1:], steps_of[0]
    step, kind, peer, b, e = (rows[:, i] for i in range(5))
    keep = (b < e) & ~((peer == r) & (kind == 0))
    step, kind, peer, el = step[keep], kind[keep], peer[keep], (e - b)[keep]
    # schedule_table's kinds (recv_reduce_first: 3) as priced
    return _Rank.of(nsteps, step, _kinds(kind, peer == r), (peer - r) % p, el)


def _samples(topo: Topology, s: int) -> list:
    """Ranks outside 0..s-1 that a symmetry of period s is checked on (the module
    docstring)."""
    p = topo.p
    host, leaf, group = topo.units(np.arange(p))
    firsts = [int(np.argmax(u == u[-1])) for u in (host, leaf, group)]  # the last unit's
    picks = [s, 2 * s - 1, p // 2, p // 2 + s - 1, p - 1, p - s] + firsts
    out = []
    for r in picks:
        if s <= r < p and r not in out:
            out.append(r)
    return out[:SAMPLED + 3]


class _Ranks:
    """Ranks' schedules (_one_rank), each built once."""

    def __init__(self, algo, collective, topo: Topology, n: int, first=None):
        self.args = (algo, collective, topo, n)
        self.built = {0: first} if first is not None else {}

    def __call__(self, r: int) -> _Rank:
        if r not in self.built:
            self.built[r] = _one_rank(*self.args, r)
        return self.built[r]


def _period(topo: Topology, rank: _Ranks, sig) -> tuple:
    """(S, ranks checked) for the least S up to MAX_PERIOD with sig(rank r) ==
    sig(rank r mod S) on the sampled ranks (module docstring), or None."""
    p = topo.p
    sigs = {}

    def of(r):  # each rank's signature once (one-shot's: 16383 steps at 16384 ranks)
        if r not in sigs:
            sigs[r] = sig(rank(r))
        return sigs[r]

    for s in (d for d in range(1, min(p, MAX_PERIOD) + 1) if p % d == 0 and 2 * d < p):
        if of(s) != of(0):  # the cheap refusal first: one more rank built
            continue
        checks = _samples(topo, s)
        if all(of(r) == of(r % s) for r in checks):
            return s, checks
    return None


def symmetric(algo, collective, topo: Topology, n: int, first=None, ranks=None):
    """Steps by the schedule's symmetry (module docstring), or None when no period
    up to MAX_PERIOD holds on the sampled ranks. `first`: rank 0's, if built;
    `ranks`: a _Ranks whose built schedules to reuse."""
    rank = ranks or _Ranks(algo, collective, topo, n, first)
    got = _period(topo, rank, _Rank.key)
    if got is None:
        return None
    s, checks = got
    return _grouped(topo, [rank(c).per_step() for c in range(s)], s, len(checks) + s)


def symmetric_messages(algo, collective, topo: Topology, n: int, first=None, ranks=None):
    """Steps by the symmetry of the messages alone (module docstring: one-shot), or
    None when no period up to MAX_PERIOD holds for them on the sampled ranks."""
    rank = ranks or _Ranks(algo, collective, topo, n, first)
    got = _period(topo, rank, lambda x: x.messages().key())
    if got is None:
        return None
    s, checks = got
    p = topo.p
    for r in [*range(min(p, ENDS)), *range(max(0, p - ENDS), p)]:
        rank(r)  # the ends of the rank order: where a fold's order starts and ends
    read = sorted(rank.built)
    work = [rank(r).work() for r in read]
    nsteps = max(len(w) for w in work)
    work = np.stack([np.pad(w, ((0, nsteps - len(w)), (0, 0))) for w in work])
    most = np.argmax(work[:, :, 0] * topo.gamma + work[:, :, 1] * topo.copy, axis=0)
    # the rank read that works most in each step
    envelope = list(map(tuple, work[most, np.arange(nsteps)].tolist()))
    reps = [rank(c).messages().per_step() for c in range(s)]
    got = _grouped(topo, reps, s, len(checks) + s, envelope)
    crowded = (", and by up to a host's ranks' work over its cores, its ranks outnumbering "
               "them") if topo.per_host > (topo.cores or topo.per_host) else ""
    got.how = (f"symmetry of the messages: rank r's messages are rank r mod {s}'s moved by "
               f"r - r mod {s} (checked on {len(checks) + s} ranks), but not what a rank "
               f"reduces or copies; each step charges every rank the most any of the "
               f"{len(read)} ranks read (the first and last {ENDS} among them) reduces and "
               f"copies there (exact where that rank's messages cost as much as any "
               f"rank's in the step, else high by at most that work{crowded}); "
               f"{len(got.counts) - bool(topo.fingerprint and p > 1)} kinds of step, ranks "
               f"0..{got.period - 1} priced for all {p}")
    return got


def _grouped(topo: Topology, reps: list, s: int, checked: int, envelope=None) -> Steps:
    """Steps of a schedule with period s (reps: ranks 0..s-1's), the steps whose
    ranks move alike grouped, priced for ranks 0..L-1 (L = lcm(s, the topology's
    period)). `envelope`: (reduced, copied) elements a step charged to every rank as
    a local reduction and copy (symmetric_messages; reps then hold messages only)."""
    p = topo.p
    period = lcm(s, topo.period())
    nsteps = max(max(len(x) for x in reps), len(envelope or ()))
    index, counts, entries = {}, [], []
    header = bool(topo.fingerprint and p > 1)
    for st in range(nsteps):
        key = tuple(x[st] if st < len(x) else () for x in reps)
        if envelope is not None:
            key += (envelope[st] if st < len(envelope) else (0, 0),)
        g = index.get(key)
        if g is None:
            g = index[key] = len(counts) + header
            counts.append(0)
            entries += [(g, c, k, off, el) for c, items in enumerate(key[:s])
                        for k, off, el in items]
            if envelope is not None:
                red, cop = key[s]
                entries += [(g, c, k, 0, el) for c in range(s)
                            for k, el in ((LOCAL_REDUCE, red), (LOCAL_COPY, cop)) if el]
        counts[g - header] += 1
    per = period // s  # ranks of each class among 0..period-1
    if len(entries) * per > FULL_ROWS:
        raise TooLarge(f"{len(counts)} kinds of step, each priced for the {period} ranks of "
                       f"the topology's period: {len(entries) * per:.2g} transfers (the "
                       f"simulator prices up to {FULL_ROWS:.0e}); a topology of a shorter "
                       "period (fewer ranks a leaf or spine group) would let it read fewer")
    e = np.array(entries, dtype=np.int64).reshape(-1, 5)
    ranks = (e[:, 1:2] + s * np.arange(per)[None, :]).reshape(-1)
    rows = np.stack([np.repeat(e[:, 0], per), ranks,
                     (ranks + np.repeat(e[:, 3], per)) % p, np.repeat(e[:, 2], per),
                     np.repeat(e[:, 4], per)], axis=1)
    counts = np.array(([1] if header else []) + counts, dtype=np.int64)
    if header:
        rows = np.concatenate([_header_rows(rows, p, period), rows])
    how = (f"symmetry: rank r moves as rank r mod {s} does, moved by r - r mod {s} (checked "
           f"on {checked} ranks); {len(counts) - header} kinds of step, ranks 0..{period - 1} "
           f"priced for all {p}")
    return Steps(p, period, counts, rows, nsteps, how)


def read(algo, collective, topo: Topology, n: int) -> Steps:
    """The steps of algo's collective on topo: every rank's schedule when its table is
    small enough (FULL_ROWS) and quick to build (a Python function, or all-to-all's
    counts, is called once a rank: FULL_SECONDS at rank 0's pace), else by symmetry,
    else every rank's if small enough after all; TooLarge when neither."""
    p = topo.p
    t0 = time.perf_counter()
    first = _one_rank(algo, collective, topo, n, 0)
    per_rank = time.perf_counter() - t0
    estimate = p * len(first.rows)
    slow = (collective == "all_to_all" or not _C.is_builtin(algo)) and \
        p * per_rank > FULL_SECONDS
    if estimate <= FULL_ROWS and not slow:
        return every_rank(algo, collective, topo, n)
    ranks = _Ranks(algo, collective, topo, n, first)
    got = symmetric(algo, collective, topo, n, ranks=ranks)
    if got is not None:
        return got
    if estimate <= FULL_ROWS:
        return every_rank(algo, collective, topo, n)
    try:
        got = symmetric_messages(algo, collective, topo, n, ranks=ranks)
    except TooLarge as e:
        raise TooLarge(f"{algo} {collective} at p={p}, read by the symmetry of its "
                       f"messages: {e}") from None
    if got is not None:
        return got
    raise TooLarge(f"{algo} {collective} at p={p}: every rank's schedule is about "
                   f"{estimate:.2g} transfers (the simulator reads up to {FULL_ROWS:.0e} "
                   f"whole), and no period of its ranks up to {MAX_PERIOD} holds (rank r "
                   "moving as rank r mod S does, in its messages at least), which would "
                   "let it read a few")
