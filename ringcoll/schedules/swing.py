"""Swing all-reduce (De Sensi et al., "Swing: Short-cutting Rings for Higher
Bandwidth Allreduce", NSDI 2024), registered as "swing".

1. Peers. At step s rank r exchanges with r + rho(s) if r is even and r - rho(s) if
   it is odd (mod q), rho(s) = sum over i <= s of (-2)^i = 1, -1, 3, -5, 11, ...: the
   partners of recursive halving-doubling (distance 2^s), short-cut, so that on a
   ring or torus every step's peer is near (distances 1, 1, 3, 5, 11, ...).
2. Reduce-scatter, log2(q) steps. S(r, s), the ranks r reaches over steps s, s+1,
   ..., is S(r, s+1) plus S(peer, s+1), the two disjoint (q a power of two). At step
   s rank r sends its partner the part of the buffer that S(peer, s+1) will own and
   reduces in the partner's copy of what S(r, s+1) will own: halving, as rhd does,
   with swing's partners. Afterwards rank r holds its own part complete.
3. All-gather, the mirror: steps s = log2(q) - 1 down to 0, each rank sends what it
   holds and copies in what its partner holds.

Parts are laid out so that every S(r, s) is one contiguous range of the buffer (a
depth-first walk of the halves, the half with the smaller rank first), so each step
is one message each way. q = 4: S(0, 1) = {0, 3} (0's step-1 partner is 0 - 1 mod
4), S(1, 1) = {1, 2}, so the layout is r0 r3 r1 r2, and

   step 0 (rho 1):  r0 <-> r1, r2 <-> r3: r0 and r3 keep [r0 r3], r1 and r2 keep
                    [r1 r2] (r0 reduces r1's copy of [r0 r3], holding inputs 0+1)
   step 1 (rho -1): r0 <-> r3, r1 <-> r2: each keeps its own part (r0 reduces r3's
                    copy of [r0], inputs 3+2: all four)
   steps 2, 3:      the same pairs in reverse order, copying.

Each rank sends (q-1)/q of the buffer per phase, as the ring and rhd do, in log2(q)
messages. Any p: p = q + rem with q the largest power of two <= p; ranks 0..2rem-1
pair up and the even one of each pair folds out, as rhd does (csrc/schedules/rhd.cc):
it sends its whole buffer to its odd partner first, which reduces it in, and gets
the result back last; the q ranks left run swing on their virtual ranks. (The
paper's own scheme for non-powers of two is not implemented.) Every part is reduced
on one rank and copied everywhere else: every rank ends with the same bits.
"""

from __future__ import annotations

import functools

from . import Range, Schedule, block, recv_copy, recv_reduce, reduced, register, send


def rho(s: int) -> int:
    """sum over i <= s of (-2)^i: 1, -1, 3, -5, 11, ..."""
    return (1 - (-2) ** (s + 1)) // 3


def peer(v: int, s: int, q: int) -> int:
    """Virtual rank v's partner at step s among q ranks."""
    return (v + rho(s)) % q if v % 2 == 0 else (v - rho(s)) % q


@functools.lru_cache(maxsize=64)
def layout(q: int) -> tuple:
    """(position of each virtual rank's part, levels, reach) for q = 2^levels ranks,
    reach(v, s) being S(v, s) in layout order: every S(v, s) occupies consecutive
    positions."""
    levels = q.bit_length() - 1

    @functools.lru_cache(maxsize=None)
    def reach(v, s):  # S(v, s) in layout order
        if s == levels:
            return (v,)
        mine, theirs = reach(v, s + 1), reach(peer(v, s, q), s + 1)
        return mine + theirs if min(mine) < min(theirs) else theirs + mine

    order = reach(0, 0)
    assert sorted(order) == list(range(q)), f"swing: the halves do not tile {q} ranks"
    pos = [0] * q
    for i, v in enumerate(order):
        pos[v] = i
    return tuple(pos), levels, reach


def all_reduce(prm) -> Schedule:
    p, r, n = prm.size, prm.rank, prm.n
    q = 1 << (p.bit_length() - 1)
    rem = p - q
    pos, levels, reach = layout(q)
    real = lambda u: 2 * u + 1 if u < rem else u + rem  # noqa: E731  virtual -> rank
    v = (r // 2 if r % 2 else -1) if r < 2 * rem else r - rem
    everything = Range(0, n)

    def part(members):  # the buffer range of a set of virtual ranks (contiguous)
        lo = min(pos[u] for u in members)
        hi = max(pos[u] for u in members)
        return Range(block(n, q, lo).begin, block(n, q, hi).end)

    fold = 1 if rem else 0
    steps = [[] for _ in range(2 * fold + 2 * levels)]
    if r < 2 * rem:  # a pair: the even rank folds out
        if v < 0:
            steps[0] = [send(r + 1, everything)]
            steps[-1] = [recv_copy(r + 1, everything)]
            return Schedule(steps, result=everything)
        steps[0] = [recv_reduce(r - 1, everything)]
        steps[-1] = [send(r - 1, everything)]
    for s in range(levels):
        u = peer(v, s, q)
        steps[fold + s] = [send(real(u), part(reach(u, s + 1))),
                           recv_reduce(real(u), part(reach(v, s + 1)))]
        steps[fold + 2 * levels - 1 - s] = [send(real(u), part(reach(v, s + 1))),
                                            recv_copy(real(u), part(reach(u, s + 1)))]
    if not steps:  # p = 1: its own input is the reduction
        steps = [[]]
    steps[fold + levels - 1 if levels else 0].append(reduced(part((v,))))
    return Schedule(steps, result=everything)


register("swing", "all_reduce", summary="Swing (De Sensi et al., NSDI 2024): halving and "
         "doubling with short-cut partners r +- rho(s); rhd's fold for non-powers of two")(
    all_reduce)
