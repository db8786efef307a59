"""What one step costs each rank, and the step: the simulator's model.

In a step, rank r handles the transfers its schedule lists there (steps.py's rows),
each cut into segments of at most chunk_bytes, a message end each. A transfer i with
a peer at level l (topology.py) costs its own ends

    e_i = alpha_l * segments_i + beta_l * bytes_i

and crosses the shared resources of its path (NICs, leaf and spine uplinks, the host
bus: Topology.paths), each of which drains, in the step, every byte that crosses it
at its own seconds per byte: drain_R = beta_R * (bytes crossing R in the step). Then

    ports    P_r = max(max_i e_i, sum_i e_i / ports): the rank moves `ports` messages
             at once (1: one after another, ringcoll.model's rule);
    sharing  F_r = max_i (alpha_l * segments_i + max over R on i's path of drain_R):
             a message is done no sooner than the busiest resource it crosses has
             drained (k equal flows through one NIC: k times one flow's time);
    compute  gamma per byte it reduces, copy per byte it copies locally (a send to
             itself paired with its receive: a Bruck all-to-all's packing);

    T_r = max(P_r, F_r) + compute_r.

A step lasts as long as its slowest rank (or, on a host whose ranks outnumber its
cores, their total over the cores, as ringcoll.model); with ports = 1 and nothing
shared beyond a rank's own messages F_r <= P_r, and this is ringcoll.model's
arithmetic (on one host the two agree: tests/test_model.py). The fingerprint's step
(HEADER rows) carries two 64-byte messages a peer.

Symmetry (steps.py): rows exist for ranks 0..L-1 only; every resource's drain is
summed over the orbit of resources that translation by L maps onto each other
(Topology.orbits), so a resource's drain counts every rank's messages though only
L ranks' rows are read.
"""

from __future__ import annotations

import numpy as np

from ..model import HEADER_BYTES
from .steps import HEADER, LOCAL_COPY, LOCAL_REDUCE, RECV_REDUCE, SEND, Steps
from .topology import Topology

BATCH_ROWS = 2_000_000  # rows priced at once (memory: ~40 arrays of this many values)


def price(st: Steps, topo: Topology, elem: int):
    """(step seconds of each group, counts of each group's slowest rank: (msgs, bytes,
    reduced, copied), whether anything moves in each group)."""
    groups = len(st.counts)
    seconds = np.zeros(groups)
    counts = np.zeros((groups, 4))
    moves = np.zeros(groups, dtype=bool)
    canon, mult = topo.orbits(st.period)
    beta_r = topo.resource_beta()
    order = np.argsort(st.rows[:, 0], kind="stable")
    rows = st.rows[order]
    starts = np.searchsorted(rows[:, 0], np.arange(groups + 1))
    g0 = 0
    while g0 < groups:  # batches of whole groups, at most BATCH_ROWS rows when it can
        g1 = g0 + 1
        while g1 < groups and starts[g1 + 1] - starts[g0] <= BATCH_ROWS:
            g1 += 1
        batch = rows[starts[g0]:starts[g1]]
        t, c, m = _price_batch(batch, g0, g1 - g0, st, topo, elem, canon, mult, beta_r)
        seconds[g0:g1], counts[g0:g1], moves[g0:g1] = t, c, m
        g0 = g1
    return seconds, counts, moves


def _price_batch(rows, g0, ng, st: Steps, topo: Topology, elem, canon, mult, beta_r):
    L = st.period
    g, r, q, kind, elems = (rows[:, i] for i in range(5))
    g = g - g0
    links = topo.links()
    cores = topo.cores or topo.per_host
    crowded = topo.per_host > cores
    alpha_l = np.array([x.alpha for x in links]) + (topo.wake if crowded else 0.0)
    beta_l = np.array([x.beta for x in links])
    seg = max(1, topo.chunk_bytes // elem) * elem

    header = kind == HEADER
    local = (kind == LOCAL_COPY) | (kind == LOCAL_REDUCE)
    nb = np.where(header, 2 * HEADER_BYTES, elems * elem).astype(np.float64)
    lvl = topo.level(r, q)
    msgs = np.where(header, 2, np.where(local, 0, -(-nb // seg)))
    moved_nb = np.where(local, 0.0, nb)
    e = msgs * alpha_l[lvl] + moved_nb * beta_l[lvl]
    reduced = np.where((kind == RECV_REDUCE) | (kind == LOCAL_REDUCE), nb, 0.0)
    copied = np.where(kind == LOCAL_COPY, nb, 0.0)

    key = g * L + r
    size = ng * L
    total_e = np.bincount(key, e, size)
    most_e = np.zeros(size)
    np.maximum.at(most_e, key, e)
    ports = np.maximum(most_e, total_e / topo.ports)

    # sharing: the drain of each resource (canonical: one of its orbit) in each group,
    # from the flows each message's sender side gives (a send, or the header's one
    # message out), then each message end's busiest resource
    sends = (kind == SEND) | header
    src, dst = np.where(sends, r, q), np.where(sends, q, r)  # the flow's ends
    flow = sends & ~local
    paths = topo.paths(src, dst)
    nres = len(canon)
    fb = np.where(header, HEADER_BYTES, moved_nb)
    crossed = paths >= 0
    # (group, canonical resource) of every crossing, kept compact: a group touches few
    # of the resources, and groups x resources would not fit (16384 x 35000)
    keys = np.where(crossed, g[:, None] * nres + canon[np.maximum(paths, 0)], -1)
    used, at = np.unique(keys[crossed], return_inverse=True)
    res = canon[np.maximum(paths, 0)]
    seconds_on = fb[:, None] * mult[res] * beta_r[res]  # a flow's share of each drain
    carries = crossed & flow[:, None]  # the sender's side gives the flow, once
    drain = np.bincount(at, np.where(carries, seconds_on, 0.0)[crossed], len(used))
    ends = crossed & ~local[:, None]
    per = np.zeros(keys.shape)
    per[crossed] = drain[at]
    busiest = np.where(ends, per, 0.0).max(axis=1)
    shared = np.zeros(size)
    np.maximum.at(shared, key, msgs * alpha_l[lvl] + busiest)

    compute = (np.bincount(key, reduced, size) * topo.gamma
               + np.bincount(key, copied, size) * topo.copy)
    per_rank = (np.maximum(ports, shared) + compute).reshape(ng, L)
    cnt = np.stack([np.bincount(key, w, size) for w in (msgs.astype(np.float64), moved_nb,
                                                         reduced, copied)],
                   axis=1).reshape(ng, L, 4)
    slowest = np.argmax(per_rank, axis=1)
    t = per_rank[np.arange(ng), slowest]
    row = cnt[np.arange(ng), slowest]
    if crowded:
        t, row = _spread(per_rank, cnt, t, row, topo, L, cores)
    moves = cnt[:, :, 0].any(axis=1)
    return t, row, moves


def _spread(per_rank, cnt, t, row, topo: Topology, L, cores):
    """Where a host's ranks outnumber its cores: the host's work over its cores, when
    longer than the slowest rank's (ringcoll.model's rule), for the hosts whose ranks
    all lie among 0..L-1 (by symmetry, every host's sum is one of theirs)."""
    host = topo.host_of(np.arange(L))
    counts = np.bincount(host)
    full = np.flatnonzero(counts == topo.per_host)  # hosts whole among the ranks read
    if not len(full):
        raise ValueError("ranks outnumbering cores with a placement whose hosts do not "
                         "lie within the ranks priced: name cores, or place in blocks")
    ng = per_rank.shape[0]
    inside = np.isin(host, full)
    idx = np.searchsorted(full, host[inside])
    sums = np.zeros((ng, len(full)))
    np.add.at(sums.T, idx, per_rank[:, inside].T)
    spread = sums / cores
    h = np.argmax(spread, axis=1)
    worse = spread[np.arange(ng), h] > t
    hc = np.zeros((ng, len(full), 4))
    np.add.at(hc.transpose(1, 0, 2), idx, cnt[:, inside].transpose(1, 0, 2))
    t = np.where(worse, spread[np.arange(ng), h], t)
    row = np.where(worse[:, None], hc[np.arange(ng), h] / cores, row)
    return t, row
