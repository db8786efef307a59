"""The generic schedule checker: proves, with no processes and no transport, that an
algorithm's schedule does what its collective promises.

    from ringcoll import check
    check.check("ring", "all_reduce", p=6, n=20)      # raises ScheduleError if wrong

    python -m ringcoll.check biring               # every collective it provides,
                                                  # p = 1..64 (main() below)

It asks the extension for every rank's schedule (csrc/schedules/schedule.h: steps of
transfers, each a send or a receive that is copied or reduced into place, of an
element range with one peer) and walks all ranks step by step on symbolic data.
Each element holds (index, contributors, finishes, fold): the buffer position it
stands for, the set of ranks whose input it contains (a bitmask, any world size),
how many times a finishing pass (AVG's division) was applied to it, and how it was
folded (a rank's input, or (accumulator, arrival) of a reduce). A send carries the
sender's elements as they were before the step; a receive-copy replaces, a
receive-reduce merges two values of the same position. It checks:

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
of the first elements, taken before step 0, and holds nothing past that copy. All-to-all's buffer is each rank's
send blocks then its receive blocks, sized by a p x p count matrix (`counts[s][d]`
elements from s to d; alltoall_counts(p, n) by default, uneven, with empty
blocks); its own block is copied by the job, so it starts in place here.
"""

from __future__ import annotations

import argparse
import sys

from . import _C

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
_WRITES = ("recv_copy", "recv_reduce")


class ScheduleError(AssertionError):
    """A schedule broke its collective's contract; the message says where."""


def block_range(n: int, k: int, i: int) -> tuple[int, int]:
    return _C.block_range(n, k, i)


def alltoall_counts(p, n):
    """The default all-to-all pattern for check(..., n): rank s sends rank d block d
    of n + s elements cut in p (sizes differ by sender and receiver; empty blocks
    when n + s < p)."""
    return [[(lambda b: b[1] - b[0])(block_range(n + s, p, d)) for d in range(p)]
            for s in range(p)]


def schedules(algo, collective, p, n, root=0, order=None, counts=None):
    """Every rank's schedule, as the extension builds it."""
    collective = torch_name(collective)
    if collective == "all_to_all":
        counts = counts or alltoall_counts(p, n)
        return [_C.schedule(algo, collective, p, r, sum(counts[r]) + sum(c[r] for c in counts),
                            root, list(order or []), counts[r], [c[r] for c in counts])
                for r in range(p)]
    return [_C.schedule(algo, collective, p, r, n, root, list(order or [])) for r in range(p)]


def _fail(msg):
    raise ScheduleError(msg)


def _overlap(a, b):
    return a[0] < b[1] and b[0] < a[1]


def _check_structure(scheds, p, sizes, where):
    nsteps = max(len(s["steps"]) for s in scheds)
    for s in range(nsteps):
        pairs = {}  # (src, dst) -> [send sizes], [recv sizes]
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
                if b == e:
                    continue  # empty: the executor skips it on both sides
                if kind == "send":
                    sends.append((b, e))
                    pairs.setdefault((r, peer), ([], []))[0].append(e - b)
                else:
                    writes.append((b, e))
                    pairs.setdefault((peer, r), ([], []))[1].append(e - b)
            for i, w in enumerate(writes):
                for other in writes[i + 1:]:
                    if _overlap(w, other):
                        _fail(f"{at}: writes {w} and {other} overlap in one step")
                for snd in sends:
                    if _overlap(w, snd):
                        _fail(f"{at}: range {w} is written while {snd} is sent in one step")
        for (a, b), (sent, received) in sorted(pairs.items()):
            if sent != received:
                _fail(f"{where} step {s}: rank {a} sends sizes {sent} to rank {b}, "
                      f"which receives sizes {received} from rank {a}")
    return nsteps


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


def _initial(collective, p, n, r, root, counts=None):
    """Rank r's buffer before step 0, without scratch: (label, contributors,
    finishes) per element, or None where it holds nothing yet."""
    if collective in REDUCING:
        return [(e, 1 << r, 0, r) for e in range(n)]
    if collective in ("all_gather", "gather"):
        b, e1 = block_range(n, p, r)
        return [(e, 1 << r, 0, r) if b <= e < e1 else None for e in range(n)]
    if collective == "all_to_all":
        so, ro = _alltoall_offsets(counts, r)
        buf = [(("a", r, d, i), 1 << r, 0, r) for d in range(p) for i in range(counts[r][d])]
        buf += [None] * (ro[p] - ro[0])
        for i in range(counts[r][r]):  # the job's local copy of the own block
            buf[ro[r] + i] = (("a", r, r, i), 1 << r, 0, r)
        return buf
    return [(e, 1 << root, 0, root) if r == root else None for e in range(n)]


def _simulate(scheds, p, bufs, nsteps, where):
    full = (1 << p) - 1
    for s in range(nsteps):
        pre = [list(b) for b in bufs]
        outbox = {}  # (src, dst) -> list of element lists, in send order
        for r, sched in enumerate(scheds):
            if s >= len(sched["steps"]):
                continue
            for kind, peer, b, e in sched["steps"][s]["transfers"]:
                if kind != "send" or b == e:
                    continue
                vals = pre[r][b:e]
                if any(v is None for v in vals):
                    _fail(f"{where} step {s}: rank {r} sends [{b}, {e}) to rank {peer} "
                          f"before it holds all of it")
                outbox.setdefault((r, peer), []).append(vals)
        for r, sched in enumerate(scheds):
            if s >= len(sched["steps"]):
                continue
            step = sched["steps"][s]
            for kind, peer, b, e in step["transfers"]:
                if kind == "send" or b == e:
                    continue
                vals = outbox[(peer, r)].pop(0)
                at = f"{where} step {s} rank {r}"
                for k, v in enumerate(vals):
                    pos = b + k
                    if kind == "recv_copy":
                        bufs[r][pos] = v
                        continue
                    u = bufs[r][pos]
                    if u is None:
                        _fail(f"{at}: reduces into element {pos}, which holds nothing")
                    if u[0] != v[0]:
                        _fail(f"{at}: reduces position {v[0]} from rank {peer} into "
                              f"position {u[0]}")
                    if u[1] & v[1]:
                        twice = [q for q in range(p) if (u[1] & v[1]) >> q & 1]
                        _fail(f"{at}: element {pos} from rank {peer} counts ranks "
                              f"{twice} twice")
                    if u[2] or v[2]:
                        _fail(f"{at}: element {pos} was finished before its reduction "
                              f"was complete")
                    bufs[r][pos] = (u[0], u[1] | v[1], 0, (u[3], v[3]))
            for b, e in step["reduced"]:
                for pos in range(b, e):
                    v = bufs[r][pos]
                    if v is None or v[1] != full:
                        _fail(f"{where} step {s} rank {r}: marks element {pos} reduced, "
                              f"but it holds {_who(v, p)}")
                    if v[2]:
                        _fail(f"{where} step {s} rank {r}: marks element {pos} reduced "
                              f"a second time")
                    bufs[r][pos] = (v[0], v[1], 1, v[3])
    return bufs


def _value(v):
    """An element without its fold: (position, contributors, finishes)."""
    return None if v is None else v[:3]


def _check_folds(bufs, scheds, p, n, where):
    """All-reduce: every rank applied the op to the same operands in the same
    order, so the ranks end with the same bits (floating-point sums are not
    associative, and a rank folding in its own order drifts from its peers)."""
    for pos in range(n):
        first = bufs[0][pos][3]
        for r in range(1, p):
            if bufs[r][pos][3] != first:
                _fail(f"{where}: element {pos} is folded as {_fold(bufs[r][pos][3])} on "
                      f"rank {r} but as {_fold(first)} on rank 0: the ranks would end "
                      f"with different bits")


def _fold(f):
    return str(f) if isinstance(f, int) else f"({_fold(f[0])} + {_fold(f[1])})"


def _who(v, p):
    if v is None:
        return "nothing"
    return f"ranks {[q for q in range(p) if v[1] >> q & 1]}"


def _check_result(bufs, scheds, collective, p, n, root, where, counts=None):
    full = (1 << p) - 1
    owner = [0] * n
    for i in range(p):
        b, e = block_range(n, p, i)
        owner[b:e] = [i] * (e - b)
    for r, buf in enumerate(bufs):
        rb, re = scheds[r]["result"]
        at = f"{where} rank {r}"
        if collective == "all_to_all":
            so, ro = _alltoall_offsets(counts, r)
            if (rb, re) != (ro[0], ro[p]):
                _fail(f"{at}: result [{rb}, {re}) is not the receive blocks "
                      f"[{ro[0]}, {ro[p]})")
            for q in range(p):
                for i in range(counts[q][r]):
                    pos, want = ro[q] + i, (("a", q, r, i), 1 << q, 0)
                    if _value(buf[pos]) != want:
                        _fail(f"{at}: element {pos} ends with {buf[pos]}; expected element "
                              f"{i} of rank {q}'s block for rank {r}")
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
        for pos in range(rb, re):
            v = buf[pos]
            if collective in REDUCING:
                want = (pos, full, 1)
            elif collective in ("all_gather", "gather"):
                want = (pos, 1 << owner[pos], 0)
            else:
                want = (pos, 1 << root, 0)
            if _value(v) != want:
                got = "nothing" if v is None else (
                    f"position {v[0]}, {_who(v, p)}, finished {v[2]} times")
                _fail(f"{at}: element {pos} ends with {got}; expected position "
                      f"{want[0]}, {_who(want, p)}, finished {want[2]} times")


def check(algo, collective, p, n, root=0, order=None, counts=None):
    """Raises ScheduleError naming the first violation; returns the step count.
    counts: all-to-all's p x p matrix (alltoall_counts(p, n) when None)."""
    collective = torch_name(collective)
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r} (known: {COLLECTIVES})")
    if collective == "all_to_all":
        counts = counts or alltoall_counts(p, n)
    where = f"{algo} {collective} p={p} n={n}" + (
        f" root={root}" if collective in ("broadcast", "reduce", "gather", "scatter") else "")
    if order:
        where += f" order={list(order)}"
    return check_schedules(schedules(algo, collective, p, n, root, order, counts), collective,
                           p, n, root, where, counts)


def check_schedules(scheds, collective, p, n, root=0, where="schedule", counts=None):
    """check() for schedules given as data (one dict per rank, as _C.schedule
    returns them): lets a new algorithm be checked before it is compiled in."""
    collective = torch_name(collective)
    if len(scheds) != p:
        _fail(f"{where}: {len(scheds)} schedules for {p} ranks")
    if collective == "all_to_all":
        counts = counts or alltoall_counts(p, n)
    bufs = []
    for r, sched in enumerate(scheds):
        buf = _initial(collective, p, n, r, root, counts)
        scratch = sched.get("scratch", 0)
        bufs.append(buf + buf[:scratch] + [None] * (scratch - len(buf)))
    nsteps = _check_structure(scheds, p, [len(b) for b in bufs], where)
    bufs = _simulate(scheds, p, bufs, nsteps, where)
    _check_result(bufs, scheds, collective, p, n, root, where, counts)
    if collective == "all_reduce":
        _check_folds(bufs, scheds, p, n, where)
    return nsteps


def _counts(p):
    """Counts 0..3p+1, sampled above p = 16 (as tests/test_schedule.py)."""
    if p <= 16:
        return list(range(3 * p + 2))
    return sorted({0, 1, p - 1, p, p + 1, 2 * p + 3, 3 * p + 1})


def check_all(algo, max_p=64, log=None) -> int:
    """Proves every collective `algo` provides for p = 1..max_p, counts 0..3p+1
    (sampled above p = 16), every root up to p = 16 (then 4 of them), and returns
    how many schedules were checked. Raises ScheduleError on the first violation."""
    provided = {c.replace("_", "") for c in COLLECTIVES} & set(_C.provides(algo))
    done = 0
    for p in range(1, max_p + 1):
        roots = range(p) if p <= 16 else sorted({0, 1, p // 2, p - 1})
        for c in COLLECTIVES:
            if c.replace("_", "") not in provided:
                continue
            for n in _counts(p):
                blocks = c in ("reduce_scatter", "all_gather", "gather", "scatter")
                if blocks and n % p:
                    continue
                for root in roots if c in ("broadcast", "reduce", "gather", "scatter") else [0]:
                    check(algo, c, p, n, root=root)
                    done += 1
        if log and (p <= 4 or p % 16 == 0):
            log(f"{algo}: p = 1..{p} proved ({done} schedules)")
    return done


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m ringcoll.check",
        description="Prove every collective an algorithm provides with the generic "
                    "schedule checker, no processes.")
    ap.add_argument("algos", nargs="*", help="algorithms (default: every registered one)")
    ap.add_argument("--max-p", type=int, default=64, help="largest world size (default 64)")
    a = ap.parse_args(argv)
    for algo in a.algos or list(_C.algorithms()):
        try:
            n = check_all(algo, a.max_p, log=print)
        except ScheduleError as e:
            print(f"FAILED: {e}", file=sys.stderr)
            return 1
        names = ", ".join(torch_name(c) for c in _C.provides(algo))
        print(f"{algo} ({names}): {n} schedules proved, "
              f"p = 1..{a.max_p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
