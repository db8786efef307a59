"""The generic schedule checker: proves, with no processes and no transport, that an
algorithm's schedule does what its collective promises.

    from ringcoll import check
    check.check("ring", "all_reduce", p=6, n=20)      # raises ScheduleError if wrong

    python -m ringcoll.check biring               # every collective it provides,
                                                  # p = 1..64 (main() below)

It asks the extension for every rank's schedule (csrc/schedules/schedule.h: steps of
transfers, each a send or a receive that is copied or reduced into place, of an
element range with one peer) and walks all ranks step by step on symbolic data.
Each element holds (position, contributors, finishes, fold): the buffer position it
stands for, the set of ranks whose input it contains (a bitmask, any world size),
how many times a finishing pass (AVG's division) was applied to it, and how it was
folded (a rank's input, or (accumulator, arrival) of a reduce). A send carries the
sender's elements as they were before the step; a receive-copy replaces, a
receive-reduce merges two values of the same position. Elements are kept as runs
(consecutive elements whose positions follow each other and whose other fields
agree), so the work grows with the schedule's transfers, not with n: the backend
proves a Python algorithm's schedules at the very n of the call
(ringcoll/schedules), 8 B or 1 GiB. A message names the first element that breaks
a rule. It checks:

  structure  peers in range, ranges inside the buffer (a transfer with the rank
             itself is local: its sends pair with its receives like any peer's);
             within a step no two writes overlap and no range is both sent and
             written; the k-th non-empty send from a to b in step s has the size
             of the k-th non-empty receive on b from a in step s (the executor
             pairs them in that order);
  data       nothing is sent that the sender does not hold; a reduce never counts
             a rank twice, never mixes two positions and never merges a value
             that was already finished; a range marked reduced holds every rank's
             contribution there and is finished exactly once;
  result     all-reduce: every rank, every element holds all p contributions,
             finished once; reduce-scatter: rank r's result is block r, likewise;
             all-gather: every rank holds every block, each from its owner;
             broadcast: every rank holds the root's elements; reduce: the root
             holds all p contributions everywhere, finished once, and the other
             ranks' result is empty; gather: the root holds every block, each
             from its owner, the others' result is empty; scatter: rank r's result
             is block r, the root's; all-to-all: rank r's result is its receive
             blocks, block s holding what rank s sent it;
  same bits  all-reduce: every rank folded every element the same way (the same
             operands in the same order), so floating-point sums agree bit for bit.

A schedule's scratch (csrc/schedules/schedule.h) extends its buffer past n with a copy
of the first elements, taken before step 0, and holds nothing past that copy (nothing
at all when it starts empty: scratch_copy False); transfers and reduced marks lie in
the buffer or in the scratch, never across their boundary. A receive-reduce folds
buffer OP incoming (recv_reduce) or incoming OP buffer (recv_reduce_first), and the
fold trees record which, so the same-bits rule compares operand orders too. All-to-all's buffer is each rank's
send blocks then its receive blocks, sized by a p x p count matrix (`counts[s][d]`
elements from s to d; alltoall_counts(p, n) by default, uneven, with empty
blocks); its own block is copied by the job, so it starts in place here.
"""

from __future__ import annotations

import argparse
import bisect
import sys

from . import _C
from ._declared import equal_splits, sizes_text
from ._modules import load_from_environment

# torch's names, as the benchmark, the model and the simulator print them; c10d's
# (allreduce, reducescatter, allgather, alltoall) are accepted too.
COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "gather",
               "scatter", "all_to_all")
REDUCING = ("all_reduce", "reduce_scatter", "reduce")
_C10D_NAMES = {"allreduce": "all_reduce", "reducescatter": "reduce_scatter",
               "allgather": "all_gather", "alltoall": "all_to_all"}


def torch_name(collective: str) -> str:
    """A collective by torch's name, given torch's or c10d's."""
    return _C10D_NAMES.get(collective, collective)
_WRITES = ("recv_copy", "recv_reduce", "recv_reduce_first")


class ScheduleError(AssertionError):
    """A schedule broke its collective's contract; the message says where."""


class NotApplicable(ValueError):
    """The algorithm declares (ringcoll.schedules.Applies, registry.h's Applies) that
    its collective does not serve this world size or count; the message names the
    algorithm, the collective, the call and the declaration."""


def refusal(algo, collective, p, n=None, nbytes=None, root=None) -> str:
    """'' when algo's collective applies to p ranks (and n elements, nbytes bytes,
    root, when given), else why not (the registry's one line)."""
    return _C.refusal(algo, torch_name(collective), p, -1 if n is None else n,
                      -1 if nbytes is None else nbytes, -1 if root is None else root)


def block_range(n: int, k: int, i: int) -> tuple[int, int]:
    return _C.block_range(n, k, i)


def alltoall_counts(p, n):
    """The default all-to-all pattern for check(..., n): rank s sends rank d block d
    of n + s elements cut in p (sizes differ by sender and receiver; empty blocks
    when n + s < p)."""
    return [[(lambda b: b[1] - b[0])(block_range(n + s, p, d)) for d in range(p)]
            for s in range(p)]


def equal_counts(p, m):
    """The even all-to-all: every rank sends every rank m elements."""
    return [[m] * p for _ in range(p)]


def _alltoall_counts_for(algo, p, n, counts):
    """The count matrix check() proves algo's all-to-all at, and what the refusal
    says about where it came from. An algorithm that declares equal splits only
    (ringcoll.schedules.Applies(equal_splits=True)) is proved at equal splits, n / p
    to each rank, and given counts that are not equal is not applicable; any other at
    `counts`, else at the uneven pattern alltoall_counts(p, n)."""
    if equal_splits(algo, "all_to_all"):
        if counts is None:
            if n % p:
                raise NotApplicable(f"algorithm '{algo}' declares all_to_all for equal splits "
                                    f"only: n={n} elements a rank is not a multiple of p={p}")
            return equal_counts(p, n // p), ""
        if any(c != counts[0][0] for row in counts for c in row):
            raise NotApplicable(f"algorithm '{algo}' declares all_to_all for equal splits "
                                "only: these counts are not equal")
        return counts, ""
    if counts is not None:
        return counts, ""
    return alltoall_counts(p, n), (
        f" (every rank's counts assumed: ringcoll.check's uneven pattern alltoall_counts({p}, "
        f"{n}), rank s sending n + s elements; an algorithm right for equal splits only "
        "declares it, Applies(equal_splits=True), and is proved at equal splits)")


def schedules(algo, collective, p, n, root=0, order=None, counts=None, hosts=None):
    """Every rank's schedule, as the extension builds it. hosts: each rank's host
    (schedule.h's Params::hosts; None: one host)."""
    collective = torch_name(collective)
    hosts = list(hosts or [])
    if collective == "all_to_all":
        counts = counts or alltoall_counts(p, n)
        return [_C.schedule(algo, collective, p, r, sum(counts[r]) + sum(c[r] for c in counts),
                            root, list(order or []), counts[r], [c[r] for c in counts], hosts)
                for r in range(p)]
    return [_C.schedule(algo, collective, p, r, n, root, list(order or []), hosts=hosts)
            for r in range(p)]


def _fail(msg):
    raise ScheduleError(msg)


def _overlap(a, b):
    return a[0] < b[1] and b[0] < a[1]


def _check_structure(scheds, p, sizes, where, bounds=None):
    """`sizes`: each rank's buffer with its scratch, which transfers and `reduced`
    may address; `bounds`: each rank's buffer without it: a range lies on one side
    of it (the executor addresses the buffer and the scratch apart)."""
    bounds = bounds or sizes
    nsteps = max(len(s["steps"]) for s in scheds)
    for s in range(nsteps):
        pairs = {}  # (src, dst) -> [send ranges], [recv ranges]
        for r, sched in enumerate(scheds):
            if s >= len(sched["steps"]):
                continue
            step = sched["steps"][s]
            at = f"{where} step {s} rank {r}"
            sends, writes = [], []
            for kind, peer, b, e in step["transfers"]:
                if kind not in ("send",) + _WRITES:
                    _fail(f"{at}: unknown transfer kind {kind!r}")
                if not (0 <= peer < p):
                    _fail(f"{at}: {kind} with peer {peer}")
                if not (0 <= b <= e <= sizes[r]):
                    _fail(f"{at}: {kind} range [{b}, {e}) outside [0, {sizes[r]})")
                if b < bounds[r] < e:
                    _fail(f"{at}: {kind} range [{b}, {e}) spans the end of the buffer "
                          f"({bounds[r]}) and its scratch: a range lies in one of them")
                if b == e:
                    continue  # empty: the executor skips it on both sides
                if kind == "send":
                    sends.append((b, e))
                    pairs.setdefault((r, peer), ([], []))[0].append((b, e))
                else:
                    writes.append((b, e))
                    pairs.setdefault((peer, r), ([], []))[1].append((b, e))
            for b, e in step["reduced"]:
                if not (0 <= b <= e <= sizes[r]):
                    what = "the buffer and its scratch" if sizes[r] > bounds[r] else "the buffer"
                    _fail(f"{at}: marks [{b}, {e}) reduced, outside {what} [0, {sizes[r]})")
                if b < bounds[r] < e:
                    _fail(f"{at}: marks [{b}, {e}) reduced, which spans the end of the "
                          f"buffer ({bounds[r]}) and its scratch: a range lies in one of them")
            for i, w in enumerate(writes):
                for other in writes[i + 1:]:
                    if _overlap(w, other):
                        _fail(f"{at}: writes {w} and {other} overlap in one step")
                for snd in sends:
                    if _overlap(w, snd):
                        _fail(f"{at}: range {w} is written while {snd} is sent in one step")
        for (a, b), (sent, received) in sorted(pairs.items()):
            if [e - x for x, e in sent] != [e - x for x, e in received]:
                _unpaired(scheds, where, s, a, b, sent, received)
    return nsteps


def _pair_steps(sched, kind, peer):
    """[(step, range)] of a rank's non-empty transfers of `kind` ("send", or "recv"
    for either receive) with peer, in the order the executor pairs them (by step,
    then in schedule order)."""
    return [(t, (b, e)) for t, step in enumerate(sched["steps"])
            for k, q, b, e in step["transfers"]
            if q == peer and b < e and (k == "send") == (kind == "send")]


def _unpaired(scheds, where, s, a, b, sent, received):
    """Fails on step s, where the sends from a to b and the receives on b from a do
    not pair, naming the first transfer without a partner of its size there. The
    executor pairs a's k-th send to b with b's k-th receive from a whatever their
    steps: when that partner is in another step, the two ranks disagree on the step
    of one transfer, which is a deadlock (each would wait in its step for what the
    other posts only in a later one), named with both steps."""
    sizes = lambda rs: [e - x for x, e in rs]  # noqa: E731
    shown = lambda r: f"[{r[0]}, {r[1]})"  # noqa: E731
    head = (f"{where} step {s}: rank {a} sends sizes {sizes(sent)} to rank {b}, which "
            f"receives sizes {sizes(received)} from rank {a}")
    k = next(i for i in range(min(len(sent), len(received)) + 1)
             if i == len(sent) or i == len(received) or sizes(sent)[i] != sizes(received)[i])
    if k < len(sent) and k < len(received):
        _fail(f"{head}: send {k} {shown(sent[k])} and receive {k} {shown(received[k])} differ "
              "in size")
    sends, recvs = _pair_steps(scheds[a], "send", b), _pair_steps(scheds[b], "recv", a)
    if k < len(received):  # a receive on b whose send is not in this step
        lone = received[k]
        what = f"rank {b} receives {shown(lone)} from rank {a} in step {s}"
        g = recvs.index((s, lone))
        partner = sends[g] if g < len(sends) else None
        who, verb = a, "sends"
    else:
        lone = sent[k]
        what = f"rank {a} sends {shown(lone)} to rank {b} in step {s}"
        g = sends.index((s, lone))
        partner = recvs[g] if g < len(recvs) else None
        who, verb = b, "receives"
    if partner is None:
        _fail(f"{head}: {what}, and rank {who} {verb} nothing to pair with it in any step")
    t = partner[0]
    steps = (t, s) if k < len(received) else (s, t)  # (sender's, receiver's)
    _fail(f"{where}: deadlock: {what}, but rank {who} {verb} the transfer that pairs with it "
          f"({shown(partner[1])}) in step {t}: a send and its receive must be in one step "
          f"(rank {a} in step {steps[0]} and rank {b} in step {steps[1]} would each wait for "
          "the other: a real run hangs, or pairs the wrong messages)")


def _alltoall_offsets(counts, r):
    """(send offsets, receive offsets) of rank r's all-to-all buffer, p + 1 each."""
    p = len(counts)
    so = [0]
    for d in range(p):
        so.append(so[-1] + counts[r][d])
    ro = [so[-1]]
    for q in range(p):
        ro.append(ro[-1] + counts[q][r])
    return so, ro


# A value is what a run of elements holds: (label, pos, contributors, finishes, fold).
# Element k of the run stands for position pos + k of `label`'s numbering (None: the
# buffer's own positions; (s, d): all-to-all's block of rank s for rank d), holds the
# inputs of the ranks in the bitmask `contributors`, was finished `finishes` times
# and was folded as the interned tree `fold` (_Folds). None: holds nothing yet.


def _at(v, k):
    """The value of element k of a run whose first element holds v."""
    return v if v is None or k == 0 else (v[0], v[1] + k, v[2], v[3], v[4])


def _position(v):
    return v[1] if v[0] is None else ("a", v[0][0], v[0][1], v[1])


class _Folds:
    """Fold trees, interned: rank r's own input is r, a reduce of a into b is the
    id of the pair, so two elements were folded the same way iff their ids are
    equal, however deep the trees."""

    def __init__(self, p):
        self.p = p
        self.ids = {}
        self.pairs = []

    def join(self, a, b):
        key = (a, b)
        got = self.ids.get(key)
        if got is None:
            got = self.ids[key] = self.p + len(self.pairs)
            self.pairs.append(key)
        return got

    def show(self, f):
        if f < self.p:
            return str(f)
        a, b = self.pairs[f - self.p]
        return f"({self.show(a)} + {self.show(b)})"


class _Buf:
    """One rank's buffer as runs: run i covers [starts[i], starts[i + 1]) (the last
    up to `size`) and holds vals[i] in its first element, _at(vals[i], k) in its
    k-th. The checker's work grows with the number of runs, which transfers and
    block boundaries create, not with the number of elements."""

    __slots__ = ("starts", "vals", "size")

    def __init__(self, size, runs):
        self.starts, self.vals, self.size = [], [], size
        at = 0
        for length, v in runs:
            if length > 0:
                self.starts.append(at)
                self.vals.append(v)
                at += length
        assert at == size, (at, size)

    def cut(self, x):
        """The index of the run that starts at x (splitting one if needed);
        len(runs) for x == size."""
        if x >= self.size:
            return len(self.starts)
        i = bisect.bisect_right(self.starts, x) - 1
        if self.starts[i] != x:
            k = x - self.starts[i]
            i += 1
            self.starts.insert(i, x)
            self.vals.insert(i, _at(self.vals[i - 1], k))
        return i

    def pieces(self, b, e):
        """[(begin, end, value)] of the runs that tile [b, e)."""
        i, j = self.cut(b), self.cut(e)
        ends = self.starts[i + 1:j] + [e]
        return [(self.starts[k], ends[k - i], self.vals[k]) for k in range(i, j)]

    def cut_all(self, cuts, b, e):
        """Cut at every x of `cuts` in (b, e)."""
        for x in cuts:
            if b < x < e:
                self.cut(x)

    def replace(self, b, e, runs):
        """[b, e) holds `runs` [(length, value)] from now on."""
        i, j = self.cut(b), self.cut(e)
        starts, vals, at = [], [], b
        for length, v in runs:
            if length > 0:
                starts.append(at)
                vals.append(v)
                at += length
        self.starts[i:j], self.vals[i:j] = starts, vals

    def first(self, b, e, bad):
        """The first element of [b, e) whose value makes bad(value) true (values
        checked per run: `bad` must not depend on the position within it), or None."""
        for s, _, v in self.pieces(b, e):
            if bad(v):
                return s, v
        return None


def _initial(collective, p, n, r, root, counts=None):
    """Rank r's buffer before step 0, without scratch, as runs [(length, value)]."""
    mine = (None, 0, 1 << r, 0, r)
    if collective in REDUCING:
        return [(n, mine)]
    if collective in ("all_gather", "gather"):
        b, e = block_range(n, p, r)
        return [(b, None), (e - b, (None, b, 1 << r, 0, r)), (n - e, None)]
    if collective == "all_to_all":
        runs = [(counts[r][d], ((r, d), 0, 1 << r, 0, r)) for d in range(p)]
        for q in range(p):  # the job's local copy of the own block
            runs.append((counts[q][r], ((r, r), 0, 1 << r, 0, r) if q == r else None))
        return runs
    return [(n, (None, 0, 1 << root, 0, root) if r == root else None)]


def _with_scratch(runs, n, scratch, copy=True):
    """runs, then `scratch` elements past n: a copy of the first ones (unless not
    `copy`: the scratch starts empty), then nothing."""
    out, left = list(runs), scratch if copy else 0
    for length, v in runs:
        if left <= 0:
            break
        out.append((min(length, left), v))
        left -= length
    return out + [(max(left, 0) if copy else scratch, None)]


def _reduce_into(buf, b, e, payload, peer, p, folds, at, first=False):
    """Receive-reduces `payload` [(length, value)] into [b, e) of buf: buffer OP
    incoming, or (first) incoming OP buffer, as the fold records."""
    x = b
    cuts = []
    for length, _ in payload:
        x += length
        cuts.append(x)
    buf.cut_all(cuts, b, e)
    out, seg, seg_start = [], 0, b
    for s, t, u in buf.pieces(b, e):
        while s >= seg_start + payload[seg][0]:
            seg_start += payload[seg][0]
            seg += 1
        v = _at(payload[seg][1], s - seg_start)
        if u is None:
            _fail(f"{at}: reduces into element {s}, which holds nothing")
        if (u[0], u[1]) != (v[0], v[1]):
            _fail(f"{at}: reduces position {_position(v)} from rank {peer} into "
                  f"position {_position(u)}")
        if u[2] & v[2]:
            twice = [q for q in range(p) if (u[2] & v[2]) >> q & 1]
            _fail(f"{at}: element {s} from rank {peer} counts ranks {twice} twice")
        if u[3] or v[3]:
            _fail(f"{at}: element {s} was finished before its reduction was complete")
        fold = folds.join(v[4], u[4]) if first else folds.join(u[4], v[4])
        out.append((t - s, (u[0], u[1], u[2] | v[2], 0, fold)))
    buf.replace(b, e, out)


def _simulate(scheds, p, bufs, nsteps, where, folds):
    full = (1 << p) - 1
    for s in range(nsteps):
        # Every send of the step carries the sender's elements as they were before
        # it; _check_structure proved that no rank writes what it sends in a step.
        outbox = {}  # (src, dst) -> list of payloads [(length, value)], in send order
        for r, sched in enumerate(scheds):
            if s >= len(sched["steps"]):
                continue
            for kind, peer, b, e in sched["steps"][s]["transfers"]:
                if kind != "send" or b == e:
                    continue
                runs = bufs[r].pieces(b, e)
                if any(v is None for _, _, v in runs):
                    _fail(f"{where} step {s}: rank {r} sends [{b}, {e}) to rank {peer} "
                          f"before it holds all of it")
                outbox.setdefault((r, peer), []).append([(t - x, v) for x, t, v in runs])
        for r, sched in enumerate(scheds):
            if s >= len(sched["steps"]):
                continue
            step = sched["steps"][s]
            at = f"{where} step {s} rank {r}"
            for kind, peer, b, e in step["transfers"]:
                if kind == "send" or b == e:
                    continue
                payload = outbox[(peer, r)].pop(0)
                if kind == "recv_copy":
                    bufs[r].replace(b, e, payload)
                else:
                    _reduce_into(bufs[r], b, e, payload, peer, p, folds, at,
                                 first=kind == "recv_reduce_first")
            for b, e in step["reduced"]:
                if b == e:
                    continue
                bad = bufs[r].first(b, e, lambda v: v is None or v[2] != full or v[3])
                if bad is not None:
                    pos, v = bad
                    if v is not None and v[2] == full:
                        _fail(f"{at}: marks element {pos} reduced a second time")
                    _fail(f"{at}: marks element {pos} reduced, but it holds {_who(v, p)}")
                bufs[r].replace(b, e, [(t - x, (v[0], v[1], v[2], 1, v[4]))
                                       for x, t, v in bufs[r].pieces(b, e)])
    return bufs


def _check_folds(bufs, p, n, where, folds):
    """All-reduce: every rank applied the op to the same operands in the same
    order, so the ranks end with the same bits (floating-point sums are not
    associative, and a rank folding in its own order drifts from its peers)."""
    for r in range(1, p):
        cuts = bufs[0].starts + bufs[r].starts
        bufs[0].cut_all(cuts, 0, n)
        bufs[r].cut_all(cuts, 0, n)
        for (pos, _, mine), (_, _, first) in zip(bufs[r].pieces(0, n), bufs[0].pieces(0, n)):
            if mine[4] != first[4]:
                _fail(f"{where}: element {pos} is folded as {folds.show(mine[4])} on "
                      f"rank {r} but as {folds.show(first[4])} on rank 0: the ranks would "
                      f"end with different bits")


def _who(v, p):
    if v is None:
        return "nothing"
    return f"ranks {[q for q in range(p) if v[2] >> q & 1]}"


def _shown(v, p):
    if v is None:
        return "nothing"
    return f"position {_position(v)}, {_who(v, p)}, finished {v[3]} times"


def _check_result(bufs, scheds, collective, p, n, root, where, counts=None):
    full = (1 << p) - 1
    bounds = [block_range(n, p, i)[0] for i in range(p)]
    for r, buf in enumerate(bufs):
        rb, re = scheds[r]["result"]
        steps = len(scheds[r]["steps"])
        at = f"{where} rank {r} at the end" + (f" (after step {steps - 1})" if steps else "")
        if collective == "all_to_all":
            so, ro = _alltoall_offsets(counts, r)
            if (rb, re) != (ro[0], ro[p]):
                _fail(f"{at}: result [{rb}, {re}) is not the receive blocks "
                      f"[{ro[0]}, {ro[p]})")
            for q in range(p):
                want = ((q, r), 0, 1 << q, 0)
                for pos, _, v in buf.pieces(ro[q], ro[q + 1]):
                    if v is None or v[:4] != (want[0], pos - ro[q], want[2], 0):
                        got = "nothing" if v is None else (
                            f"element {v[1]} of rank {v[0][0]}'s block for rank {v[0][1]} "
                            f"({_who(v, p)}, finished {v[3]} times)")
                        _fail(f"{at}: element {pos} ends with {got}; expected element "
                              f"{pos - ro[q]} of rank {q}'s block for rank {r}")
            continue
        if collective in ("reduce_scatter", "scatter"):
            if (rb, re) != block_range(n, p, r):
                _fail(f"{at}: result [{rb}, {re}) is not block {r} {block_range(n, p, r)}")
        elif collective in ("reduce", "gather") and r != root:
            if rb != re:
                _fail(f"{at}: result [{rb}, {re}) of a rank other than the root is not empty")
            continue
        elif (rb, re) != (0, n):
            _fail(f"{at}: result [{rb}, {re}) is not the whole buffer [0, {n})")
        buf.cut_all(bounds, rb, re)  # each run in one block: one owner
        for pos, _, v in buf.pieces(rb, re):
            if collective in REDUCING:
                want = (None, pos, full, 1)
            elif collective in ("all_gather", "gather"):
                want = (None, pos, 1 << (bisect.bisect_right(bounds, pos) - 1), 0)
            else:
                want = (None, pos, 1 << root, 0)
            if v is None or v[:4] != want:
                _fail(f"{at}: element {pos} ends with {_shown(v, p)}; expected "
                      f"{_shown(want + (0,), p)}")


def check(algo, collective, p, n, root=0, order=None, counts=None, hosts=None):
    """Raises ScheduleError naming the first violation; returns the step count.
    counts: all-to-all's p x p matrix (alltoall_counts(p, n) when None); hosts: each
    rank's host (None: one host)."""
    collective = torch_name(collective)
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r} (known: {COLLECTIVES})")
    why = refusal(algo, collective, p, n, root=root)
    if why:
        raise NotApplicable(why)
    assumed = ""
    if collective == "all_to_all":
        counts, assumed = _alltoall_counts_for(algo, p, n, counts)
    where = f"{algo} {collective} p={p} n={n}" + (
        f" root={root}" if collective in ("broadcast", "reduce", "gather", "scatter") else "")
    if order:
        where += f" order={list(order)}"
    if hosts:
        where += f" hosts={list(hosts)}"
    try:
        return check_schedules(schedules(algo, collective, p, n, root, order, counts, hosts),
                               collective, p, n, root, where, counts)
    except ScheduleError as e:
        if not assumed:
            raise
        raise ScheduleError(f"{e}{assumed}") from None


def check_schedules(scheds, collective, p, n, root=0, where="schedule", counts=None):
    """check() for schedules given as data (one dict per rank, as _C.schedule
    returns them): lets a new algorithm be checked before it is compiled in."""
    collective = torch_name(collective)
    if len(scheds) != p:
        _fail(f"{where}: {len(scheds)} schedules for {p} ranks")
    if collective == "all_to_all":
        counts = counts or alltoall_counts(p, n)
    bufs, nsteps, folds = _walk(scheds, collective, p, n, root, counts, where)
    _check_result(bufs, scheds, collective, p, n, root, where, counts)
    if collective == "all_reduce":
        _check_folds(bufs, p, n, where, folds)
    return nsteps


def _walk(scheds, collective, p, n, root, counts, where):
    """Every rank's buffer set up for the collective (its input runs, then scratch),
    the schedules' structure checked and their steps walked: (buffers, the number of
    steps, the folds seen). ScheduleError if they break a rule."""
    bufs = []
    for r, sched in enumerate(scheds):
        runs = _initial(collective, p, n, r, root, counts)
        size = sum(length for length, _ in runs)
        scratch = sched.get("scratch", 0)
        bufs.append(_Buf(size + scratch, _with_scratch(runs, size, scratch,
                                                       sched.get("scratch_copy", True))))
    nsteps = _check_structure(scheds, p, [b.size for b in bufs], where,
                              [b.size - s.get("scratch", 0) for b, s in zip(bufs, scheds)])
    folds = _Folds(p)
    return _simulate(scheds, p, bufs, nsteps, where, folds), nsteps, folds


def final_state(scheds, collective, p, n, root=0, counts=None):
    """What each rank's result range ends holding, as check_schedules walks it: per
    rank, runs of (length, label, position, contributors, finishes, fold) with the
    fold written out, so that two schedules of one collective compare by what they
    leave (the same bits where the folds are equal). ScheduleError if they break
    a rule."""
    collective = torch_name(collective)
    if collective == "all_to_all":
        counts = counts or alltoall_counts(p, n)
    bufs, _, folds = _walk(scheds, collective, p, n, root, counts, "final_state")
    out = []
    for r, buf in enumerate(bufs):
        b, e = scheds[r]["result"]
        merged = []  # runs that continue each other as one (the walk may cut them apart)
        for x, t, v in (buf.pieces(b, e) if e > b else []):
            if merged and merged[-1][1] is not None and v is not None and \
                    _at(merged[-1][1], merged[-1][0]) == v:
                merged[-1][0] += t - x
            else:
                merged.append([t - x, v])
        out.append([(length, None if v is None else (v[0], v[1], v[2], v[3], folds.show(v[4])))
                    for length, v in merged])
    return out


def _counts(p, multiple=1):
    """Counts 0..3p+1, sampled above p = 16 (as tests/test_schedule.py); with a
    count multiple (an algorithm's declaration), those of them that are multiples,
    and the first three multiples above 0."""
    if p <= 16:
        counts = list(range(3 * p + 2))
    else:
        counts = [0, 1, p - 1, p, p + 1, 2 * p + 3, 3 * p + 1]
    if multiple > 1:
        counts = [n for n in counts if n % multiple == 0] + [multiple * k for k in (1, 2, 3)]
    return sorted(set(counts))


def host_layouts(p):
    """Host layouts (Params.hosts) to prove a host-aware algorithm on, besides one
    host: two hosts (the second smaller when p is odd) and hosts of 4 ranks (the last
    smaller); up to p = 16 also hosts of 3 and one host per rank."""
    out = [[r // per for r in range(p)] for per in sorted({(p + 1) // 2, 4}) if per < p]
    if p <= 16:
        out += [[r // per for r in range(p)] for per in (3, 1) if per < p]
    return out


def uses_hosts(algo, collective) -> bool:
    """Whether algo's schedules of collective change with the host layout (asked at
    p = 4, else the smallest world size of 2 to 64 the algorithm serves)."""
    p = next((q for q in [4] + list(range(2, 65)) if not refusal(algo, collective, q)), None)
    if p is None:
        return False
    declared = _C.applicability(algo, torch_name(collective))
    n = p * 5 * declared["count_multiple"]  # p blocks: every collective takes it
    root = (declared["roots"] or [0])[0]
    counts = (_alltoall_counts_for(algo, p, n, None)[0]
              if torch_name(collective) == "all_to_all" else None)
    hosts = [r * 2 // p for r in range(p)]  # two hosts
    return (schedules(algo, collective, p, n, root, counts=counts) !=
            schedules(algo, collective, p, n, root, counts=counts, hosts=hosts))


def check_all(algo, max_p=64, log=None, skipped=None) -> int:
    """Proves every collective `algo` provides for p = 1..max_p, counts 0..3p+1
    (sampled above p = 16), every root up to p = 16 (then 4 of them), and, where its
    schedules depend on where ranks live (twolevel), the host_layouts(p) too (counts
    sampled above p = 8); returns how many schedules were checked. Raises
    ScheduleError on the first violation. World sizes and counts the algorithm
    declares it does not serve (ringcoll.schedules.Applies) are skipped: `skipped`
    (a dict) receives {collective: [p skipped]} and log() names them."""
    provided = {c.replace("_", "") for c in COLLECTIVES} & set(_C.provides(algo))
    done = 0
    skipped = {} if skipped is None else skipped
    hosted = {}
    for p in range(1, max_p + 1):
        roots = range(p) if p <= 16 else sorted({0, 1, p // 2, p - 1})
        for c in COLLECTIVES:
            if c.replace("_", "") not in provided:
                continue
            if refusal(algo, c, p):
                skipped.setdefault(c, []).append(p)
                continue
            if c not in hosted:
                hosted[c] = uses_hosts(algo, c)
            layouts = [None]
            if p > 1 and hosted[c]:
                layouts += host_layouts(p)
            multiple = _C.applicability(algo, c)["count_multiple"]
            for n in _counts(p, multiple):
                blocks = c in ("reduce_scatter", "all_gather", "gather", "scatter") or (
                    c == "all_to_all" and equal_splits(algo, c))
                if blocks and n % p or refusal(algo, c, p, n):
                    continue
                for hosts in layouts:
                    if hosts and p > 8 and n not in (1, p + 1, 3 * p + 1):
                        continue
                    for root in roots if c in ("broadcast", "reduce", "gather", "scatter") \
                            else [0]:
                        if refusal(algo, c, p, n, root=root):
                            continue
                        check(algo, c, p, n, root=root, hosts=hosts)
                        done += 1
        if log and (p <= 4 or p % 16 == 0):
            log(f"{algo}: p = 1..{p} proved ({done} schedules)")
    if log:
        for c, ps in skipped.items():
            log(f"{algo}: {c} skipped at p = {sizes_text(ps)}: "
                f"{_C.applicability(algo, c)['declared']} (it declares)")
    return done


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m ringcoll.check",
        description="Prove every collective an algorithm provides with the generic "
                    "schedule checker, no processes.")
    ap.add_argument("algos", nargs="*", help="algorithms (default: every registered one)")
    ap.add_argument("--max-p", type=int, default=64, help="largest world size (default 64)")
    a = ap.parse_args(argv)
    try:
        load_from_environment()
    except ImportError as e:
        print(f"python -m ringcoll.check: {e}", file=sys.stderr)
        return 2
    def log(line):  # flushed: a later FAILED line (stderr) comes after it, not amid it
        print(line, flush=True)

    for algo in a.algos or list(_C.algorithms()):
        try:
            n = check_all(algo, a.max_p, log=log)
        except (ScheduleError, ValueError, RuntimeError) as e:  # RuntimeError: AlgorithmError
            sys.stdout.flush()
            print(f"FAILED: {e}", file=sys.stderr, flush=True)
            return 1
        names = ", ".join(torch_name(c) for c in _C.provides(algo))
        print(f"{algo} ({names}): {n} schedules proved, "
              f"p = 1..{a.max_p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
