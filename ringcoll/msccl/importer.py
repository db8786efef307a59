"""An MSCCL program (program.py) as ringcoll schedules: every rank's steps, in units
of one chunk per element, which a call scales by its chunk size.

1. Buffers. A rank's ringcoll buffer (registry.h's contract for the collective)
   holds MSCCL's buffers as below, C = nchunksperloop, r the rank, b = C / p:
     all_reduce, reduce, broadcast  i -> [0, C); o -> the same when in place, else
                                    the scratch's first C chunks; s -> the scratch after
     all_gather                     o -> [0, C); i -> o's block r (its input is there)
     reduce_scatter                 i -> [0, C); o -> i's block r when in place, else
                                    the scratch's first b chunks; s -> the scratch after
     all_to_all                     i -> the send blocks [0, C); o -> the receive
                                    blocks [C, 2C); no scratch (ringcoll's all-to-all
                                    job has none), likewise gather and scatter (custom)
     gather / scatter               i, o -> the blocks where they are (the root's
                                    whole buffer, another rank's block r)
   An output left in the scratch is the schedule's result there, which
   ringcoll.schedules copies to its place at the end. A copy of a rank's own block
   to itself (all-gather's, all-to-all's) is the job's, not the schedule's: dropped.
2. Steps become transfers (types: program.py): s send; r receive-copy; rrc with
   src = dst a receive-reduce (buffer OP incoming, as NCCL's reduce-copy folds),
   else a receive-copy into dst and a local incoming-first reduce of src into it;
   rcs, rrcs the same and a send of dst; rrs a receive into a temporary of the
   scratch, a local reduce of src into it, and its send; cpy a local copy; re a
   local incoming-first reduce (dst = src OP dst). Messages pair per (sender,
   receiver, channel) in threadblock order.
3. ringcoll steps: each transfer's step is the earliest that keeps, on every rank,
   every pair of transfers that touch one chunk (one of them writing) in the order
   MSCCL runs them (threadblock order, dependencies and messages: a program that
   leaves two such transfers unordered is refused as a race), with a message's send
   and receive in one step and a connection's messages in their order. A cycle (a program MSCCL would deadlock on, or an
   exchange that overwrites what it sends, which a step cannot hold) is refused,
   naming the steps.
4. `reduced` marks go where a rank's reduce first completes a chunk (AVG divides
   there); a copy of a complete chunk needs none.
Where each ringcoll step came from (gpu, threadblock, step) is kept, so that the
checker's verdict on a wrong program names the MSCCL steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .program import MSCCLError, Program

_REDUCING = ("all_reduce", "reduce_scatter", "reduce")


@dataclass
class _Sub:
    """One ringcoll transfer an MSCCL step becomes (ranges in chunk units)."""
    kind: str          # send, recv_copy, recv_reduce, local_copy, local_reduce_first
    rank: int
    peer: int          # the rank itself for local ones
    dst: tuple         # the range written (send: the range read)
    src: tuple = None  # local ones: the range read
    op: tuple = None   # (gpu, tb, s): where it came from
    order: int = 0     # within its MSCCL step
    msg: tuple = None  # send / receive: (sender, receiver, chan, k)
    step: int = -1

    def reads(self):
        if self.kind == "send":
            return [self.dst]
        if self.kind == "recv_copy":
            return []
        if self.kind == "local_copy":
            return [self.src]
        if self.kind == "recv_reduce":
            return [self.dst]
        return [self.src, self.dst]  # local_reduce_first

    def writes(self):
        return [] if self.kind == "send" else [self.dst]


@dataclass
class Layout:
    """One rank's ringcoll buffer in chunk units: `main` chunks of the buffer, then
    `scratch`; where MSCCL's buffers lie (maps), the result, and the block edges
    transfers may not cross (the job's regions)."""
    main: int
    scratch: int
    maps: dict            # buffer -> (start, chunks) or None (not used)
    result: tuple
    edges: list = field(default_factory=list)
    temp: int = 0         # scratch chunks added for rrs temporaries

    def range(self, buf, off, cnt, where):
        got = self.maps.get(buf)
        if got is None:
            raise MSCCLError(f"{where}: uses the {buf} buffer, which this collective "
                             "has no place for in ringcoll")
        return (got + off, got + off + cnt)


def layout(prog: Program, rank: int) -> Layout:
    p, C = prog.ngpus, prog.nchunksperloop
    b = C // p
    coll, gpu, inplace = prog.collective, prog.gpus[rank], prog.inplace
    where = f"<gpu id={rank}>"
    if coll in ("all_reduce", "reduce", "broadcast"):
        out = 0 if inplace else C
        scratch = (0 if inplace else C) + gpu.s_chunks
        res = (out, out + C)
        if coll == "reduce" and rank != prog.root:
            res = (0, 0)
        return Layout(C, scratch, {"i": 0, "o": out, "s": C + (0 if inplace else C)}, res)
    if coll == "all_gather":
        return Layout(C, gpu.s_chunks, {"o": 0, "i": rank * b, "s": C}, (0, C))
    if coll == "reduce_scatter":
        out = rank * b if inplace else C
        scratch = (0 if inplace else b) + gpu.s_chunks
        return Layout(C, scratch, {"i": 0, "o": out, "s": C + (0 if inplace else b)},
                      (out, out + b))
    if gpu.s_chunks:
        raise MSCCLError(f"{where}: s_chunks={gpu.s_chunks}: ringcoll's {coll} job has no "
                         "scratch memory (it addresses the user's blocks)")
    if coll == "all_to_all":
        return Layout(2 * C, 0, {"i": 0, "o": C}, (C, 2 * C),
                      edges=[k * b for k in range(1, 2 * p)])
    edges = [k * b for k in range(1, p)]
    if coll == "gather":
        return Layout(C, 0, {"i": rank * b, "o": 0 if rank == prog.root else None}, 
                      (0, C) if rank == prog.root else (0, 0), edges)
    return Layout(C, 0, {"i": 0 if rank == prog.root else None, "o": rank * b},
                  (rank * b, rank * b + b), edges)  # scatter


def _pieces(rng, edges):
    """rng cut at the edges inside it."""
    cuts = [e for e in edges if rng[0] < e < rng[1]]
    bounds = [rng[0]] + cuts + [rng[1]]
    return list(zip(bounds, bounds[1:]))


class Translation:
    """The program's transfers, ordered and stepped (the module docstring)."""

    def __init__(self, prog: Program):
        self.prog = prog
        self.p = prog.ngpus
        self.layouts = [layout(prog, r) for r in range(self.p)]
        self.subs = []           # every _Sub
        self.by_op = {}          # (gpu, tb, s) -> [sub indices]
        self._translate()
        self._pair()
        self._order()
        self._step()

    # 2. steps become transfers -------------------------------------------------
    def _translate(self):
        prog = self.prog
        for gpu in prog.gpus:
            r, lay = gpu.id, self.layouts[gpu.id]
            sent = {}  # (peer, chan) -> messages so far, ditto received
            recd = {}
            for tb in gpu.tbs:
                for st in tb.steps:
                    where = f"<gpu id={r}> <tb id={tb.id}> <step s={st.s}>"
                    op = (r, tb.id, st.s)
                    subs = self._subs_of(st, tb, r, lay, where)
                    ids = []
                    for k, sub in enumerate(subs):
                        sub.op, sub.order = op, k
                        if sub.kind == "send":
                            key = (sub.peer, tb.chan)
                            sub.msg = (r, sub.peer, tb.chan, sent.get(key, 0))
                            sent[key] = sent.get(key, 0) + 1
                        elif sub.kind in ("recv_copy", "recv_reduce"):
                            key = (sub.peer, tb.chan)
                            sub.msg = (sub.peer, r, tb.chan, recd.get(key, 0))
                            recd[key] = recd.get(key, 0) + 1
                        ids.append(len(self.subs))
                        self.subs.append(sub)
                    self.by_op[op] = ids
            self._one_threadblock_a_connection(gpu)

    def _one_threadblock_a_connection(self, gpu):
        for side in ("send", "recv"):
            seen = {}
            for tb in gpu.tbs:
                peer = getattr(tb, side)
                if peer < 0 or not any(True for _ in tb.steps):
                    continue
                key = (peer, tb.chan)
                if key in seen:
                    raise MSCCLError(
                        f"<gpu id={gpu.id}>: threadblocks {seen[key]} and {tb.id} both "
                        f"{side} {'to' if side == 'send' else 'from'} gpu {peer} on channel "
                        f"{tb.chan}: MSCCL keeps a connection's messages in order within one "
                        "threadblock")
                seen[key] = tb.id

    def _temp(self, lay, cnt):
        """A fresh range of the scratch for an rrs step's temporary."""
        start = lay.main + lay.scratch + lay.temp
        lay.temp += cnt
        return (start, start + cnt)

    def _subs_of(self, st, tb, r, lay, where):
        t = st.type
        if t == "nop":
            return []
        src = lay.range(st.srcbuf, st.srcoff, st.cnt, where) if t in (
            "s", "rrs", "rrc", "rrcs", "cpy", "re") else None
        dst = lay.range(st.dstbuf, st.dstoff, st.cnt, where) if t in (
            "r", "rcs", "rrc", "rrcs", "cpy", "re") else None
        if src and dst and src != dst and src[0] < dst[1] and dst[0] < src[1]:
            raise MSCCLError(f"{where}: its source {st.srcbuf}[{st.srcoff}] and destination "
                             f"{st.dstbuf}[{st.dstoff}] of {st.cnt} chunks overlap")
        if t == "s":
            return [_Sub("send", r, tb.send, src)]
        if t == "r":
            return [_Sub("recv_copy", r, tb.recv, dst)]
        if t in ("rcs", "rrc", "rrcs"):
            if t == "rcs":
                out = [_Sub("recv_copy", r, tb.recv, dst)]
            elif src == dst:
                out = [_Sub("recv_reduce", r, tb.recv, dst)]
            else:  # dst = src OP received
                out = [_Sub("recv_copy", r, tb.recv, dst),
                       _Sub("local_reduce_first", r, r, dst, src)]
            return out + ([_Sub("send", r, tb.send, dst)] if t != "rrc" else [])
        if t == "rrs":  # send src OP received, kept nowhere: through a temporary
            tmp = self._temp(lay, st.cnt)
            return [_Sub("recv_copy", r, tb.recv, tmp),
                    _Sub("local_reduce_first", r, r, tmp, src), _Sub("send", r, tb.send, tmp)]
        if t == "cpy":
            b = self.prog.nchunksperloop // self.p
            own = self.prog.collective == "all_to_all" and src == (r * b, r * b + b) and \
                dst == (lay.main // 2 + r * b, lay.main // 2 + r * b + b)
            return [] if src == dst or own else [_Sub("local_copy", r, r, dst, src)]
        if src == dst:  # re
            raise MSCCLError(f"{where}: reduces {st.srcbuf}[{st.srcoff}] into itself")
        return [_Sub("local_reduce_first", r, r, dst, src)]

    # messages pair per connection, in order ------------------------------------
    def _pair(self):
        sends, recvs = {}, {}
        for i, s in enumerate(self.subs):
            if s.kind == "send":
                sends[s.msg] = i
            elif s.msg is not None:
                recvs[s.msg] = i
        for key in sorted(set(sends) | set(recvs)):
            a, b, chan, k = key
            if key not in recvs or key not in sends:
                s = self.subs[(sends if key in sends else recvs)[key]]
                nsend = sum(1 for m in sends if m[:3] == key[:3])
                nrecv = sum(1 for m in recvs if m[:3] == key[:3])
                raise MSCCLError(
                    f"<gpu id={s.op[0]}> <tb id={s.op[1]}> <step s={s.op[2]}>: message {k} "
                    f"from gpu {a} to gpu {b} on channel {chan} has no partner: gpu {a} sends "
                    f"{nsend} messages there, gpu {b} receives {nrecv}")
            s, rv = self.subs[sends[key]], self.subs[recvs[key]]
            if s.dst[1] - s.dst[0] != rv.dst[1] - rv.dst[0]:
                raise MSCCLError(
                    f"<gpu id={a}> <tb id={s.op[1]}> <step s={s.op[2]}> sends "
                    f"{s.dst[1] - s.dst[0]} chunks, which <gpu id={b}> <tb id={rv.op[1]}> "
                    f"<step s={rv.op[2]}> receives as {rv.dst[1] - rv.dst[0]}")
        self.partner = {sends[k]: recvs[k] for k in sends}
        self.partner.update({recvs[k]: sends[k] for k in sends})

    # 3. order and steps ----------------------------------------------------------
    def _order(self):
        """Happens-before among MSCCL steps (threadblock order, dependencies,
        messages), as reachability bitsets; the conflicting pairs of transfers of
        each rank, in that order."""
        prog = self.prog
        ops = list(self.by_op)
        index = {op: i for i, op in enumerate(ops)}
        succ = [[] for _ in ops]
        for gpu in prog.gpus:
            for tb in gpu.tbs:
                for st in tb.steps:
                    here = index[(gpu.id, tb.id, st.s)]
                    if st.s + 1 < len(tb.steps):
                        succ[here].append(index[(gpu.id, tb.id, st.s + 1)])
                    if st.depid >= 0:
                        succ[index[(gpu.id, st.depid, st.deps)]].append(here)
        for i, j in self.partner.items():
            if self.subs[i].kind == "send":
                succ[index[self.subs[i].op]].append(index[self.subs[j].op])
        order = _topological(succ, lambda c: [ops[x] for x in c])
        reach = [0] * len(ops)
        for x in reversed(order):
            m = 1 << x
            for y in succ[x]:
                m |= reach[y]
            reach[x] = m
        self.before = []  # (i, j): sub i must run in an earlier step than sub j
        by_rank = {}
        for i, s in enumerate(self.subs):
            by_rank.setdefault(s.rank, []).append(i)
        for r, ids in by_rank.items():
            for x, i in enumerate(ids):
                a = self.subs[i]
                for j in ids[x + 1:]:
                    b = self.subs[j]
                    if not _conflict(a, b):
                        continue
                    if a.op == b.op:
                        first = (i, j) if a.order < b.order else (j, i)
                    elif reach[index[a.op]] >> index[b.op] & 1:
                        first = (i, j)
                    elif reach[index[b.op]] >> index[a.op] & 1:
                        first = (j, i)
                    else:
                        raise MSCCLError(
                            f"<gpu id={r}>: <tb id={a.op[1]}> <step s={a.op[2]}> and "
                            f"<tb id={b.op[1]}> <step s={b.op[2]}> touch the same chunks, one "
                            "writing, with no dependency ordering them (a race)")
                    self.before.append(first)

    def _step(self):
        """Each transfer's step: the longest chain of `before` edges into it, a
        message's send and receive one node."""
        n = len(self.subs)
        rep = list(range(n))
        for i, j in self.partner.items():
            rep[max(i, j)] = min(i, j)
        nodes = sorted(set(rep))
        pos = {v: k for k, v in enumerate(nodes)}
        succ = [[] for _ in nodes]  # (node, 1: a later step, 0: this one or later)
        for i, j in self.before:
            succ[pos[rep[i]]].append((pos[rep[j]], 1))
        # a connection's messages keep MSCCL's order: message k + 1 in no earlier step
        sends = sorted((s.msg, i) for i, s in enumerate(self.subs) if s.kind == "send")
        for (m, i), (m2, j) in zip(sends, sends[1:]):
            if m[:3] == m2[:3]:
                succ[pos[rep[i]]].append((pos[rep[j]], 0))
        order = _topological([[y for y, _ in ys] for ys in succ],
                             lambda c: [self.subs[nodes[x]].op for x in c], steps=True)
        level = [0] * len(nodes)
        for x in order:
            for y, w in succ[x]:
                level[y] = max(level[y], level[x] + w)
        for i in range(n):
            self.subs[i].step = level[pos[rep[i]]]

    # 4. every rank's schedule, in chunk units --------------------------------------
    def schedules(self):
        """[(steps, result, scratch, provenance)] per rank: steps as lists of
        ringcoll.schedules items in chunk units, provenance {step: [(tb, s, type)]}."""
        from ..schedules import Transfer, reduced

        nsteps = 1 + max((s.step for s in self.subs), default=-1)
        per_rank = [[[] for _ in range(nsteps)] for _ in range(self.p)]
        where = [dict() for _ in range(self.p)]
        types = {(g.id, tb.id, st.s): st.type for g in self.prog.gpus for tb in g.tbs
                 for st in tb.steps}
        # within a step, each pair's messages in connection order on both sides
        order = sorted(range(len(self.subs)), key=lambda i: (
            self.subs[i].step, self.subs[i].msg[2:] if self.subs[i].msg else (),
            self.subs[i].op, self.subs[i].order))
        for i in order:
            s = self.subs[i]
            lay = self.layouts[s.rank]
            items = per_rank[s.rank][s.step]
            kind = {"local_copy": "recv_copy", "local_reduce_first": "recv_reduce_first"}.get(
                s.kind, s.kind)
            if s.src is not None:  # local: the source as a send to itself, cut alike
                edges = lay.edges + [lay.main]
                for a, b in _common_cuts(_pieces(s.src, edges), _pieces(s.dst, edges), s.src,
                                         s.dst):
                    items += [Transfer("send", s.rank, *a), Transfer(kind, s.rank, *b)]
            else:
                items += [Transfer(kind, s.peer, *b) for b in self._message_pieces(i)]
            found = where[s.rank].setdefault(s.step, [])
            if (s.op[1], s.op[2], types[s.op]) not in found:
                found.append((s.op[1], s.op[2], types[s.op]))
        marks = self._marks(per_rank, nsteps) if self.prog.collective in _REDUCING else None
        results = []
        for r in range(self.p):
            steps = per_rank[r]
            for st, ranges in (marks[r].items() if marks else ()):
                steps[st] = steps[st] + [reduced(x) for x in ranges]
            lay = self.layouts[r]
            results.append((steps, lay.result, lay.scratch + lay.temp, where[r]))
        return results

    def _message_pieces(self, i):
        """Sub i's range cut where either side's job regions end (both sides cut
        alike, so the pieces pair)."""
        mine, theirs = self.subs[i], self.subs[self.partner[i]]
        cuts = set()
        for sub in (mine, theirs):
            lay = self.layouts[sub.rank]
            cuts |= {x - sub.dst[0] for x in lay.edges + [lay.main]
                     if sub.dst[0] < x < sub.dst[1]}
        offs = [0] + sorted(cuts) + [mine.dst[1] - mine.dst[0]]
        return [(mine.dst[0] + a, mine.dst[0] + b) for a, b in zip(offs, offs[1:])]

    def _marks(self, per_rank, nsteps):
        """{rank: {step: [ranges]}}: where a rank's reduce first completes a chunk
        (each chunk's contributors as a bitmask, walked step by step: a send carries
        the chunks as they were before the step)."""
        p, full = self.p, (1 << self.p) - 1
        state = []  # per rank, per chunk: contributors (the scratch starts empty)
        for r in range(p):
            lay = self.layouts[r]
            state.append([1 << r] * lay.main + [0] * (lay.scratch + lay.temp))
        marks = [dict() for _ in range(p)]
        for st in range(nsteps):
            sent = {}  # (sender, receiver) -> [contributors of each chunk], in order
            for r in range(p):
                for t in per_rank[r][st]:
                    if t.kind == "send":
                        sent.setdefault((r, t.peer), []).append(state[r][t.begin:t.end])
            for r in range(p):
                done = []
                for t in per_rank[r][st]:
                    if t.kind == "send":
                        continue
                    got = sent[(t.peer, r)].pop(0)
                    for k, m in enumerate(got):
                        if t.kind == "recv_copy":
                            state[r][t.begin + k] = m
                        else:
                            state[r][t.begin + k] |= m
                            if state[r][t.begin + k] == full:
                                done.append(t.begin + k)
                if done:
                    marks[r][st] = _runs(sorted(set(done)), self.layouts[r].main)
        return marks


def _runs(xs, boundary):
    out = []
    for x in xs:
        if out and out[-1][1] == x and x != boundary:
            out[-1][1] = x + 1
        else:
            out.append([x, x + 1])
    return [tuple(r) for r in out]


def _common_cuts(src_p, dst_p, src, dst):
    """A local transfer's source and destination cut at the same offsets."""
    offs = sorted({a - src[0] for a, _ in src_p} | {a - dst[0] for a, _ in dst_p} |
                  {src[1] - src[0]})
    return [((src[0] + a, src[0] + b), (dst[0] + a, dst[0] + b)) for a, b in zip(offs, offs[1:])]


def _conflict(a, b):
    def overlap(x, y):
        return x[0] < y[1] and y[0] < x[1]
    return (any(overlap(w, x) for w in a.writes() for x in b.reads() + b.writes()) or
            any(overlap(w, x) for w in b.writes() for x in a.reads()))


def _topological(succ, names, steps=False):
    """Kahn's order of a graph given by successor lists; MSCCLError naming the
    nodes of a cycle (`names` maps a cycle's nodes to (gpu, tb, s))."""
    n = len(succ)
    indeg = [0] * n
    for x in range(n):
        for y in succ[x]:
            indeg[y] += 1
    ready = [x for x in range(n) if indeg[x] == 0]
    order = []
    while ready:
        x = ready.pop()
        order.append(x)
        for y in succ[x]:
            indeg[y] -= 1
            if indeg[y] == 0:
                ready.append(y)
    if len(order) < n:
        stuck = sorted({op for op in names([x for x in range(n) if indeg[x] > 0])})[:6]
        shown = "; ".join(f"gpu {g} threadblock {t} step {s}" for g, t, s in stuck)
        why = ("no order of ringcoll steps holds them: a step that overwrites what it sends, "
               "or messages waiting for each other" if steps else "MSCCL would deadlock")
        raise MSCCLError(f"a cycle among {shown}: {why}")
    return order
