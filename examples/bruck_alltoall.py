"""Bruck's all-to-all (Bruck et al., "Efficient Algorithms for All-to-All Communications
in Multiport Message-Passing Systems", IEEE TPDS 1997) as the algorithm "bruck_a2a":
ceil(log2 p) messages a rank where the direct exchange sends p - 1, for equal splits
(docs/ALGORITHMS.md: "Equal splits only").

Every rank sends every rank m elements. Call the block that rank s sends rank d the
block of distance (d - s) mod p. It travels forward in hops of 2^k, one per set bit
k of its distance, lowest first, so after round k its holder is s + (distance mod
2^(k+1)). Round k, with d = 2^k:

1. pack: the rank copies every block it holds whose distance has bit k set into the
   pack area P, in increasing distance (a local copy: a send to itself paired with a
   receive from itself);
2. exchange: it sends P to rank r + d and receives the same number of blocks from
   rank r - d into the arrival area Q, in the same order;
3. unpack (the next round's pack step, and a last step after the last round): a
   block in Q whose distance has no bit above k has arrived and goes to its receive
   block; one that travels on goes to its slot of the working area W, unless the
   next round sends it on at once (then that round packs it straight from Q).

p = 4, rank 0 (distances 1, 2, 3; blocks named source->destination):

   step 0 pack      send blocks 0->1, 0->3 (distances 1, 3)          -> P
   step 1 exchange  P to rank 1; from rank 3 blocks 3->0, 3->2       -> Q
   step 2 unpack    3->0 (distance 1, done) -> receive block 3
          pack      send block 0->2 (distance 2) and 3->2 (from Q)   -> P
   step 3 exchange  P to rank 2; from rank 2 blocks 2->0, 1->0       -> Q
   step 4 unpack    2->0 -> receive block 2, 1->0 -> receive block 1

The schedule on one rank forwards blocks whose sizes are other ranks' counts, which
a rank does not know unless every split is equal: so it declares equal splits only
(Applies(equal_splits=True)), and ringcoll proves every rank's schedule at the
call's very counts. Each rank sends (p - 1) m elements in the direct exchange and
about (p / 2) m log2 p here, plus two local copies of each block it forwards: fewer,
larger messages, which pays where a message's fixed cost dominates.
"""

from ringcoll.schedules import (Applies, Range, Schedule, alltoall_blocks, recv_copy,
                                register, send)


def _local(me, src, dst) -> list:
    """Rank me's local copy of src into dst: a send to itself and its receive."""
    return [send(me, src), recv_copy(me, dst)]


def all_to_all(prm) -> Schedule:
    p, me, n = prm.size, prm.rank, prm.n
    sends, recvs = alltoall_blocks(prm)
    m = prm.send_counts[0] if p else 0
    half = p // 2  # no round moves more than p / 2 blocks
    # the scratch: W (a slot per distance), then P and Q (half blocks each)
    W = lambda dist: Range(n + dist * m, n + (dist + 1) * m)  # noqa: E731
    P = lambda j: Range(n + (p + j) * m, n + (p + j + 1) * m)  # noqa: E731
    Q = lambda j: Range(n + (p + half + j) * m, n + (p + half + j + 1) * m)  # noqa: E731

    steps, d, arrived = [], 1, []  # arrived: the distances in Q, in order
    while d < p:
        moving = [x for x in range(1, p) if x & d]
        step = []
        for j, x in enumerate(moving):  # pack
            where = (sends[(me + x) % p] if x % d == 0 else  # not moved yet
                     Q(arrived.index(x)) if x & (d >> 1) else W(x))
            step += _local(me, where, P(j))
        for j, x in enumerate(arrived):  # unpack what this round does not send on
            if x not in moving:
                step += _local(me, Q(j), recvs[(me - x) % p] if x < d else W(x))
        steps.append(step)
        k = len(moving)
        steps.append([send((me + d) % p, Range(P(0).begin, P(0).begin + k * m)),
                      recv_copy((me - d) % p, Range(Q(0).begin, Q(0).begin + k * m))])
        arrived, d = moving, d * 2
    if arrived:
        steps.append([t for j, x in enumerate(arrived)
                      for t in _local(me, Q(j), recvs[(me - x) % p])])
    return Schedule(steps, result=(sum(prm.send_counts), n), scratch=(p + 2 * half) * m,
                    empty_scratch=True)


register("bruck_a2a", "all_to_all", applies=Applies(equal_splits=True),
         summary="Bruck all-to-all: ceil(log2 p) messages a rank, equal splits only")(all_to_all)
