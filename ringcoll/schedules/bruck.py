"""Bruck all-gather (Bruck et al., "Efficient Algorithms for All-to-All
Communications in Multiport Message-Passing Systems", IEEE TPDS 1997), registered
as "bruck": ceil(log2 p) steps for any p, where the ring takes p - 1.

1. Rank r starts with block r. Before step k it holds the d = 2^k blocks r, r+1,
   ..., r+d-1 (mod p).
2. At step k it sends the first c = min(d, p - d) of them to rank r - d and receives
   c blocks from rank r + d, which are blocks r+d, ..., r+d+c-1: it then holds 2d
   blocks (all p after the last step, where c may be less than d).

The blocks stay where the all-gather puts them (block b at its place in every rank's
buffer), so no final rotation is needed; a run of blocks that wraps past the last
one is two transfers, the same two on both sides. p = 5:

   step 0 (d 1): r sends block r to r-1, receives block r+1 from r+1:  r holds r, r+1
   step 1 (d 2): r sends blocks r, r+1 to r-2, receives r+2, r+3:       r holds 4 blocks
   step 2 (d 4): r sends block r to r-4 (= r+1), receives r+4:          all 5

Each rank sends p - 1 blocks in all, as on the ring, in ceil(log2 p) messages (plus
one where a run wraps): fewer, larger messages, which pays where a message's fixed
cost dominates (small buffers, many ranks).
"""

from __future__ import annotations

from . import Range, Schedule, block, recv_copy, register, send


def blocks(n: int, p: int, first: int, count: int) -> list:
    """The ranges of blocks first, first+1, ..., first+count-1 (mod p): one, or two
    where the run wraps past block p-1."""
    first %= p
    last = first + count  # exclusive, may pass p
    runs = [(first, min(last, p))] + ([(0, last - p)] if last > p else [])
    return [Range(block(n, p, a).begin, block(n, p, b - 1).end) for a, b in runs if b > a]


def all_gather(prm) -> Schedule:
    p, r, n = prm.size, prm.rank, prm.n
    steps, d = [], 1
    while d < p:
        c = min(d, p - d)
        step = [send((r - d) % p, x) for x in blocks(n, p, r, c)]
        step += [recv_copy((r + d) % p, x) for x in blocks(n, p, r + d, c)]
        steps.append(step)
        d *= 2
    return Schedule(steps, result=(0, n))


register("bruck", "all_gather", summary="Bruck all-gather: ceil(log2 p) steps for any p, "
         "2^k blocks to rank r - 2^k at step k")(all_gather)
