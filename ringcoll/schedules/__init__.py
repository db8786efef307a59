"""Algorithms written in Python: one file, no rebuild, used like a built-in one.

    from ringcoll.schedules import Schedule, block, recv_reduce, reduced, register, send

    @register("myalgo", "all_reduce")
    def my_all_reduce(prm):            # Params -> this rank's Schedule
        ...
        return Schedule(steps, result=(0, prm.n))

Once its module is imported, the name works wherever a built-in one does:
RINGCOLL_ALGO=myalgo (or per collective and size), ringcoll.Options(algo=...),
ringcoll.algorithms(), python -m ringcoll.check / ringcoll.sim / ringcoll.bench
--algo, the cost model and RINGCOLL_ALGO=auto, RINGCOLL_DEBUG and RINGCOLL_TRACE;
on CPU tensors over every transport and on CUDA tensors. RINGCOLL_ALGO_MODULES
(comma-separated module names or .py paths) makes every rank's process import the
module when it creates a process group (torchrun's workers too), and the command
line tools import it when they start. docs/ALGORITHMS.md walks through one.

The vocabulary is csrc/schedules/schedule.h's, with its semantics unchanged:

  * the buffer is the n elements every rank works on in place; a range is a
    half-open (begin, end) of it; block(n, k, i) and split(range, k, i) cut it into
    near-equal parts that nest (the first size % k parts have one element more);
  * a step is a list of transfers, each send, recv_copy or recv_reduce of one range
    with one peer (the rank itself: a local copy or reduce, paired with a send to
    itself in the same step), plus reduced(range): where this rank first holds the
    complete reduction (AVG divides there, once per element, before it is sent on);
  * a send carries the range as it is after the rank's earlier steps; within a step
    no range is written twice and none is both sent and written; the k-th send
    from a to b in a step pairs with the k-th receive on b from a in that step, of
    the same size;
  * Schedule.result is where the output lies on this rank; Schedule.scratch > 0
    extends the buffer past n, its first min(scratch, n) elements a copy of
    [0, n) taken before step 0;
  * registry.h's contract of each collective (which block a rank starts or ends
    with) holds, and every rank of an all-reduce ends with the same bits.

What ringcoll does with a schedule (ringcoll/schedules has no other machinery):
the backend asks for it once per (collective, p, n, rank, root, order, hosts,
counts), on the thread that issues the collective; builds every rank's schedule of
that call and proves them with ringcoll.check before any byte moves (a refusal
names the algorithm, collective, rank and step); hashes them into a digest that
the call's fingerprint carries, so ranks whose definitions of a name differ raise
instead of exchanging wrong bytes; and keeps the result with its compiled plan, so
that from the second call on it costs what a built-in algorithm costs. An
exception in the function raises on that rank and, through the group's store,
gives every other rank an error naming it. All-to-all: an algorithm that declares
equal splits only (Applies(equal_splits=True): a forwarding one, Bruck's) is proved
and digested at the call's very counts (m everywhere, which a rank whose own splits
are equal may infer when every rank checks its own); any other is proved with this
rank's true counts and every other rank's assumed (ringcoll.check's uneven pattern:
a rank knows only its own), a refusal saying so, and digested at that pattern.
"""

from __future__ import annotations

import collections
import sys
import threading
import traceback
import zlib
from dataclasses import dataclass
from typing import Callable, NamedTuple

from .. import _C
from .._declared import set_equal_splits, sizes_text
from .._modules import load_modules


def _checker():
    """ringcoll.check, imported when a schedule is first proved, not with this module:
    the package imports this module as it loads, and a checker imported then would
    run twice under `python -m ringcoll.check` (once as ringcoll.check, once as
    __main__: runpy's RuntimeWarning, and two ScheduleError classes)."""
    from .. import check

    return check

__all__ = ["Params", "Range", "Transfer", "Reduced", "Schedule", "AlgorithmError", "Applies",
           "POWERS_OF_TWO", "block", "split", "alltoall_blocks", "send", "recv_copy",
           "recv_reduce", "reduced",
           "register", "load_modules", "COLLECTIVES"]

# torch's names; c10d's (allreduce, reducescatter, allgather, alltoall) are accepted too.
COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "gather",
               "scatter", "all_to_all")
_TORCH = {"allreduce": "all_reduce", "reducescatter": "reduce_scatter",
          "allgather": "all_gather", "alltoall": "all_to_all"}
_C10D = {v: k for k, v in _TORCH.items()}
_KINDS = {"send": 0, "recv_copy": 1, "recv_reduce": 2, "recv_reduce_first": 3}  # schedule.h's


class AlgorithmError(RuntimeError):
    """An algorithm written in Python failed: its function raised, returned
    something that is not a schedule, or the checker refused its schedules. The
    message names the algorithm, the collective and the rank."""


class Range(NamedTuple):
    """A half-open element range [begin, end) of the buffer."""
    begin: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.begin


def split(r, k: int, i: int) -> Range:
    """Part i of range r cut into k near-equal parts (schedule.h's split): the first
    r.size % k parts have one element more; parts may be empty."""
    b, e = r
    if not 0 <= i < k:
        raise ValueError(f"split: part {i} of {k}")
    base, extra = divmod(e - b, k)
    begin = b + i * base + min(i, extra)
    return Range(begin, begin + base + (1 if i < extra else 0))


def block(n: int, k: int, i: int) -> Range:
    """Block i of [0, n) cut into k blocks (schedule.h's blockRange)."""
    return split((0, n), k, i)


def alltoall_blocks(prm) -> tuple[list, list]:
    """All-to-all's buffer on this rank (registry.h): (sends, receives), p Ranges
    each. Send block d holds what this rank sends rank d (send_counts[d] elements);
    receive block s is where what rank s sends it lands (recv_counts[s]); the send
    blocks come first, in rank order, then the receive blocks. The own blocks
    (send block rank, receive block rank) are copied by the job before step 0: a
    schedule neither sends nor writes them."""
    sends, at = [], 0
    for c in prm.send_counts:
        sends.append(Range(at, at + c))
        at += c
    recvs = []
    for c in prm.recv_counts:
        recvs.append(Range(at, at + c))
        at += c
    return sends, recvs


class Transfer(NamedTuple):
    """One send or receive of [begin, end) with `peer` (the checker's form)."""
    kind: str
    peer: int
    begin: int
    end: int


class Reduced(NamedTuple):
    """[begin, end) holds the complete reduction on this rank after this step."""
    begin: int
    end: int


def send(peer: int, r) -> Transfer:
    """Send range r to peer."""
    return Transfer("send", peer, r[0], r[1])


def recv_copy(peer: int, r) -> Transfer:
    """Receive range r from peer and store it in place."""
    return Transfer("recv_copy", peer, r[0], r[1])


def recv_reduce(peer: int, r, incoming_first: bool = False) -> Transfer:
    """Receive range r from peer and reduce it into place: buffer = buffer OP
    incoming, or with incoming_first buffer = incoming OP buffer. The order is part
    of the result's bits (max(+0, -0), NaN payloads), which every rank of an
    all-reduce must fold alike: two partners that each hold one half of a sum (the
    lower rank's and the upper rank's) both compute lower OP upper when the lower
    rank reduces buffer-first and the upper rank incoming-first."""
    return Transfer("recv_reduce_first" if incoming_first else "recv_reduce", peer, r[0], r[1])


def reduced(r) -> Reduced:
    """Marks range r complete on this rank after this step (a step's item)."""
    return Reduced(r[0], r[1])


POWERS_OF_TWO = "powers of two"
# A predicate given as Applies' world_sizes is asked for every p of 1..this when the
# algorithm is registered (the extension's registry holds the served sizes as a
# list: the backend refuses a call before any byte moves without calling Python);
# larger worlds are not served. A plain-Python test of all of them takes 0.01-0.3 s
# here; a bound in the predicate (p <= 4096 and ...) makes it cheaper.
PREDICATE_MAX_P = 1 << 16


def _bytes_text(b: int) -> str:
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift} {unit}"
    return f"{b} B"


def _predicate_text(fn) -> str:
    """What a world-size predicate is called in messages: its docstring's first line
    ("composite p"), else "where <name>(p)", else "where a predicate holds" (a
    lambda)."""
    doc = (getattr(fn, "__doc__", None) or "").strip().splitlines()
    name = getattr(fn, "__name__", "")
    if doc and name != "<lambda>":
        return doc[0].rstrip(".")
    return f"where {name}(p)" if name and name != "<lambda>" else "where a predicate holds"


def _served(sizes) -> tuple:
    """The world sizes an Applies' world_sizes names, sorted: a predicate asked for p =
    1..PREDICATE_MAX_P, or ints and ranges (any iterable of them). ValueError if it
    is neither, or names no size >= 1."""
    if callable(sizes):
        try:
            served = tuple(p for p in range(1, PREDICATE_MAX_P + 1) if sizes(p))
        except Exception as e:  # noqa: BLE001 - any error of the user's predicate
            raise ValueError(f"Applies: world_sizes predicate {_predicate_text(sizes)!r} "
                             f"raised {type(e).__name__}: {e}") from e
        if not served:
            raise ValueError(f"Applies: world_sizes predicate {_predicate_text(sizes)!r} "
                             f"holds for no p of 1..{PREDICATE_MAX_P}")
        return served
    try:
        items = list(sizes)
    except TypeError:
        items = None
    flat = set()
    for x in items or ():
        if isinstance(x, range):
            flat.update(x)
        elif _int(x):
            flat.add(x)
        else:
            items = None
            break
    if isinstance(sizes, str) or not items or not flat or min(flat) < 1:
        raise ValueError(f"Applies: world_sizes {sizes!r} is neither None, POWERS_OF_TWO, a "
                         "predicate nor world sizes >= 1 (ints and ranges)")
    return tuple(sorted(flat))


@dataclass(frozen=True, repr=False)
class Applies:
    """Where an algorithm's collective applies (csrc/schedules/registry.h's Applies),
    given to register(..., applies=Applies(...)); the default is everywhere.

    world_sizes: None (every p), POWERS_OF_TWO, the world sizes served (ints and
    ranges, in any iterable: range(2, 4097), {4, 8}, [range(2, 9), 16]), or a
    predicate p -> bool (asked for p = 1..PREDICATE_MAX_P when registered; its
    docstring's first line, or its name, says what it is in messages); messages show
    a few words however many sizes are served ("world sizes 2-65536"); min_bytes <=
    bytes < max_bytes (None: no bound), bytes of the collective's buffer as
    RINGCOLL_ALGO's ranges count them (the tensor, the whole reduce-scatter input,
    the whole all-gather output); count_multiple: Params.n a multiple of it; roots:
    None (every root) or the roots served (broadcast, reduce, gather, scatter);
    equal_splits (all-to-all only): every rank sends every rank the same count, the
    contract of an algorithm that forwards blocks (Bruck's), whose schedule on one
    rank depends on the others' counts.

    Every tool honours it: a process group refuses a call it does not serve, on
    every rank before anything is sent, naming the algorithm, the collective, p, n,
    the bytes and this declaration; RINGCOLL_ALGO=auto and the cost model leave the
    algorithm out where it does not apply (and, having only byte ranges to choose by,
    wherever it declares counts); ringcoll.check, .sim and .bench skip what it does
    not serve and say so. The function is never called where it does not apply.
    equal_splits is the exception to "before anything is sent on every rank": only a
    rank knows its own counts, so a rank whose splits are not equal fails the call
    when it prepares it, and the others learn why through the group's store (the
    group is then unusable, as after an exception in the function); every rank's
    schedule is proved at the call's very counts."""
    world_sizes: object = None
    min_bytes: int = 0
    max_bytes: int | None = None
    count_multiple: int = 1
    roots: object = None
    equal_splits: bool = False

    def __post_init__(self):
        sizes, text = self.world_sizes, None
        if sizes is not None and sizes != POWERS_OF_TWO:
            served = _served(sizes)
            text = (f"{_predicate_text(sizes)}: {sizes_text(served)}"
                    if callable(sizes) else sizes_text(served))
            object.__setattr__(self, "world_sizes", served)
        object.__setattr__(self, "_world_text", text)
        if not _int(self.min_bytes) or self.min_bytes < 0:
            raise ValueError(f"Applies: min_bytes {self.min_bytes!r} is not a whole number >= 0")
        if self.max_bytes is not None and (not _int(self.max_bytes)
                                           or self.max_bytes <= self.min_bytes):
            raise ValueError(f"Applies: max_bytes {self.max_bytes!r} is not a whole number "
                             f"above min_bytes {self.min_bytes}")
        if not _int(self.count_multiple) or self.count_multiple < 1:
            raise ValueError(f"Applies: count_multiple {self.count_multiple!r} is not a whole "
                             "number >= 1")
        if self.roots is not None:
            try:
                roots = tuple(sorted(set(self.roots)))
            except TypeError:
                roots = ()
            if not roots or not all(_int(r) and r >= 0 for r in roots):
                raise ValueError(f"Applies: roots {self.roots!r} is neither None nor ranks >= 0")
            object.__setattr__(self, "roots", roots)
        if not isinstance(self.equal_splits, bool):
            raise ValueError(f"Applies: equal_splits {self.equal_splits!r} is not True or False")

    def describe(self) -> str:
        """The declaration in words, as errors and listings show it: a few words
        however many world sizes it serves."""
        parts = []
        if self.world_sizes == POWERS_OF_TWO:
            parts.append("world sizes powers of two")
        elif self.world_sizes is not None:
            parts.append(f"world sizes {self._world_text}")
        if self.min_bytes:
            parts.append(f"from {_bytes_text(self.min_bytes)}")
        if self.max_bytes is not None:
            parts.append(f"below {_bytes_text(self.max_bytes)}")
        if self.count_multiple > 1:
            parts.append(f"counts multiples of {self.count_multiple}")
        if self.roots is not None:
            parts.append("root " + ", ".join(map(str, self.roots)))
        if self.equal_splits:
            parts.append("equal splits only")
        return "; ".join(parts) or "everywhere"

    def __repr__(self) -> str:
        return f"Applies({self.describe()})"

    def _to_c(self) -> tuple:
        """As bindings_algorithms.cc reads it (equal_splits stays on this side:
        _Definition.prepare enforces it, and ringcoll._declared tells the checker)."""
        sizes = self.world_sizes
        return (list(sizes) if sizes not in (None, POWERS_OF_TWO) else [],
                sizes == POWERS_OF_TWO, self.min_bytes, self.max_bytes, self.count_multiple,
                self.describe(), list(self.roots or []))


@dataclass
class Schedule:
    """One rank's schedule: steps (each a list of transfers and reduced() marks),
    the range that holds the result, and scratch elements past n. `name` shows in
    logs, traces and errors (default: the algorithm's name).

    scratch: elements [n, n + scratch) the job provides; they start as a copy of
    [0, n) (its first min(scratch, n) elements), or, with empty_scratch, empty
    (nothing is copied: each element is written before it is read). Transfers and
    reduced() marks may address the scratch (each range within [0, n) or within the
    scratch), and `result` may lie in it: then a last step copies it to where the
    collective's output is (a local copy, no message)."""
    steps: list
    result: tuple
    scratch: int = 0
    name: str | None = None
    empty_scratch: bool = False


@dataclass(frozen=True)
class Params:
    """What a schedule is computed for (schedule.h's Params).

    order: the ring order, position -> rank, ranks of one host next to each other
    (the identity when the group gives none); hosts: each rank's host, numbered in
    ring order (all 0 on one host); send_counts and recv_counts: all-to-all's
    elements to and from each rank (n is their total), empty otherwise."""
    rank: int
    size: int
    n: int
    root: int = 0
    order: tuple = ()
    hosts: tuple = ()
    send_counts: tuple = ()
    recv_counts: tuple = ()

    def __post_init__(self):
        if not self.order:
            object.__setattr__(self, "order", tuple(range(self.size)))
        if not self.hosts:
            object.__setattr__(self, "hosts", (0,) * self.size)


def _torch_name(collective: str) -> str:
    name = _TORCH.get(collective, collective)
    if name not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r} (known: {', '.join(COLLECTIVES)})")
    return name


def _where(name, collective, prm: Params) -> str:
    root = f", root {prm.root}" if collective in ("broadcast", "reduce", "gather",
                                                 "scatter") else ""
    return f"algorithm '{name}' {collective} for rank {prm.rank} (p={prm.size}, n={prm.n}{root})"


def _int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _pair(x) -> bool:
    try:
        b, e = x
    except (TypeError, ValueError):
        return False
    return _int(b) and _int(e) and 0 <= b <= e


def _normalize(sched, name, collective, prm: Params) -> dict:
    """The user's Schedule as the checker's dict, or an AlgorithmError saying what
    is not a schedule, and where."""
    at = _where(name, collective, prm)
    if not isinstance(sched, Schedule):
        raise AlgorithmError(f"{at}: the function returned {type(sched).__name__}, not a "
                             "ringcoll.schedules.Schedule")
    if not _pair(sched.result):
        raise AlgorithmError(f"{at}: result {sched.result!r} is not a range (begin, end) of "
                             "whole numbers, 0 <= begin <= end")
    if not _int(sched.scratch) or sched.scratch < 0:
        raise AlgorithmError(f"{at}: scratch {sched.scratch!r} is not a whole number >= 0")
    if not isinstance(sched.empty_scratch, bool):
        raise AlgorithmError(f"{at}: empty_scratch {sched.empty_scratch!r} is not True or False")
    steps = []
    for s, step in enumerate(sched.steps):
        transfers, marks = [], []
        try:
            items = list(step)
        except TypeError:
            raise AlgorithmError(f"{at} step {s}: {step!r} is not a list of transfers") from None
        for item in items:
            if isinstance(item, Transfer) and item.kind in _KINDS and _int(item.peer) and \
                    _pair(item[2:]):
                transfers.append(tuple(item))
            elif isinstance(item, Reduced) and _pair(item):
                marks.append(tuple(item))
            else:
                raise AlgorithmError(
                    f"{at} step {s}: {item!r} is not send(peer, range), recv_copy(...), "
                    "recv_reduce(...) or reduced(range) with whole numbers, "
                    "0 <= begin <= end")
        steps.append({"transfers": transfers, "reduced": marks})
    result = tuple(sched.result)
    place = _output(collective, prm)
    if result != place and sched.scratch and prm.n <= result[0] and \
            result[1] <= prm.n + sched.scratch and result[1] - result[0] == place[1] - place[0]:
        # The result lies in the scratch: a last step copies it to the output's place.
        steps.append({"transfers": [("send", prm.rank) + result,
                                    ("recv_copy", prm.rank) + place], "reduced": []})
        result = place
    return {"name": sched.name or name, "result": result, "scratch": sched.scratch,
            "scratch_copy": not sched.empty_scratch, "steps": steps}


def _output(collective, prm: Params) -> tuple:
    """Where the collective's output lies in this rank's buffer (registry.h)."""
    if collective in ("reduce_scatter", "scatter"):
        return tuple(block(prm.n, prm.size, prm.rank))
    if collective in ("reduce", "gather"):
        return (0, prm.n) if prm.rank == prm.root else (0, 0)
    if collective == "all_to_all":
        return (sum(prm.send_counts), prm.n)
    return (0, prm.n)


def _to_c(d: dict) -> tuple:
    """A checker's dict as bindings_algorithms.cc reads it."""
    return (d["name"], d["result"], d["scratch"],
            [([(_KINDS[k], q, b, e) for k, q, b, e in st["transfers"]], st["reduced"])
             for st in d["steps"]], d.get("scratch_copy", True))


def _counts_text(counts, most: int = 8) -> str:
    """All-to-all counts for a message: their list, cut after `most`."""
    counts = list(counts)
    if len(counts) <= most:
        return str(counts)
    return "[" + ", ".join(map(str, counts[:most])) + f", ... ({len(counts)} counts)]"


def _ranks_text(ranks) -> str:
    """'rank 1', 'ranks 0, 2-3'."""
    return ("rank " if len(ranks) == 1 else "ranks ") + sizes_text(ranks)


def _user_frame(e: BaseException) -> str:
    frames = traceback.extract_tb(e.__traceback__)
    if not frames:
        return ""
    f = frames[-1]
    return f" (at {f.filename}:{f.lineno} in {f.name})"


class _Definition:
    """One registration of a name: its functions per collective. The extension
    calls build and prepare (bindings_algorithms.cc says what they return)."""

    _PREPARED = 16  # calls remembered here, every rank's schedules each

    def __init__(self, name: str, summary: str, builders: dict, applies: dict | None = None):
        self.name, self.summary, self.builders = name, summary, dict(builders)
        self.applies = {c: (applies or {}).get(c) or Applies() for c in builders}
        self._prepared = collections.OrderedDict()
        self._lock = threading.Lock()

    def schedule(self, collective: str, prm: Params) -> dict:
        """The user's schedule for prm, checked for form only."""
        fn = self.builders[collective]
        try:
            sched = fn(prm)
        except Exception as e:  # noqa: BLE001 - any error of the user's function
            raise AlgorithmError(
                f"{_where(self.name, collective, prm)}: the function raised "
                f"{type(e).__name__}: {e}{_user_frame(e)}") from e
        return _normalize(sched, self.name, collective, prm)

    def build(self, collective, rank, p, n, root, order, hosts, send_counts, recv_counts):
        prm = Params(rank, p, n, root, tuple(order), tuple(hosts), tuple(send_counts),
                     tuple(recv_counts))
        return _to_c(self.schedule(collective, prm))

    def _every_rank(self, collective, p, n, root, order, hosts, counts=None):
        """Every rank's schedule dict of one call; counts: the all-to-all matrix
        (each rank's n is its row and column's total)."""
        if collective == "all_to_all":
            prms = [Params(q, p, sum(counts[q]) + sum(c[q] for c in counts), root, order,
                           hosts, tuple(counts[q]), tuple(c[q] for c in counts))
                    for q in range(p)]
        else:
            prms = [Params(q, p, n, root, order, hosts) for q in range(p)]
        return [self.schedule(collective, prm) for prm in prms]

    def _proved(self, collective, p, n, root, order, hosts, counts=None, assumed=""):
        """Every rank's schedule of one call, proved by the checker; `assumed`: what
        the refusal adds to say which ranks' counts were assumed (all-to-all)."""
        scheds = self._every_rank(collective, p, n, root, order, hosts, counts)
        where = f"algorithm '{self.name}' {collective} p={p} n={n}"
        if collective in ("broadcast", "reduce", "gather", "scatter"):
            where += f" root={root}"
        check = _checker()
        try:
            check.check_schedules(scheds, collective, p, n, root, where, counts)
        except check.ScheduleError as e:
            raise AlgorithmError(f"{e} (refused by ringcoll.check before anything was "
                                 f"sent{assumed})") from e
        return scheds

    @staticmethod
    def _digest(scheds) -> int:
        return zlib.crc32(repr([_to_c(s) for s in scheds]).encode()) or 1

    def prepare(self, collective, rank, p, n, root, order, hosts, send_counts, recv_counts):
        order = tuple(order) or tuple(range(p))
        hosts = tuple(hosts) or (0,) * p
        if collective == "all_to_all" and self.applies[collective].equal_splits:
            return self._prepare_equal_splits(rank, p, root, order, hosts, send_counts,
                                              recv_counts)
        if collective == "all_to_all":
            return self._prepare_assumed_counts(rank, p, n, root, order, hosts, send_counts,
                                                recv_counts)
        key = (collective, p, n, root, order, hosts)
        scheds = self._remember(key, lambda: self._proved(collective, p, n, root, order, hosts))
        return _to_c(scheds[rank]), self._digest(scheds)

    def _prepare_equal_splits(self, rank, p, root, order, hosts, send_counts, recv_counts):
        """An all-to-all that declares equal splits: if this rank sends and receives
        m elements to and from every rank, and every rank does (each checks its
        own), the call's count matrix is m everywhere, so every rank's schedule is
        proved, and digested, at the call's very counts. A rank whose splits are
        not equal raises here: its call fails, and the other ranks learn why
        through the group's store."""
        m = send_counts[0] if p else 0
        if any(c != m for c in list(send_counts) + list(recv_counts)):
            raise AlgorithmError(
                f"algorithm '{self.name}' all_to_all for rank {rank} (p={p}): it declares "
                f"equal splits only, but this rank sends {_counts_text(send_counts)} and "
                f"receives {_counts_text(recv_counts)} elements: name another algorithm "
                "for an uneven all-to-all (RINGCOLL_ALGO='alltoall=direct', say)")
        counts = [[m] * p for _ in range(p)]
        scheds = self._remember(("all_to_all", p, m, order, hosts), lambda: self._proved(
            "all_to_all", p, 2 * p * m, root, order, hosts, counts))
        return _to_c(scheds[rank]), self._digest(scheds)

    def _prepare_assumed_counts(self, rank, p, n, root, order, hosts, send_counts,
                                recv_counts):
        """Any other all-to-all: proved in a world of this rank's true counts, the
        others' assumed (drawn from the checker's uneven pattern), and digested at
        that pattern alone (a rank knows only its own counts, and the digest must be
        the same on every rank). A refusal says which counts were assumed: a
        schedule that is right only for some counts (a forwarding one, right for
        equal splits) is refused here for the others' invented counts, and its
        author learns to declare what it serves."""
        pattern = _checker().alltoall_counts(p, p + 1)
        counts = [list(row) for row in pattern]
        counts[rank] = list(send_counts)
        for s in range(p):
            counts[s][rank] = recv_counts[s]
        others = [q for q in range(p) if q != rank]
        assumed = (f"; rank {rank}'s counts are this call's, and the schedules of "
                   f"{_ranks_text(others)} were built from assumed counts, "
                   f"ringcoll.check's uneven pattern alltoall_counts({p}, {p + 1}) (a rank "
                   "knows only its own counts): an algorithm right for equal splits only "
                   "declares it, Applies(equal_splits=True), and is proved at the call's "
                   "counts")
        key = ("all_to_all", p, rank, order, hosts, tuple(send_counts), tuple(recv_counts))
        scheds = self._remember(key, lambda: self._proved("all_to_all", p, n, root, order,
                                                         hosts, counts, assumed))
        probe_note = (f"; every rank's schedule was built from assumed counts, "
                      f"ringcoll.check's uneven pattern alltoall_counts({p}, {p + 1}), to "
                      "digest the same schedules on every rank: an algorithm right for equal "
                      "splits only declares it, Applies(equal_splits=True)")
        probe = self._remember(("all_to_all", p, order, hosts), lambda: self._proved(
            "all_to_all", p, 0, root, order, hosts, pattern, probe_note))
        return _to_c(scheds[rank]), self._digest(probe)

    def _remember(self, key, make):
        """The memo's entry for key, else make()'s (remembered). Threads that issue
        collectives at once share the memo: its lock guards the lookup and the
        insertion, never make() (the user's function runs unlocked: it may take
        long, or call back into ringcoll); two threads that miss at once both make
        the entry, and the later one's replaces the earlier (they are equal)."""
        with self._lock:
            got = self._prepared.get(key)
            if got is not None:
                self._prepared.move_to_end(key)
                return got
        got = make()
        with self._lock:
            self._prepared[key] = got
            self._prepared.move_to_end(key)
            while len(self._prepared) > self._PREPARED:
                self._prepared.popitem(last=False)
        return got


_DEFINED: dict[str, _Definition] = {}


def register(name: str, collective: str, *, summary: str | None = None,
             applies: Applies | None = None
             ) -> Callable[[Callable[[Params], Schedule]], Callable[[Params], Schedule]]:
    """Decorator: the function (Params -> Schedule) is algorithm `name`'s schedule
    for `collective` (torch's name: all_reduce, reduce_scatter, all_gather,
    broadcast, reduce, gather, scatter, all_to_all; c10d's are accepted). Register
    one function per collective the algorithm provides; an algorithm with an
    all-reduce provides barrier too. Defining a name again (a module imported
    again) replaces that collective's function for the process groups created
    afterwards. `summary`: one line for listings (default: the function's
    docstring's first line). `applies`: where this collective of the algorithm applies
    (Applies; default everywhere). Returns the function unchanged."""
    coll = _torch_name(collective)
    if applies is not None and not isinstance(applies, Applies):
        raise TypeError(f"register({name!r}, {collective!r}): applies must be a "
                        f"ringcoll.schedules.Applies, got {type(applies).__name__}")
    if applies is not None and applies.equal_splits and coll != "all_to_all":
        raise ValueError(f"register({name!r}, {collective!r}): equal_splits is all_to_all's "
                         "declaration (every rank sends every rank the same count)")

    def add(fn):
        old = _DEFINED.get(name)
        builders = dict(old.builders) if old else {}
        builders[coll] = fn
        declared = dict(old.applies) if old else {}
        declared[coll] = applies or Applies()
        doc = (fn.__doc__ or "").strip().splitlines()
        text = summary or (old.summary if old else "") or (doc[0] if doc else name)
        definition = _Definition(name, text, builders, declared)
        _C.register_algorithm(name, text, [_C10D.get(c, c) for c in builders], definition,
                              [definition.applies[c]._to_c() for c in builders])
        _DEFINED[name] = definition
        set_equal_splits(name, [c for c in builders if definition.applies[c].equal_splits])
        model = sys.modules.get("ringcoll.model")
        if model is not None:  # its cached tables may hold an earlier definition's
            model.transfers.cache_clear()
            model.layers_of.cache_clear()
        return fn

    return add


# The algorithms ringcoll ships written in Python, registered with the package.
SHIPPED = ("swing", "bruck", "twolevel")
from . import swing, bruck, twolevel  # noqa: E402,F401  (after the API they use)
