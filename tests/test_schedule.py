"""Pure tests of the schedules and of the executor's plan: no processes, no transport.

  * split: parts tile their range in order, sizes differ by at most one, and parts
    of parts nest (what recursive halving needs);
  * the generic checker (ringcoll.check) proves every registered algorithm's
    all-reduce, reduce-scatter, all-gather, broadcast, reduce, gather, scatter and
    all-to-all (those it provides) for world sizes 1..64, for counts 0..3p+1 (sampled above p = 16),
    every root (sampled above p = 16), and ring orders that group interleaved
    hosts; a collective an algorithm does not provide is refused by name;
  * the checker itself fails on schedules broken in each way it looks for (a
    checker that cannot fail proves nothing);
  * the ring's shape: 2(p-1) steps of one send and one receive with its neighbours,
    each rank sending 2(p-1)/p of the buffer;
  * the plan: every two operations that touch the same elements and conflict are
    ordered by a dependency chain; segments of one step depend only on the
    segments they read (no barrier between steps); forwarding is planned where a
    send carries what a receive-reduce just produced.
"""

from __future__ import annotations

import copy

import pytest

import ringcoll
from ringcoll import _C, check, schedules

WORLD = list(range(1, 17)) + [24, 31, 32, 48, 64]
# What ringcoll ships: the built-in algorithms and those written in Python that it
# registers (others a test registered are tested where they are defined).
ALGOS = [a for a in ringcoll.algorithms() if _C.is_builtin(a) or a in schedules.SHIPPED]


def provides(algo, collective):
    """Whether algo has a schedule for collective (check's names)."""
    return collective.replace("_", "") in _C.provides(algo)


def counts(p):
    if p <= 16:
        return range(0, 3 * p + 2)
    return sorted({0, 1, p - 1, p, p + 1, 2 * p + 3, 3 * p + 1})


def roots(p):
    return range(p) if p <= 16 else sorted({0, 1, p // 2, p - 1})


# --------------------------------------------------------------------------------
# split


@pytest.mark.parametrize("n", [0, 1, 2, 5, 7, 16, 31, 100, 1001])
def test_split_tiles_and_nests(n):
    for k in range(1, 9):
        parts = [_C.split(3, 3 + n, k, i) for i in range(k)]
        assert parts[0][0] == 3 and parts[-1][1] == 3 + n
        assert all(a[1] == b[0] for a, b in zip(parts, parts[1:]))
        sizes = [e - b for b, e in parts]
        assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
    # Halves of halves of halves: each level tiles the level above, and all parts at
    # one depth differ in size by at most one.
    level = [(0, n)]
    for _ in range(4):
        nxt = []
        for b, e in level:
            halves = [_C.split(b, e, 2, i) for i in range(2)]
            assert halves[0][0] == b and halves[0][1] == halves[1][0] and halves[1][1] == e
            nxt += halves
        sizes = [e - b for b, e in nxt]
        assert max(sizes) - min(sizes) <= 1, (n, nxt)
        level = nxt


def test_block_range_large_counts():
    n = (1 << 40) + 1  # beyond 32 bits; n % 7 == 3
    ranges = [_C.block_range(n, 7, i) for i in range(7)]
    assert ranges[0][0] == 0 and ranges[-1][1] == n
    assert [b - a for a, b in ranges] == [n // 7 + 1] * 3 + [n // 7] * 4


# --------------------------------------------------------------------------------
# every algorithm, every collective, through the generic checker


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("p", WORLD)
def test_checker_proves_reductions(algo, p):
    for n in counts(p):
        if provides(algo, "allreduce"):
            check.check(algo, "allreduce", p, n)
        if n % p == 0 and provides(algo, "reduce_scatter"):
            check.check(algo, "reduce_scatter", p, n)
    if provides(algo, "reduce"):
        for root in roots(p):
            for n in sorted({0, 1, p - 1, p + 1, 3 * p + 1}):
                check.check(algo, "reduce", p, n, root=root)


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("p", WORLD)
def test_checker_proves_copies(algo, p):
    for n in counts(p):
        if n % p == 0 and provides(algo, "allgather"):
            check.check(algo, "allgather", p, n)
    if provides(algo, "broadcast"):
        for root in roots(p):
            for n in sorted({0, 1, p + 1, 3 * p + 1}):
                check.check(algo, "broadcast", p, n, root=root)


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("order", [[0, 2, 1, 3], [1, 3, 5, 0, 2, 4], [0, 4, 1, 5, 2, 6, 3, 7],
                                   [5, 4, 3, 2, 1, 0]])
def test_checker_proves_host_orders(algo, order):
    p = len(order)
    for n in sorted({0, 1, p - 1, p + 1, 3 * p + 1, 4 * p}):
        if provides(algo, "allreduce"):
            check.check(algo, "allreduce", p, n, order=order)
        for root in (0, p - 1):
            for c in ("broadcast", "reduce"):
                if provides(algo, c):
                    check.check(algo, c, p, n, root=root, order=order)
    for m in (0, 1, 3):
        for c in ("reduce_scatter", "allgather"):
            if provides(algo, c):
                check.check(algo, c, p, p * m, order=order)


@pytest.mark.parametrize("algo", [a for a in ALGOS if any(
    provides(a, c) for c in ("gather", "scatter", "alltoall"))])
@pytest.mark.parametrize("p", WORLD)
def test_checker_proves_exchanges(algo, p):
    for m in (0, 1, 2) if p <= 16 else (0, 1):
        for root in roots(p):
            for c in ("gather", "scatter"):
                if provides(algo, c):
                    check.check(algo, c, p, p * m, root=root)
    if provides(algo, "alltoall"):
        for n in sorted({0, 1, p - 1, p + 1, 2 * p + 3}):
            check.check(algo, "alltoall", p, n)
        # every pair a different size, the own block too
        check.check(algo, "alltoall", p, 0,
                    counts=[[(3 * s + d) % 4 for d in range(p)] for s in range(p)])


def test_oneshot_keeps_its_input_in_scratch():
    # Every message is a send of the kept copy [n, 2n) to another rank, p-1 of them,
    # one to each peer; every rank receives each peer's input once and folds all p
    # in rank order: rank 0 reduces each arrival into [0, n), rank r >= 1 copies
    # x0 over [0, n), reduces x1 .. x(r-1) there as they come, then (locally) its
    # own input and the p-1-r inputs it parked in slots past 2n. Scratch: the copy
    # plus the slots (none for p = 1).
    for p in (1, 2, 3, 5):
        n = 7
        for r, sched in enumerate(check.schedules("oneshot", "allreduce", p, n)):
            slots = 0 if r == 0 else p - 1 - r
            assert sched["scratch"] == ((1 + slots) * n if p > 1 else 0)
            ts = [t for st in sched["steps"] for t in st["transfers"]]
            sends = [t for t in ts if t[0] == "send" and t[1] != r]
            assert all(t[2:] == (n, 2 * n) for t in sends)
            assert sorted(t[1] for t in sends) == [q for q in range(p) if q != r]
            # What reaches [0, n), in order (r: a local receive), and where from.
            folded = [(k, q) for k, q, b, e in ts if (b, e) == (0, n) and k != "send"]
            local_srcs = [b for k, q, b, e in ts if k == "send" and q == r]
            parked = {b: q for k, q, b, e in ts if k == "recv_copy" and b >= 2 * n}
            if r == 0:
                assert folded == [("recv_reduce", q) for q in range(1, p)] and not local_srcs
                continue
            assert folded == ([("recv_copy", 0)] + [("recv_reduce", q) for q in range(1, r)]
                              + [("recv_reduce", r)] * (1 + slots))
            # its own input, then the parked inputs r+1 .. p-1 in rank order
            assert local_srcs == [n] + [(2 + k) * n for k in range(slots)]
            assert [parked[b] for b in local_srcs[1:]] == list(range(r + 1, p))


def test_biring_uses_both_directions():
    # Every step of every rank sends one half-chunk to each neighbour.
    p, n = 5, 40
    for r, sched in enumerate(check.schedules("biring", "allreduce", p, n)):
        assert len(sched["steps"]) == 2 * (p - 1)
        for st in sched["steps"]:
            sends = sorted(t[1] for t in st["transfers"] if t[0] == "send")
            assert sends == sorted([(r + 1) % p, (r - 1) % p])
            assert all(t[3] - t[2] == n // p // 2 for t in st["transfers"])


# --------------------------------------------------------------------------------
# the checker fails on broken schedules


def _broken(collective, p, n, mutate, root=0, algo="ring"):
    scheds = check.schedules(algo, collective, p, n, root)
    scheds = copy.deepcopy(scheds)
    mutate(scheds)
    return scheds


def _first(scheds, rank, kind):
    for s, step in enumerate(scheds[rank]["steps"]):
        for i, t in enumerate(step["transfers"]):
            if t[0] == kind:
                return s, i
    raise AssertionError("no such transfer")


def _set(scheds, rank, s, i, **kw):
    kind, peer, b, e = scheds[rank]["steps"][s]["transfers"][i]
    t = dict(kind=kind, peer=peer, b=b, e=e)
    t.update(kw)
    scheds[rank]["steps"][s]["transfers"][i] = (t["kind"], t["peer"], t["b"], t["e"])


def _drop_reduce(sc):
    s, i = _first(sc, 1, "recv_reduce")
    sc[1]["steps"][s]["transfers"][i] = ("recv_copy",) + tuple(sc[1]["steps"][s]["transfers"][i][1:])


def _drop_pair(sc):
    s, i = _first(sc, 0, "send")
    peer = sc[0]["steps"][s]["transfers"][i][1]
    del sc[0]["steps"][s]["transfers"][i]
    j = next(j for j, t in enumerate(sc[peer]["steps"][s]["transfers"])
             if t[0] != "send" and t[1] == 0)
    del sc[peer]["steps"][s]["transfers"][j]


def _unpaired(sc):
    s, i = _first(sc, 0, "send")
    del sc[0]["steps"][s]["transfers"][i]


def _mark_twice(sc):
    last = [st for st in sc[0]["steps"] if st["reduced"]][0]
    last["reduced"].append(last["reduced"][0])


def _mark_early(sc):
    sc[0]["steps"][0]["reduced"].append((0, 1))


def _shift_range(sc):
    # rank 1 reduces what rank 0 sends (chunk 0) into chunk 2: sizes match, no overlap
    # in the step, but every element lands on the wrong position.
    s, i = _first(sc, 1, "recv_reduce")
    _set(sc, 1, s, i, b=6, e=9)


def _write_what_is_sent(sc):
    s, i = _first(sc, 1, "send")
    j = next(j for j, t in enumerate(sc[1]["steps"][s]["transfers"]) if t[0] != "send")
    _, peer, b, e = sc[1]["steps"][s]["transfers"][i]
    _set(sc, 1, s, j, b=b, e=e)


def _self_peer(sc):
    # A send to itself is local, and pairs only with a local receive of the step.
    s, i = _first(sc, 1, "send")
    _set(sc, 1, s, i, peer=1)


def _wrong_result(sc):
    sc[0]["result"] = (0, 2)


@pytest.mark.parametrize("collective, mutate, fragment", [
    ("allreduce", _drop_reduce, "ranks"),
    ("allreduce", _drop_pair, "but it holds ranks"),
    # the executor pairs rank 1's receive with rank 0's next send, a step later
    ("allreduce", _unpaired, "deadlock: rank 1 receives [0, 3) from rank 0 in step 0, but "
                             "rank 0 sends the transfer that pairs with it ([9, 12)) in step 1"),
    ("allreduce", _mark_twice, "a second time"),
    ("allreduce", _mark_early, "marks element 0 reduced"),
    ("allreduce", _shift_range, "reduces position 0 from rank 0 into position 6"),
    ("allreduce", _write_what_is_sent, "is written while"),
    ("allreduce", _self_peer, "rank 1 sends sizes [3] to rank 1, which receives sizes []"),
    ("reduce_scatter", _wrong_result, "is not block 0"),
    ("allgather", _drop_pair, "before it holds all of it"),
])
def test_checker_catches(collective, mutate, fragment):
    p, n = 4, 12
    scheds = _broken(collective, p, n, mutate)
    with pytest.raises(check.ScheduleError) as err:
        check.check_schedules(scheds, collective, p, n)
    assert fragment in str(err.value), str(err.value)


def _fold_in_copies(sc):
    # rhd, p = 6: rank 1 copies rank 0's folded-in buffer instead of reducing it, so
    # rank 1's own contribution is lost.
    assert sc[1]["steps"][0]["transfers"][0][:2] == ("recv_reduce", 0)
    _drop_reduce(sc)


def _fold_out_skipped(sc):
    # rhd, p = 6: rank 1 never returns the result to rank 0 (both sides dropped).
    last = len(sc[0]["steps"]) - 1
    sc[0]["steps"][last]["transfers"] = []
    sc[1]["steps"][last]["transfers"] = [t for t in sc[1]["steps"][last]["transfers"]
                                         if t[1] != 0]


def _halving_keeps_wrong_half(sc):
    # rhd, p = 4: rank 0 reduces its partner's copy into the half it sent away.
    s, i = _first(sc, 0, "recv_reduce")
    j = next(j for j, t in enumerate(sc[0]["steps"][s]["transfers"]) if t[0] == "send")
    _, _, b, e = sc[0]["steps"][s]["transfers"][j]
    _set(sc, 0, s, i, b=b, e=e)


def _tree_root_marks_early(sc):
    sc[0]["steps"][0]["reduced"].append((0, 1))


def _oneshot_without_scratch(sc):
    # oneshot sends [0, n), which it is reducing into, instead of its kept copy.
    for r in sc:
        r["scratch"] = 0
        for st in r["steps"]:
            st["transfers"] = [(k, q, 0, b) if k == "send" else (k, q, b, e)
                               for k, q, b, e in st["transfers"]]


def _reads_unwritten_scratch(sc):
    # rank 1 adds a slot past its copy that nothing ever wrote (scratch past the
    # copy holds nothing until a receive fills it).
    last = sc[1]["steps"][-1]["transfers"]
    (k, q, b, e), rest = last[0], last[1:]
    assert k == "send" and q == 1
    sc[1]["scratch"] += e - b
    sc[1]["steps"][-1]["transfers"] = [(k, q, b + (e - b), e + (e - b))] + rest


def _alltoall_swaps_blocks(sc):
    # rank 0's receives from two peers land in each other's place (p = 3).
    st0, st1 = sc[0]["steps"][0]["transfers"], sc[0]["steps"][1]["transfers"]
    (k0, q0, b0, e0), (k1, q1, b1, e1) = st0[1], st1[1]
    st0[1], st1[1] = (k0, q0, b1, e1), (k1, q1, b0, e0)


def _gather_drops_a_block(sc):
    # the root never receives rank 1's block, and rank 1 never sends it.
    sc[0]["steps"][0]["transfers"] = [t for t in sc[0]["steps"][0]["transfers"] if t[1] != 1]
    sc[1]["steps"][0]["transfers"] = []


def _biring_one_direction(sc):
    # biring, p = 3: rank 0 receives its counter-clockwise half from the wrong side.
    s, i = _first(sc, 0, "recv_reduce")
    t = sc[0]["steps"][s]["transfers"]
    j = next(j for j in range(i + 1, len(t)) if t[j][0] == "recv_reduce")
    _set(sc, 0, s, j, peer=t[i][1])


@pytest.mark.parametrize("algo, collective, p, mutate, fragment", [
    ("rhd", "allreduce", 6, _fold_in_copies, "but it holds ranks"),
    ("rhd", "allreduce", 6, _fold_out_skipped, "ends with position 0, ranks [0]"),
    ("rhd", "reduce_scatter", 6, _fold_in_copies, "but it holds ranks"),
    ("rhd", "allreduce", 4, _halving_keeps_wrong_half, "is written while"),
    ("tree", "reduce", 5, _tree_root_marks_early, "marks element 0 reduced"),
    ("twoshot", "allreduce", 3, _drop_pair, "but it holds ranks"),
    ("oneshot", "allreduce", 3, _oneshot_without_scratch, "is written while"),
    ("oneshot", "allreduce", 3, _reads_unwritten_scratch, "before it holds all of it"),
    ("biring", "allreduce", 3, _biring_one_direction, "deadlock: rank 1 sends [3, 4) to rank 0 "
                                                      "in step 0, but rank 0 receives"),
    ("direct", "alltoall", 3, _alltoall_swaps_blocks, "block for rank 0"),
    ("direct", "gather", 3, _gather_drops_a_block, "ends with nothing"),
])
def test_checker_catches_broken_algorithms(algo, collective, p, mutate, fragment):
    n = 2 * p
    scheds = _broken(collective, p, n, mutate, algo=algo)
    with pytest.raises(check.ScheduleError) as err:
        check.check_schedules(scheds, collective, p, n)
    assert fragment in str(err.value), str(err.value)


def test_checker_catches_a_chain_that_skips_a_rank():
    p, n = 4, 5

    def skip(sc):  # rank 1 forwards to rank 3 instead of rank 2
        s, i = _first(sc, 1, "send")
        _set(sc, 1, s, i, peer=3)
    scheds = _broken("broadcast", p, n, skip)
    with pytest.raises(check.ScheduleError):
        check.check_schedules(scheds, "broadcast", p, n)


def test_unknown_algorithm_and_collective_are_refused():
    with pytest.raises(Exception, match="unknown algorithm 'nope'"):
        _C.schedule("nope", "allreduce", 2, 0, 4)
    with pytest.raises(Exception, match="unknown collective"):
        _C.schedule("ring", "alltoal", 2, 0, 4)
    with pytest.raises(ValueError, match="'ring' does not provide alltoall"):
        _C.schedule("ring", "alltoall", 2, 0, 4)
    with pytest.raises(ValueError, match="unknown collective 'all'"):
        check.check("direct", "all", 2, 4)
    assert "ring" in ALGOS


@pytest.mark.parametrize("algo, collective, provided", [
    ("tree", "reduce_scatter", "allreduce, broadcast, reduce, barrier"),
    ("tree", "allgather", "allreduce, broadcast, reduce, barrier"),
    ("rhd", "broadcast", "allreduce, reducescatter, allgather, barrier"),
    ("twoshot", "reduce", "allreduce, reducescatter, allgather, barrier"),
    ("oneshot", "reduce_scatter", "allreduce, barrier"),
    ("biring", "broadcast", "allreduce, barrier"),
    ("direct", "allreduce", "gather, scatter, alltoall"),
    ("ring", "gather", "allreduce, reducescatter, allgather, broadcast, reduce, barrier"),
])
def test_missing_collective_is_refused_by_name(algo, collective, provided):
    with pytest.raises(ValueError) as err:
        _C.schedule(algo, collective, 4, 0, 8)
    msg = str(err.value)
    assert f"'{algo}' does not provide {collective.replace('_', '')}" in msg, msg
    assert f"({algo} provides: {provided})" in msg, msg


# --------------------------------------------------------------------------------
# the ring's shape


@pytest.mark.parametrize("p", [2, 3, 5, 8])
def test_ring_allreduce_is_bandwidth_optimal(p):
    n = 10 * p + 3
    for r in range(p):
        steps = _C.schedule("ring", "allreduce", p, r, n)["steps"]
        assert len(steps) == 2 * (p - 1)
        sizes = []
        for s, st in enumerate(steps):
            kinds = sorted(t[0] for t in st["transfers"])
            assert kinds == sorted(["send", "recv_reduce" if s < p - 1 else "recv_copy"])
            for kind, peer, b, e in st["transfers"]:
                assert peer == ((r + 1) % p if kind == "send" else (r - 1) % p)
                if kind == "send":
                    sizes.append(e - b)
        # One chunk of about n/p per step: 2(p-1)/p of the buffer in all.
        assert all(n // p <= sz <= n // p + 1 for sz in sizes)
        assert len(sizes) == 2 * (p - 1)


# --------------------------------------------------------------------------------
# the plan


def _reads(kind):
    return kind != "recv_copy"


def _writes(kind):
    return kind != "send"


@pytest.mark.parametrize("collective, p, n, seg", [
    ("allreduce", 2, 9, 2), ("allreduce", 3, 20, 3), ("allreduce", 4, 37, 4),
    ("allreduce", 5, 5, 1), ("reduce_scatter", 4, 32, 3), ("allgather", 3, 21, 2),
    ("broadcast", 4, 23, 5), ("allreduce", 6, 200, 7),
])
def test_plan_orders_every_conflict(collective, p, n, seg, algo="ring"):
    for rank in range(p):
        ops = _C.plan_ops(algo, collective, p, rank, n, seg, finish=True)
        reach = []  # transitive dependencies of each op
        for i, (kind, peer, step, b, cnt, deps, fwd, live, _, _) in enumerate(ops):
            assert all(d < i for d in deps), f"op {i} depends on a later op"
            assert cnt <= seg and cnt > 0
            r = set(deps)
            for d in deps:
                r |= reach[d]
            reach.append(r)
            for j in range(i):
                kj, _, _, bj, cj, _, _, _, _, _ = ops[j]
                overlap = bj < b + cnt and b < bj + cj
                conflict = overlap and (_writes(kind) or _writes(kj))
                if conflict:
                    assert j in reach[i], (
                        f"rank {rank}: op {i} ({kind} [{b},{b+cnt})) not ordered after op "
                        f"{j} ({kj} [{bj},{bj+cj}))")


def test_plan_has_no_barrier_between_steps():
    # p = 3, 2 segments per chunk: the first segment of step 1's send depends on the
    # first segment of step 0's receive only, not on the second.
    ops = _C.plan_ops("ring", "allreduce", 3, 0, 12, 2)
    step1_sends = [i for i, o in enumerate(ops) if o[0] == "send" and o[2] == 1]
    first = ops[step1_sends[0]]
    dep_ops = [ops[d] for d in first[5]]
    assert len(dep_ops) == 1 and dep_ops[0][0] == "recv_reduce" and dep_ops[0][2] == 0
    assert dep_ops[0][3] == first[3] and dep_ops[0][4] == first[4]


def test_plan_forwards_reductions():
    # p = 4 all-reduce: the receive-reduces of steps 0 and 1 feed the sends of the next
    # step and are overwritten later: forwarded, no in-place result needed. The last
    # reduce (the owned chunk) feeds the all-gather and is part of the result.
    ops = _C.plan_ops("ring", "allreduce", 4, 0, 16, 4)
    reduces = [o for o in ops if o[0] == "recv_reduce"]
    assert [o[6] >= 0 for o in reduces] == [True, True, True]
    assert [o[7] for o in reduces] == [False, False, True]
    for o in reduces:
        fwd = ops[o[6]]
        assert fwd[0] == "send" and fwd[3] == o[3] and fwd[4] == o[4]
    # With AVG's finishing pass the owned chunk's send waits for the division, so that
    # reduce is not forwarded.
    ops = _C.plan_ops("ring", "allreduce", 4, 0, 16, 4, finish=True)
    reduces = [o for o in ops if o[0] == "recv_reduce"]
    assert [o[6] >= 0 for o in reduces] == [True, True, False]
    # reduce-scatter: only rank r's chunk is the result; every forwarded reduce is dead
    # in place.
    ops = _C.plan_ops("ring", "reduce_scatter", 4, 0, 16, 4)
    reduces = [o for o in ops if o[0] == "recv_reduce"]
    assert [(o[6] >= 0, o[7]) for o in reduces] == [(True, False), (True, False), (False, True)]


@pytest.mark.parametrize("collective, p, n, seg", [
    ("allreduce", 2, 9, 2), ("allreduce", 3, 20, 3), ("allreduce", 5, 101, 4),
    ("reduce_scatter", 4, 32, 3), ("allgather", 3, 21, 2), ("broadcast", 4, 23, 5),
    # one segment per transfer: steps group into layers where they can
    ("allreduce", 4, 32, 64), ("reduce_scatter", 5, 25, 64), ("broadcast", 5, 23, 64),
])
def test_waves_pair_across_ranks(collective, p, n, seg, algo="ring", root=0):
    """A stream-ordered transport (NCCL) gets one batch per wave (plan.h). No rank may
    wait forever for a peer: each rank's batches hold ascending (step, segment)
    ranges, a batch that spans steps holds only transfers of one segment, and the
    k-th message from a to b is the same step, segment and size on both ranks. A
    rank may group steps its peers keep apart (plan.h says why that is safe)."""
    plans = [_C.plan_ops(algo, collective, p, r, n, seg, finish=True, root=root)
             for r in range(p)]
    segs_of = []  # per rank: op index -> its segment index within its transfer
    for r, ops in enumerate(plans):
        waves = {}
        for kind, peer, step, b, cnt, deps, fwd, live, wave, sg in ops:
            if kind in ("finish", "local_copy", "local_reduce"):
                assert wave == -1  # no transfer: in no batch
                continue
            waves.setdefault(wave, []).append((step, sg))
        assert sorted(waves) == list(range(len(waves))), f"rank {r}: waves {sorted(waves)}"
        seg_index = {i: o[9] for i, o in enumerate(ops)}
        by_wave = {}
        for i, o in enumerate(ops):
            if o[8] >= 0:
                by_wave.setdefault(o[8], []).append((o[2], seg_index[i], i))
        prev_max = None
        for w in sorted(by_wave):
            keys = [(st, sg) for st, sg, _ in by_wave[w]]
            steps = {st for st, _ in keys}
            if len(steps) > 1:
                assert all(sg == 0 for _, sg in keys), f"rank {r}: wave {w} spans steps " \
                    f"{sorted(steps)} with more than one segment"
                for st in steps:
                    assert not any(o[2] == st and seg_index.get(i, 0) > 0
                                   for i, o in enumerate(ops) if o[8] >= 0), \
                        f"rank {r}: wave {w} groups step {st}, which has several segments"
            else:
                assert len({sg for _, sg in keys}) == 1, f"rank {r}: wave {w} mixes segments"
            if prev_max is not None:
                assert min(keys) > prev_max, f"rank {r}: wave {w} holds {min(keys)}, not " \
                    f"after the wave before it ({prev_max})"
            prev_max = max(keys)
        segs_of.append(seg_index)
    for a in range(p):
        for b in range(p):
            if a == b:
                continue
            # The messages a->b in the order the executor posts them (batch by batch,
            # plan order within one): the transport pairs the k-th send with the k-th
            # receive, which must be the same step, segment and size.
            sends = sorted((o[8], i) for i, o in enumerate(plans[a])
                           if o[0] == "send" and o[1] == b)
            recvs = sorted((o[8], i) for i, o in enumerate(plans[b])
                           if o[0].startswith("recv") and o[1] == a)
            assert len(sends) == len(recvs), f"{a}->{b}: {len(sends)} sends, {len(recvs)} receives"
            for k, ((_, i), (_, j)) in enumerate(zip(sends, recvs)):
                sa, sb = plans[a][i], plans[b][j]
                assert (sa[2], segs_of[a][i], sa[4]) == (sb[2], segs_of[b][j], sb[4]), \
                    f"{a}->{b}: message {k} is step {sa[2]} segment {segs_of[a][i]} " \
                    f"({sa[4]} elements) on the sender, step {sb[2]} segment " \
                    f"{segs_of[b][j]} ({sb[4]} elements) on the receiver"


@pytest.mark.parametrize("algo, collective, p, batches", [
    ("oneshot", "allreduce", 4, 1), ("oneshot", "allreduce", 8, 1),
    ("twoshot", "allreduce", 5, 2), ("twoshot", "reduce_scatter", 4, 1),
    ("twoshot", "allgather", 4, 1), ("ring", "allreduce", 4, 6),
])
def test_one_hop_phases_are_one_batch(algo, collective, p, batches):
    """Small buffers (one segment per transfer): a one-hop phase is one batch (one
    NCCL group) on every rank, a ring one per step."""
    n = 4 * p
    for r in range(p):
        ops = _C.plan_ops(algo, collective, p, r, n, 1 << 20, finish=True)
        waves = {o[8] for o in ops if o[8] >= 0}
        assert len(waves) == batches, f"{algo} {collective} p={p} rank {r}: {len(waves)} batches"


# The other algorithms' schedules through the same plan checks: several transfers
# per step, idle ranks (rhd's folded-out ranks, tree leaves), whole-buffer
# transfers forwarded down a tree.
NEW_ALGO_PLANS = [(a, c, p) for a in ALGOS if a != "ring"
                  for c in ("allreduce", "reduce_scatter", "allgather", "broadcast", "reduce")
                  for p in (3, 4, 6) if provides(a, c)]


@pytest.mark.parametrize("algo, collective, p", NEW_ALGO_PLANS)
def test_plans_of_every_algorithm(algo, collective, p):
    n, seg = 7 * p, 3
    test_plan_orders_every_conflict(collective, p, n, seg, algo=algo)
    for root in sorted({0, p - 1}):
        test_waves_pair_across_ranks(collective, p, n, seg, algo=algo, root=root)


def test_checker_catches_ranks_that_fold_in_their_own_order():
    # One-shot as it was: rank r reduces its input, then r-1, r-2, ... into place.
    # Every element holds every contribution once, so only the fold check sees that
    # rank 0 sums (x0 + x2) + x1 and rank 1 (x1 + x0) + x2: different bits.
    p, n = 3, 4
    scheds = [{"name": "own-order", "result": (0, n), "scratch": n,
               "steps": [{"transfers": [("send", (r + 1 + i) % p, n, 2 * n),
                                        ("recv_reduce", (r - 1 - i) % p, 0, n)],
                          "reduced": [(0, n)] if i == p - 2 else []} for i in range(p - 1)]}
              for r in range(p)]
    with pytest.raises(check.ScheduleError, match=r"folded as \(\(1 \+ 0\) \+ 2\) on rank 1 "
                                                  r"but as \(\(0 \+ 2\) \+ 1\) on rank 0"):
        check.check_schedules(scheds, "allreduce", p, n)
