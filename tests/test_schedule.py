"""Pure tests of the schedules (csrc/algo/ring.cc), no processes, no transport.

Every rank's steps are simulated in lock-step on symbolic data: each element of each
rank's buffer holds the multiset of ranks whose input it contains. Checks, for world
sizes 1..16 and element counts 0..3p+1:
  * all-reduce: every element on every rank ends with each rank's contribution
    exactly once (each chunk reduced exactly p times, nothing counted twice), and
    after phase 1 rank r owns chunk (r + 1) mod p, fully reduced;
  * reduce-scatter: rank r ends owning chunk r, fully reduced;
  * all-gather: rank r starts with chunk r only and every rank ends with all;
  * broadcast: every rank ends with the root's blocks, each received once;
  * every step: each send is matched by the peer's receive of the same block from
    this rank, a rank receives at most one block, never sends the block it receives.
"""

from __future__ import annotations

from collections import Counter

import pytest

from ringcoll import _C

WORLD = list(range(1, 17))


def steps_of(collective, p, pipeline_blocks=1, root=0):
    """phases[phase] = (name, owned per rank, steps[rank][s])."""
    per_rank = [_C.schedule_steps("ring", collective, p, r, pipeline_blocks, root)
                for r in range(p)]
    phases = []
    for i in range(len(per_rank[0])):
        name = per_rank[0][i][0]
        owned = [per_rank[r][i][1] for r in range(p)]
        steps = [per_rank[r][i][2] for r in range(p)]
        phases.append((name, owned, steps))
    return phases


def check_matching(steps, p, phase_name):
    nsteps = len(steps[0])
    assert all(len(s) == nsteps for s in steps), phase_name
    for s in range(nsteps):
        for r in range(p):
            sp, sb, rp, rb, _ = steps[r][s]
            if sp >= 0:
                peer = steps[sp][s]
                assert peer[2] == r and peer[3] == sb, \
                    f"{phase_name} step {s}: rank {r} sends block {sb} to {sp}, which " \
                    f"receives block {peer[3]} from {peer[2]}"
            if rp >= 0:
                peer = steps[rp][s]
                assert peer[0] == r and peer[1] == rb, f"{phase_name} step {s}: unmatched recv"
                assert not (sp >= 0 and sb == rb), f"{phase_name}: rank {r} sends and receives block {rb}"


def simulate(phases, p, n, blocks_for, init):
    """Runs the phases over element-level symbolic buffers; returns the buffers and
    the owned blocks after each phase."""
    buf = init
    owned_after = []
    for name, owned, steps in phases:
        k = blocks_for(name)
        ranges = [_C.block_range(n, k, i) for i in range(k)]
        check_matching(steps, p, name)
        for s in range(len(steps[0])):
            snapshot = [list(b) for b in buf]  # sends read the pre-step state
            for r in range(p):
                _, _, rp, rb, action = steps[r][s]
                if rp < 0:
                    continue
                lo, hi = ranges[rb]
                for e in range(lo, hi):
                    if action == "reduce":
                        buf[r][e] = buf[r][e] + snapshot[rp][e]
                    else:
                        buf[r][e] = Counter(snapshot[rp][e])
        owned_after.append(owned)
    return buf, owned_after


@pytest.mark.parametrize("p", WORLD)
def test_block_range_tiles(p):
    for n in range(0, 3 * p + 2):
        ranges = [_C.block_range(n, p, i) for i in range(p)]
        assert ranges[0][0] == 0 and ranges[-1][1] == n
        for (a, b), (c, d) in zip(ranges, ranges[1:]):
            assert b == c
        sizes = [b - a for a, b in ranges]
        assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)


@pytest.mark.parametrize("p", WORLD)
def test_allreduce_each_chunk_reduced_exactly_p_times(p):
    phases = steps_of("allreduce", p)
    assert [len(st[0]) for _, _, st in phases] == ([p - 1, p - 1] if p > 1 else [0, 0])
    everyone = Counter(range(p))
    for n in range(0, 3 * p + 2):
        init = [[Counter([r]) for _ in range(n)] for r in range(p)]
        buf, owned = simulate(phases, p, n, lambda _: p, init)
        for r in range(p):
            for e in range(n):
                assert buf[r][e] == everyone, f"p={p} n={n} rank {r} element {e}: {buf[r][e]}"
        assert owned[0] == [(r + 1) % p for r in range(p)]


@pytest.mark.parametrize("p", WORLD)
def test_allreduce_owned_chunk_after_share_reduce(p):
    phases = steps_of("allreduce", p)[:1]
    n = 2 * p + 1
    init = [[Counter([r]) for _ in range(n)] for r in range(p)]
    buf, owned = simulate(phases, p, n, lambda _: p, init)
    for r in range(p):
        lo, hi = _C.block_range(n, p, owned[0][r])
        for e in range(lo, hi):
            assert buf[r][e] == Counter(range(p))


@pytest.mark.parametrize("p", WORLD)
def test_reduce_scatter_rank_r_owns_chunk_r(p):
    phases = steps_of("reduce_scatter", p)
    assert phases[0][1] == list(range(p))
    for m in (0, 1, 3):
        n = p * m
        init = [[Counter([r]) for _ in range(n)] for r in range(p)]
        buf, _ = simulate(phases, p, n, lambda _: p, init)
        for r in range(p):
            lo, hi = _C.block_range(n, p, r)
            for e in range(lo, hi):
                assert buf[r][e] == Counter(range(p)), f"p={p} m={m} rank {r}"


@pytest.mark.parametrize("p", WORLD)
def test_allgather_everyone_gets_every_chunk(p):
    phases = steps_of("allgather", p)
    for m in (0, 1, 2):
        n = p * m
        init = []
        for r in range(p):
            lo, hi = _C.block_range(n, p, r)
            init.append([Counter([r]) if lo <= e < hi else Counter() for e in range(n)])
        buf, _ = simulate(phases, p, n, lambda _: p, init)
        for r in range(p):
            for owner in range(p):
                lo, hi = _C.block_range(n, p, owner)
                for e in range(lo, hi):
                    assert buf[r][e] == Counter([owner]), f"p={p} rank {r} block {owner}"


@pytest.mark.parametrize("p", WORLD)
@pytest.mark.parametrize("blocks", [1, 2, 5])
def test_broadcast_chain(p, blocks):
    for root in range(p):
        phases = steps_of("broadcast", p, blocks, root)
        n = 3 * blocks + 1
        init = [[Counter(["root"]) if r == root else Counter() for _ in range(n)]
                for r in range(p)]
        buf, _ = simulate(phases, p, n, lambda _: blocks, init)
        for r in range(p):
            assert all(c == Counter(["root"]) for c in buf[r]), f"p={p} root={root} rank {r}"
        # Each non-root rank receives each block exactly once; the root receives none.
        _, _, steps = phases[0]
        for r in range(p):
            got = [st[3] for st in steps[r] if st[2] >= 0]
            assert sorted(got) == ([] if r == root else list(range(blocks)))


def test_unknown_algorithm_is_refused():
    with pytest.raises(Exception, match="unknown algorithm 'nope'"):
        _C.schedule_steps("nope", "allreduce", 2, 0)
    assert "ring" in _C.algorithms()
