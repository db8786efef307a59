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
gives every other rank an error naming it. All-to-all is proved with this rank's
true counts and every other rank's drawn from ringcoll.check's default pattern
(a rank knows only its own), and its digest is taken at that pattern.
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
from .._modules import load_modules


def _checker():
    """ringcoll.check, imported when a schedule is first proved, not with this module:
    the package imports this module as it loads, and a checker imported then would
    run twice under `python -m ringcoll.check` (once as ringcoll.check, once as
    __main__: runpy's RuntimeWarning, and two ScheduleError classes)."""
    from .. import check

    return check

__all__ = ["Params", "Range", "Transfer", "Reduced", "Schedule", "AlgorithmError", "block",
           "split", "send", "recv_copy", "recv_reduce", "reduced", "register", "load_modules",
           "COLLECTIVES"]

# torch's names; c10d's (allreduce, reducescatter, allgather, alltoall) are accepted too.
COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "gather",
               "scatter", "all_to_all")
_TORCH = {"allreduce": "all_reduce", "reducescatter": "reduce_scatter",
          "allgather": "all_gather", "alltoall": "all_to_all"}
_C10D = {v: k for k, v in _TORCH.items()}
_KINDS = {"send": 0, "recv_copy": 1, "recv_reduce": 2}  # schedule.h's Kind


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


def recv_reduce(peer: int, r) -> Transfer:
    """Receive range r from peer and reduce it into place."""
    return Transfer("recv_reduce", peer, r[0], r[1])


def reduced(r) -> Reduced:
    """Marks range r complete on this rank after this step (a step's item)."""
    return Reduced(r[0], r[1])


@dataclass
class Schedule:
    """One rank's schedule: steps (each a list of transfers and reduced() marks),
    the range that holds the result, and scratch elements past n. `name` shows in
    logs, traces and errors (default: the algorithm's name)."""
    steps: list
    result: tuple
    scratch: int = 0
    name: str | None = None


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
    return {"name": sched.name or name, "result": tuple(sched.result),
            "scratch": sched.scratch, "steps": steps}


def _to_c(d: dict) -> tuple:
    """A checker's dict as bindings_algorithms.cc reads it."""
    return (d["name"], d["result"], d["scratch"],
            [([(_KINDS[k], q, b, e) for k, q, b, e in st["transfers"]], st["reduced"])
             for st in d["steps"]])


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

    def __init__(self, name: str, summary: str, builders: dict):
        self.name, self.summary, self.builders = name, summary, dict(builders)
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

    def _proved(self, collective, p, n, root, order, hosts, counts=None):
        scheds = self._every_rank(collective, p, n, root, order, hosts, counts)
        where = f"algorithm '{self.name}' {collective} p={p} n={n}"
        if collective in ("broadcast", "reduce", "gather", "scatter"):
            where += f" root={root}"
        check = _checker()
        try:
            check.check_schedules(scheds, collective, p, n, root, where, counts)
        except check.ScheduleError as e:
            raise AlgorithmError(f"{e} (refused by ringcoll.check before anything was "
                                 "sent)") from e
        return scheds

    @staticmethod
    def _digest(scheds) -> int:
        return zlib.crc32(repr([_to_c(s) for s in scheds]).encode()) or 1

    def prepare(self, collective, rank, p, n, root, order, hosts, send_counts, recv_counts):
        order = tuple(order) or tuple(range(p))
        hosts = tuple(hosts) or (0,) * p
        if collective == "all_to_all":
            # Proved in a world of this rank's true counts, the others' drawn from
            # the checker's pattern; digested at that pattern alone (a rank knows
            # only its own counts, and the digest must be the same on every rank).
            pattern = _checker().alltoall_counts(p, p + 1)
            counts = [list(row) for row in pattern]
            counts[rank] = list(send_counts)
            for s in range(p):
                counts[s][rank] = recv_counts[s]
            key = (collective, p, rank, order, hosts, tuple(send_counts), tuple(recv_counts))
            scheds = self._remember(key, lambda: self._proved(collective, p, n, root, order,
                                                             hosts, counts))
            probe = self._remember((collective, p, order, hosts), lambda: self._proved(
                collective, p, 0, root, order, hosts, pattern))
            return _to_c(scheds[rank]), self._digest(probe)
        key = (collective, p, n, root, order, hosts)
        scheds = self._remember(key, lambda: self._proved(collective, p, n, root, order, hosts))
        return _to_c(scheds[rank]), self._digest(scheds)

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


def register(name: str, collective: str, *, summary: str | None = None
             ) -> Callable[[Callable[[Params], Schedule]], Callable[[Params], Schedule]]:
    """Decorator: the function (Params -> Schedule) is algorithm `name`'s schedule
    for `collective` (torch's name: all_reduce, reduce_scatter, all_gather,
    broadcast, reduce, gather, scatter, all_to_all; c10d's are accepted). Register
    one function per collective the algorithm provides; an algorithm with an
    all-reduce provides barrier too. Defining a name again (a module imported
    again) replaces that collective's function for the process groups created
    afterwards. `summary`: one line for listings (default: the function's
    docstring's first line). Returns the function unchanged."""
    coll = _torch_name(collective)

    def add(fn):
        old = _DEFINED.get(name)
        builders = dict(old.builders) if old else {}
        builders[coll] = fn
        doc = (fn.__doc__ or "").strip().splitlines()
        text = summary or (old.summary if old else "") or (doc[0] if doc else name)
        definition = _Definition(name, text, builders)
        _C.register_algorithm(name, text, [_C10D.get(c, c) for c in builders], definition)
        _DEFINED[name] = definition
        model = sys.modules.get("ringcoll.model")
        if model is not None:  # its cached tables may hold an earlier definition's
            model.transfers.cache_clear()
            model.layers_of.cache_clear()
        return fn

    return add


# The algorithms ringcoll ships written in Python, registered with the package.
SHIPPED = ("swing", "bruck", "twolevel")
from . import swing, bruck, twolevel  # noqa: E402,F401  (after the API they use)
