"""Pure tests of the schedules (csrc/algo/ring.cc), no processes, no transport.

The steps `_C.schedule_steps` reports for every rank are walked in lock-step: every
rank's step s is computed from the state before step s (a send reads the sender's
pre-step buffer), then all receives are applied. The data is symbolic: each element
of each rank's buffer is a tuple of the ranks whose input it contains (a multiset),
so a "reduce" receive concatenates tuples and a "copy" receive replaces one.

For world sizes 1..16 (and element counts 0..3p+1, so empty blocks when n < p):
  * block_range tiles [0, n) in order with sizes that differ by at most one;
  * every step is consistent: each send is matched by the peer's receive of the
    same block from this rank (and vice versa), no rank is written by two senders,
    no rank sends and receives the same block, peers and blocks are in range;
  * all-reduce: every element on every rank ends with each rank's contribution
    exactly once (each chunk reduced exactly p times, nothing counted twice); after
    phase 1 rank r reports and holds the fully reduced chunk (r + 1) mod p; phase 2
    only ever forwards fully reduced chunks;
  * reduce-scatter: rank r ends with chunk r fully reduced;
  * all-gather: rank r starts with chunk r only; every rank ends with every chunk,
    each from its owner, and nobody forwards a chunk before it has it;
  * broadcast (every root, 1/2/5 pipeline blocks): every rank ends with the root's
    blocks, each non-root rank receives each block exactly once, the root none.
"""

from __future__ import annotations

from collections import Counter

import pytest

from ringcoll import _C

WORLD = list(range(1, 17))
ACTIONS = ("reduce", "copy")


# --------------------------------------------------------------------------------
# helpers


def phases_of(collective, p, pipeline_blocks=1, root=0):
    """[(name, owned[rank], steps[rank][s])] for one collective, all ranks."""
    per_rank = [_C.schedule_steps("ring", collective, p, r, pipeline_blocks, root)
                for r in range(p)]
    nphases = len(per_rank[0])
    assert all(len(ph) == nphases for ph in per_rank), f"{collective} p={p}: phase counts"
    phases = []
    for i in range(nphases):
        names = {per_rank[r][i][0] for r in range(p)}
        assert len(names) == 1, f"{collective} p={p}: phase {i} named {names}"
        owned = [per_rank[r][i][1] for r in range(p)]
        steps = [list(per_rank[r][i][2]) for r in range(p)]
        phases.append((names.pop(), owned, steps))
    return phases


def check_steps(steps, p, k, where):
    """Structural invariants of one phase's steps (all ranks, all steps)."""
    nsteps = len(steps[0])
    assert all(len(st) == nsteps for st in steps), f"{where}: ranks disagree on step count"
    for s in range(nsteps):
        writers = Counter()
        for r in range(p):
            sp, sb, rp, rb, action = steps[r][s]
            at = f"{where} step {s} rank {r}"
            assert action in ACTIONS, f"{at}: action {action!r}"
            assert -1 <= sp < p and -1 <= rp < p, f"{at}: peers {sp}, {rp}"
            assert sp != r and rp != r, f"{at}: transfer to itself"
            if sp >= 0:
                assert 0 <= sb < k, f"{at}: sends block {sb} of {k}"
                psp, psb, prp, prb, _ = steps[sp][s]
                assert prp == r and prb == sb, (
                    f"{at}: sends block {sb} to {sp}, which receives block {prb} "
                    f"from {prp}")
                writers[sp] += 1
            if rp >= 0:
                assert 0 <= rb < k, f"{at}: receives block {rb} of {k}"
                psp, psb, _, _, _ = steps[rp][s]
                assert psp == r and psb == rb, (
                    f"{at}: receives block {rb} from {rp}, which sends block {psb} "
                    f"to {psp}")
                assert not (sp >= 0 and sb == rb), f"{at}: sends and receives block {rb}"
        assert all(c <= 1 for c in writers.values()), f"{where} step {s}: {writers}"


def simulate(phases, p, n, k, init, on_send=None):
    """Walks the phases over element-level symbolic buffers, in lock-step.

    init[r][e] is a tuple (the multiset of contributions of element e on rank r).
    on_send(phase_index, rank, block, contents) may check what a rank sends.
    Returns (final buffers, [buffers after each phase])."""
    buf = [list(b) for b in init]
    after = []
    for pi, (name, _, steps) in enumerate(phases):
        where = f"{name} p={p} n={n}"
        check_steps(steps, p, k, where)
        ranges = [_C.block_range(n, k, i) for i in range(k)]
        for s in range(len(steps[0])):
            pre = [list(b) for b in buf]  # every send reads the pre-step state
            for r in range(p):
                sp, sb, rp, rb, action = steps[r][s]
                if sp >= 0 and on_send is not None:
                    lo, hi = ranges[sb]
                    on_send(pi, r, sb, pre[r][lo:hi])
                if rp < 0:
                    continue
                lo, hi = ranges[rb]
                for e in range(lo, hi):
                    if action == "reduce":
                        overlap = set(buf[r][e]) & set(pre[rp][e])
                        assert not overlap, (
                            f"{where} step {s}: rank {r} reduces element {e} from {rp} "
                            f"counting ranks {sorted(overlap)} twice")
                        buf[r][e] = buf[r][e] + pre[rp][e]
                    else:
                        buf[r][e] = pre[rp][e]
        after.append([list(b) for b in buf])
    return buf, after


def full(p):
    return tuple(range(p))


def is_full(t, p):
    return tuple(sorted(t)) == full(p)


def counts(p):
    return range(0, 3 * p + 2)


# --------------------------------------------------------------------------------
# block_range


@pytest.mark.parametrize("p", WORLD)
def test_block_range_tiles(p):
    for n in counts(p):
        ranges = [_C.block_range(n, p, i) for i in range(p)]
        assert ranges[0][0] == 0 and ranges[-1][1] == n, (n, ranges)
        for (_, end), (begin, _) in zip(ranges, ranges[1:]):
            assert end == begin, (n, ranges)
        sizes = [b - a for a, b in ranges]
        assert all(sz >= 0 for sz in sizes), (n, ranges)
        assert max(sizes) - min(sizes) <= 1, (n, sizes)
        # The first n % p blocks are the larger ones.
        assert sizes == [n // p + (1 if i < n % p else 0) for i in range(p)], (n, sizes)


def test_block_range_large_counts():
    n = (1 << 40) + 1  # beyond 32 bits; n % 7 == 3
    ranges = [_C.block_range(n, 7, i) for i in range(7)]
    assert ranges[0][0] == 0 and ranges[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    assert [b - a for a, b in ranges] == [n // 7 + 1] * 3 + [n // 7] * 4


# --------------------------------------------------------------------------------
# all-reduce


@pytest.mark.parametrize("p", WORLD)
def test_allreduce_shape(p):
    phases = phases_of("allreduce", p)
    assert len(phases) == 2
    (_, owned1, steps1), (_, owned2, steps2) = phases
    # Bandwidth-optimal: p-1 steps per phase, one block sent per rank per step.
    assert all(len(st) == p - 1 for st in steps1 + steps2)
    assert all(x[4] == "reduce" and x[0] >= 0 and x[2] >= 0 for st in steps1 for x in st)
    assert all(x[4] == "copy" and x[0] >= 0 and x[2] >= 0 for st in steps2 for x in st)
    assert owned1 == [(r + 1) % p for r in range(p)]
    assert owned2 == [-1] * p


@pytest.mark.parametrize("p", WORLD)
def test_allreduce_each_chunk_reduced_exactly_p_times(p):
    phases = phases_of("allreduce", p)
    owned1 = phases[0][1]
    for n in counts(p):
        ranges = [_C.block_range(n, p, i) for i in range(p)]

        def on_send(pi, r, block, contents, n=n):
            if pi == 1:  # share-only: forward fully reduced chunks only
                assert all(is_full(c, p) for c in contents), (
                    f"p={p} n={n}: rank {r} forwards partial chunk {block}: {contents}")

        init = [[(r,) for _ in range(n)] for r in range(p)]
        buf, after = simulate(phases, p, n, p, init, on_send)
        # After share-reduce rank r holds the fully reduced chunk (r + 1) mod p, and
        # that chunk only: every other chunk is still missing someone.
        for r in range(p):
            lo, hi = ranges[owned1[r]]
            for e in range(lo, hi):
                assert is_full(after[0][r][e], p), f"p={p} n={n} rank {r} element {e}"
            if p > 1:
                for e in range(n):
                    if not lo <= e < hi:
                        assert not is_full(after[0][r][e], p), \
                            f"p={p} n={n} rank {r} element {e} reduced early"
        for r in range(p):
            for e in range(n):
                assert is_full(buf[r][e], p), \
                    f"p={p} n={n} rank {r} element {e}: {Counter(buf[r][e])}"


# --------------------------------------------------------------------------------
# reduce-scatter


@pytest.mark.parametrize("p", WORLD)
def test_reduce_scatter_rank_r_owns_chunk_r(p):
    phases = phases_of("reduce_scatter", p)
    assert len(phases) == 1
    _, owned, steps = phases[0]
    assert owned == list(range(p))
    assert all(len(st) == p - 1 for st in steps)
    assert all(x[4] == "reduce" for st in steps for x in st)
    for n in counts(p):
        init = [[(r,) for _ in range(n)] for r in range(p)]
        buf, _ = simulate(phases, p, n, p, init)
        for r in range(p):
            lo, hi = _C.block_range(n, p, r)
            for e in range(lo, hi):
                assert is_full(buf[r][e], p), \
                    f"p={p} n={n} rank {r} element {e}: {Counter(buf[r][e])}"


# --------------------------------------------------------------------------------
# all-gather


@pytest.mark.parametrize("p", WORLD)
def test_allgather_everyone_gets_every_chunk(p):
    phases = phases_of("allgather", p)
    assert len(phases) == 1
    _, _, steps = phases[0]
    assert all(len(st) == p - 1 for st in steps)
    assert all(x[4] == "copy" for st in steps for x in st)
    for n in counts(p):

        def on_send(pi, r, block, contents, n=n):
            assert all(c == (block,) for c in contents), (
                f"p={p} n={n}: rank {r} sends chunk {block} before it has it: {contents}")

        init = []
        for r in range(p):
            lo, hi = _C.block_range(n, p, r)
            init.append([(r,) if lo <= e < hi else () for e in range(n)])
        buf, _ = simulate(phases, p, n, p, init, on_send)
        for r in range(p):
            for owner in range(p):
                lo, hi = _C.block_range(n, p, owner)
                for e in range(lo, hi):
                    assert buf[r][e] == (owner,), \
                        f"p={p} n={n} rank {r} chunk {owner} element {e}: {buf[r][e]}"
        # Each rank receives every chunk but its own exactly once.
        for r in range(p):
            got = sorted(x[3] for x in steps[r] if x[2] >= 0)
            assert got == [b for b in range(p) if b != r], f"p={p} rank {r}: {got}"


# --------------------------------------------------------------------------------
# broadcast


@pytest.mark.parametrize("p", WORLD)
@pytest.mark.parametrize("blocks", [1, 2, 5])
def test_broadcast_chain(p, blocks):
    for root in range(p):
        phases = phases_of("broadcast", p, blocks, root)
        assert len(phases) == 1
        _, _, steps = phases[0]
        # Pipelined: block j reaches the last rank at step j + p - 2.
        assert all(len(st) == (blocks + p - 2 if p > 1 else 0) for st in steps)
        assert all(x[4] == "copy" for st in steps for x in st)
        for r in range(p):
            got = sorted(x[3] for x in steps[r] if x[2] >= 0)
            assert got == ([] if r == root else list(range(blocks))), \
                f"p={p} B={blocks} root={root} rank {r} receives {got}"
            sent = [x[1] for x in steps[r] if x[0] >= 0]
            assert len(sent) == len(set(sent)), f"rank {r} sends a block twice: {sent}"
        for n in (0, 1, blocks - 1, blocks, 3 * blocks + 1):

            def on_send(pi, r, block, contents, n=n, root=root):
                assert all(c == ("root",) for c in contents), (
                    f"p={p} B={blocks} root={root} n={n}: rank {r} forwards block "
                    f"{block} before it has it")

            init = [[("root",) if r == root else () for _ in range(n)] for r in range(p)]
            buf, _ = simulate(phases, p, n, blocks, init, on_send)
            for r in range(p):
                assert all(c == ("root",) for c in buf[r]), \
                    f"p={p} B={blocks} root={root} n={n} rank {r}: {buf[r]}"


def test_unknown_algorithm_and_collective_are_refused():
    with pytest.raises(Exception, match="unknown algorithm 'nope'"):
        _C.schedule_steps("nope", "allreduce", 2, 0)
    with pytest.raises(Exception, match="unknown collective"):
        _C.schedule_steps("ring", "alltoall", 2, 0)
    assert "ring" in _C.algorithms()
