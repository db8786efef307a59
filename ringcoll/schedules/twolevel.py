"""Two-level all-reduce, registered as "twolevel": reduce-scatter inside each host,
all-reduce of the shards across hosts, all-gather inside each host.

The host layout is the group's (Params.hosts: the host of each rank, the ranks of a
host in ring order). With H hosts of m ranks each:

1. Inside each host, a ring reduce-scatter over its m ranks (m - 1 steps): local
   rank j ends with block j of [0, n) cut in m, summed over the host.
2. Across hosts, for each block j, a ring all-reduce among the H ranks that hold it
   (local rank j of every host, in host order; 2(H - 1) steps, all blocks at once):
   local rank j ends with block j complete. Every rank is in exactly one of these
   rings, so each link between hosts carries 2(H-1)/H of a block (1/m of the buffer).
3. Inside each host, a ring all-gather (m - 1 steps).

Two hosts of two ranks (a0 a1 | b0 b1), blocks B0 B1:

   step 0: a0 <-> a1 ring reduce-scatter: a0 keeps B0 (a0+a1), a1 keeps B1; b0, b1 alike
   steps 1, 2: a0 <-> b0 all-reduce B0 (its halves, a ring of 2), a1 <-> b1 B1
   step 3: a0 <-> a1 ring all-gather: both hold B0 B1 complete; b0, b1 alike

Against the flat ring, the bytes that cross between hosts fall from 2(p-1)/p of the
buffer per rank to 2(H-1)/(H m), sent by every rank at once, and the steps from
2(p-1) to 2(m-1) + 2(H-1). Hosts of different sizes: the cross-host phase runs over
the common refinement of the hosts' block boundaries, each piece among the H ranks
that hold it (one per host), and smaller hosts wait out the longest host's intra
steps; one host is the ring (phase 2 is empty). Every part is reduced on one rank
and copied everywhere else: every rank ends with the same bits.
"""

from __future__ import annotations

from . import Range, Schedule, block, recv_copy, recv_reduce, reduced, register, send, split


def ring_steps(members, me, parts, shift, reduce, gather):
    """This member's steps of a ring over `members` (ranks, in ring order; `me` is
    this rank's index among them) whose chunk i is parts[i]: reduce-scatter
    (member i ends with chunk (i + shift) mod m), then all-gather; and the chunk it
    completes. ringcoll/schedules/__init__.py's docs draw the ring; this is
    csrc/schedules/ring.cc over any list of ranks."""
    m = len(members)
    nxt, prev = members[(me + 1) % m], members[(me - 1) % m]
    chunk = lambda i: parts[i % m]  # noqa: E731
    steps = []
    if reduce:
        steps += [[send(nxt, chunk(me + shift - 1 - s)), recv_reduce(prev, chunk(me + shift - 2 - s))]
                  for s in range(m - 1)]
    if gather:
        steps += [[send(nxt, chunk(me + shift - s)), recv_copy(prev, chunk(me + shift - 1 - s))]
                  for s in range(m - 1)]
    return steps, chunk(me + shift)


def all_reduce(prm) -> Schedule:
    p, r, n = prm.size, prm.rank, prm.n
    local = {}  # host -> its ranks in ring order
    for q in prm.order:
        local.setdefault(prm.hosts[q], []).append(q)
    hosts = list(local)  # by each host's first rank in ring order (insertion order)
    mine = local[prm.hosts[r]]
    j, m = mine.index(r), len(mine)
    intra = max(len(ranks) for ranks in local.values()) - 1
    cross = 2 * (len(hosts) - 1)
    steps = [[] for _ in range(2 * intra + cross)] or [[]]

    # 1. reduce-scatter inside the host: block j of this host's cut
    cut = [block(n, m, i) for i in range(m)]
    rs, own = ring_steps(mine, j, cut, 0, reduce=True, gather=False)
    for s, st in enumerate(rs):
        steps[s] += st
    if not cross:  # one host: own is complete
        steps[intra - 1 if intra else 0].append(reduced(own))
    # 2. across hosts: each piece of the common refinement among its H holders
    bounds = sorted({b for ranks in local.values()
                     for i in range(len(ranks)) for b in block(n, len(ranks), i)})
    for lo, hi in zip(bounds, bounds[1:]):
        if not cross or not own.begin <= lo < own.end:
            continue
        holders = []
        for h in hosts:
            ranks = local[h]
            i = next(i for i in range(len(ranks)) if block(n, len(ranks), i).end > lo)
            holders.append(ranks[i])
        parts = [split(Range(lo, hi), len(hosts), k) for k in range(len(hosts))]
        ar, done = ring_steps(holders, holders.index(r), parts, 1, reduce=True, gather=True)
        for s, st in enumerate(ar):
            steps[intra + s] += st
        steps[intra + cross // 2 - 1].append(reduced(done))
    # 3. all-gather inside the host
    ag, _ = ring_steps(mine, j, cut, 0, reduce=False, gather=True)
    for s, st in enumerate(ag):
        steps[intra + cross + s] += st
    return Schedule(steps, result=(0, n))


register("twolevel", "all_reduce", summary="two-level: reduce-scatter inside each host, "
         "all-reduce of the shards across hosts, all-gather inside")(all_reduce)
