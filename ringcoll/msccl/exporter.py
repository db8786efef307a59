"""Any ringcoll algorithm's schedules for one collective and world size as an MSCCL
program (program.py) that MSCCL's reader accepts and its executor runs.

1. A count. MSCCL scales one program to every count (chunks of count / nchunksperloop
   elements), a ringcoll schedule is a function of n: the program is written at the
   smallest n (a multiple of p) whose schedules, scaled by 2 and 3, are the
   schedules at 2n and 3n, with the largest chunk that divides every range of them.
2. Buffers, in place where MSCCL has the collective in place (all-reduce, reduce,
   broadcast and reduce-scatter in i, all-gather in o), as importer.py reads them
   back; all-to-all sends from i and receives in o, and copies a rank's own block
   (ringcoll's job does that); gather and scatter are MSCCL custom collectives
   (ringcoll_coll, root: attributes MSCCL's reader ignores) with i and o apart. A
   scratch that starts as a copy of the buffer in ringcoll is copied first (MSCCL's
   starts undefined).
3. Threadblocks: on each rank one per peer it sends to, one per peer it receives
   from, and one for its local work, each running its transfers in step order.
   Transfers: send s; receive-copy r; receive-reduce rrc (src = dst: buffer OP
   incoming); incoming-first receive-reduce r into a temporary and re (dst = src OP
   dst, the interpreter's order); local copy cpy; local incoming-first reduce re; a
   local buffer-first one cpy to a temporary, re of the buffer into it, cpy back.
4. Dependencies: a step waits (depid, deps; further ones as nops before it) for the
   last step of every other threadblock of its rank that an earlier ringcoll step
   gave, and that touches one of its chunks with one of the two writing; that step
   says hasdep. Messages pair as ringcoll pairs them: in step order per peer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .program import (MAX_COUNT, MAX_STEPS, MAX_THREADBLOCKS, MSCCL_NAME, Gpu, MSCCLError,
                      Program, Step, Threadblock)

_ROOTED = ("broadcast", "reduce", "gather", "scatter")


def _schedules(algo, coll, p, n, root):
    from .. import check

    counts = [[n // p] * p for _ in range(p)] if coll == "all_to_all" else None
    return check.schedules(algo, coll, p, n, root=root, counts=counts)


def _scaled(scheds, k):
    def sc(r):
        return (r[0] * k, r[1] * k)
    return [{"result": sc(s["result"]), "scratch": s.get("scratch", 0) * k,
             "steps": [{"transfers": [(t[0], t[1]) + sc(t[2:]) for t in st["transfers"]],
                        "reduced": [sc(r) for r in st["reduced"]]} for st in s["steps"]]}
            for s in scheds]


def _plain(scheds):
    return [{"result": tuple(s["result"]), "scratch": s.get("scratch", 0),
             "steps": [{"transfers": [tuple(t) for t in st["transfers"]],
                        "reduced": [tuple(r) for r in st["reduced"]]} for st in s["steps"]]}
            for s in scheds]


def unit(algo, coll, p, root=0, largest=64) -> int:
    """The smallest n = p * m (m <= largest) whose schedules scale (module docstring)."""
    for m in range(1, largest + 1):
        n = p * m
        base = _schedules(algo, coll, p, n, root)
        if all(_plain(_schedules(algo, coll, p, n * k, root)) == _scaled(_plain(base), k)
               for k in (2, 3)):
            return n
    raise MSCCLError(f"{algo} {coll} p={p}: no count p*m (m <= {largest}) at which its "
                     "schedules scale with the count, as an MSCCL program's chunks do")


@dataclass
class _Op:
    step: Step
    rc_step: int                 # the ringcoll step it comes from
    reads: list = field(default_factory=list)   # chunk ranges of this rank's buffer
    writes: list = field(default_factory=list)
    deps: list = field(default_factory=list)    # _Op of other threadblocks
    tb: "_Tb" = None


@dataclass
class _Tb:
    send: int
    recv: int
    ops: list = field(default_factory=list)
    temp: tuple = None  # (start chunk in the scratch, chunks): its temporary


def _overlap(a, b):
    return a[0] < b[1] and b[0] < a[1]


class _Rank:
    """One rank's buffers in chunks: where a ringcoll range lies in MSCCL's i, o, s."""

    def __init__(self, coll, p, r, root, n_chunks, scratch_chunks):
        self.coll, self.p, self.r, self.root = coll, p, r, root
        self.C, self.S = n_chunks, scratch_chunks
        self.b = n_chunks // p
        self.temps = 0  # scratch chunks added for temporaries

    def ref(self, rng):
        """(buffer, offset) of a chunk range of the ringcoll buffer."""
        b, e = rng
        C, r = self.C, self.r
        if b >= self._main():
            return "s", b - self._main()
        coll = self.coll
        if coll in ("all_reduce", "reduce", "broadcast", "reduce_scatter"):
            return "i", b
        if coll == "all_gather":
            return "o", b
        if coll == "all_to_all":
            return ("i", b) if b < C else ("o", b - C)
        mine = (r * self.b, r * self.b + self.b)
        whole = "o" if coll == "gather" else "i"  # the root's p blocks
        if r == self.root:
            return whole, b
        if not (mine[0] <= b and e <= mine[1]):
            raise MSCCLError(f"rank {r} of the {coll} addresses chunks [{b}, {e}) outside "
                             f"its own block {list(mine)}, which MSCCL's custom collective "
                             "has no buffer for")
        return ("i" if coll == "gather" else "o"), b - mine[0]

    def _main(self):
        return 2 * self.C if self.coll == "all_to_all" else self.C

    def temp(self, cnt):
        start = self._main() + self.S + self.temps
        self.temps += cnt
        return (start, start + cnt)


def default_name(algo: str, collective: str, p: int) -> str:
    """The <algo name> an export writes unless told: a name RINGCOLL_ALGO takes as it
    is (letters, digits, '_'), so that importing the file registers the algorithm
    under the very name the file gives (it was 'ringcoll ring all_reduce p=4', which
    the import had to make 'ringcoll_ring_all_reduce_p_4'), and not the exported
    algorithm's own (a built-in name cannot be defined again)."""
    return f"{algo}_{collective}_p{p}".replace("-", "_")


def export_program(algo, collective, p, n=None, root=0, name=None) -> Program:
    from .. import check
    from . import valid_name

    if name is not None and not valid_name(name):
        raise MSCCLError(f"name {name!r}: an imported file's algorithm is registered under its "
                         "name, which RINGCOLL_ALGO must be able to name (letters, digits, '_' "
                         "and '-', starting with a letter)")

    coll = check.torch_name(collective)
    if coll not in MSCCL_NAME and coll not in ("gather", "scatter"):
        raise MSCCLError(f"{coll}: MSCCL has no such collective (export: "
                         f"{', '.join(list(MSCCL_NAME.values()) + ['gather', 'scatter'])})")
    why = check.refusal(algo, coll, p, n, root=root if coll in _ROOTED else None)
    if why:
        raise MSCCLError(f"cannot export: {why}")
    n = n or unit(algo, coll, p, root)
    scheds = _schedules(algo, coll, p, n, root)
    counts = [[n // p] * p for _ in range(p)] if coll == "all_to_all" else None
    check.check_schedules(scheds, coll, p, n, root, f"{algo} {coll} p={p} n={n}", counts)
    main = 2 * n if coll == "all_to_all" else n
    g = main
    for s in scheds:
        for x in (s["result"][0], s["result"][1], s.get("scratch", 0)):
            g = math.gcd(g, x)
        for st in s["steps"]:
            for t in st["transfers"]:
                g = math.gcd(math.gcd(g, t[2]), t[3])
    g = g or 1
    C = n // g  # the buffer's chunks (all-to-all: its sends'; its receives follow)
    if coll not in ("all_reduce", "reduce", "broadcast", "all_to_all") and C % p:
        raise MSCCLError(f"{algo} {coll} p={p} n={n}: {C} chunks do not cut into p blocks")
    if any(s.get("scratch", 0) for s in scheds) and coll in ("all_to_all", "gather", "scatter"):
        raise MSCCLError(f"{algo} {coll}: its schedule asks for scratch, which this exporter "
                         f"does not write for {coll}")
    ranks = [_Rank(coll, p, r, root, C, s.get("scratch", 0) // g) for r, s in enumerate(scheds)]
    tbs = [_threadblocks(scheds, r, ranks[r], g, p) for r in range(p)]
    prog = Program(name=name or default_name(algo, coll, p), coll=MSCCL_NAME.get(coll, "custom"),
                   ngpus=p, nchunksperloop=C, nchannels=1, proto="Simple",
                   inplace=0 if coll in ("all_to_all", "gather", "scatter") else 1, gpus=[],
                   ringcoll_coll=coll if coll in ("gather", "scatter") else None,
                   root=root if coll in _ROOTED else 0)
    for r in range(p):
        i_chunks = {"all_gather": C // p, "gather": C, "scatter": C}.get(coll, C)
        o_chunks = {"reduce_scatter": C // p, "gather": C, "scatter": C}.get(coll, C)
        gpu = Gpu(r, i_chunks, o_chunks, ranks[r].S + ranks[r].temps)
        gpu.tbs = _numbered(tbs[r], r)
        prog.gpus.append(gpu)
    return prog


def _threadblocks(scheds, r, rank, g, p):
    """Rank r's threadblocks with their ops and dependencies (module docstring)."""
    def ch(rng):
        return (rng[0] // g, rng[1] // g)

    send_tb, recv_tb, local = {}, {}, _Tb(-1, -1)
    order = []  # threadblocks in the order they first appear

    def tb_for(kind, peer):
        table = send_tb if kind == "send" else recv_tb
        if peer not in table:
            table[peer] = _Tb(peer if kind == "send" else -1, peer if kind != "send" else -1)
            order.append(table[peer])
        return table[peer]

    def add(tb, step, s, reads=(), writes=()):
        op = _Op(step, s, list(reads), list(writes), tb=tb)
        tb.ops.append(op)
        return op

    def temp_of(tb, cnt):
        if tb.temp is None or tb.temp[1] < cnt:
            start = rank.temp(cnt)
            tb.temp = (start[0], cnt)
        return (tb.temp[0], tb.temp[0] + cnt)

    def step(kind, src, dst, cnt):
        sb, so = rank.ref(src) if src else ("i", -1)
        db, do = rank.ref(dst) if dst else ("o", -1)
        return Step(0, kind, sb, so, db, do, cnt)

    # what ringcoll does before step 0 and MSCCL does not: a scratch that starts as a
    # copy of the buffer (one-shot's), the own block of all-to-all, gather and scatter
    coll, C, b = rank.coll, rank.C, rank.b
    sched = scheds[r]
    if sched.get("scratch", 0) and sched.get("scratch_copy", True):
        k = min(rank.S, C)
        add(local, Step(0, "cpy", "i", 0, "s", 0, k), -1, [(0, k)], [(C, C + k)])
    if coll == "all_to_all":
        own_s, own_o = (r * b, r * b + b), (C + r * b, C + r * b + b)
        add(local, step("cpy", own_s, own_o, b), -1, [own_s], [own_o])
    elif coll in ("gather", "scatter") and r == rank.root:  # i -> o, the root's block
        blk = (r * b, r * b + b)
        add(local, Step(0, "cpy", "i", 0 if coll == "gather" else r * b, "o",
                        r * b if coll == "gather" else 0, b), -1, [blk], [blk])
    for s, st in enumerate(scheds[r]["steps"]):
        sends, recvs = [], []
        for t in st["transfers"]:
            kind, peer, lo, hi = t
            if lo == hi:
                continue
            rng = ch((lo, hi))
            if peer == r:
                (sends if kind == "send" else recvs).append((kind, rng))
                continue
            cnt = rng[1] - rng[0]
            if kind == "send":
                add(tb_for("send", peer), step("s", rng, None, cnt), s, [rng])
            elif kind == "recv_copy":
                add(tb_for("recv", peer), step("r", None, rng, cnt), s, [], [rng])
            elif kind == "recv_reduce":
                add(tb_for("recv", peer), step("rrc", rng, rng, cnt), s, [rng], [rng])
            else:  # incoming OP buffer: into a temporary, then re (src OP dst)
                tb = tb_for("recv", peer)
                tmp = temp_of(tb, cnt)
                add(tb, step("r", None, tmp, cnt), s, [], [tmp])
                add(tb, step("re", tmp, rng, cnt), s, [tmp, rng], [rng])
        for (_, src), (kind, dst) in zip(sends, recvs):  # local pairs, in order
            cnt = src[1] - src[0]
            if kind == "recv_copy":
                add(local, step("cpy", src, dst, cnt), s, [src], [dst])
            elif kind == "recv_reduce_first":
                add(local, step("re", src, dst, cnt), s, [src, dst], [dst])
            else:  # buffer OP incoming: dst OP src through a temporary
                tmp = temp_of(local, cnt)
                add(local, step("cpy", src, tmp, cnt), s, [src], [tmp])
                add(local, step("re", dst, tmp, cnt), s, [dst, tmp], [tmp])
                add(local, step("cpy", tmp, dst, cnt), s, [tmp], [dst])
    tbs = order + ([local] if local.ops else [])
    _depend(tbs)
    return tbs


def _depend(tbs):
    """Each op waits for the last op of every other threadblock, from an earlier
    ringcoll step, that conflicts with it (module docstring, 4)."""
    for tb in tbs:
        for op in tb.ops:
            for other in tbs:
                if other is tb:
                    continue
                for prev in reversed(other.ops):
                    if prev.rc_step >= op.rc_step:
                        continue
                    if any(_overlap(w, x) for w in op.writes for x in prev.reads + prev.writes) \
                            or any(_overlap(w, x) for w in prev.writes for x in op.reads):
                        op.deps.append(prev)
                        break


def _numbered(tbs, r):
    """Threadblocks as program.py's, in MSCCLang's order (by send, recv), with nops for
    extra dependencies and every step numbered."""
    tbs = sorted(tbs, key=lambda t: (t.send, t.recv))
    if len(tbs) > MAX_THREADBLOCKS:
        raise MSCCLError(f"gpu {r}: {len(tbs)} threadblocks, more than MSCCL's "
                         f"{MAX_THREADBLOCKS}")
    index, steps_of = {}, {}
    for i, tb in enumerate(tbs):
        steps = []
        for op in tb.ops:
            for dep in op.deps[1:]:
                nop = Step(0, "nop", "i", -1, "o", -1, 0)
                steps.append(nop)
                index[id(nop)] = (i, dep)
            steps.append(op.step)
            index[id(op.step)] = (i, op.deps[0] if op.deps else None)
            if op.step.cnt >= MAX_COUNT:
                raise MSCCLError(f"gpu {r} threadblock {i}: a step of {op.step.cnt} chunks, "
                                 f"more than MSCCL's {MAX_COUNT - 1}: export a smaller count")
        for k, st in enumerate(steps):
            st.s = k
        if len(steps) > MAX_STEPS:
            raise MSCCLError(f"gpu {r} threadblock {i}: {len(steps)} steps, more than MSCCL's "
                             f"{MAX_STEPS}")
        steps_of[i] = steps
    tb_of = {id(op): i for i, tb in enumerate(tbs) for op in tb.ops}
    for i, steps in steps_of.items():
        for st in steps:
            _, dep = index[id(st)]
            if dep is not None:
                st.depid, st.deps = tb_of[id(dep)], dep.step.s
                dep.step.hasdep = 1
    return [Threadblock(i, tb.send, tb.recv, 0, steps_of[i]) for i, tb in enumerate(tbs)]
