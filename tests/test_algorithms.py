"""Every algorithm x every collective it provides, in real processes, against exact
references (and gloo where gloo has the op), for world sizes 1-9 on both CPU
transports; and RINGCOLL_ALGO's per-collective selection in a running group.

One spawned world per (world size, transport) runs every algorithm in it, each
on its own groups (ringcoll.Options(algo=...)): spawning is the cost, so a world
runs many cases. World sizes 1-4 run the full grid: counts 0, 1, p-1, p+1 and
large, one dtype of each kind (32- and 16-bit float, integer, bool) with every
op, every root; and a second group per algorithm forces 64-byte segments, so that
whole-buffer tree transfers and rhd's halves are pipelined across steps. 5, 7 and
9 (rhd's folds with rem = 1, 3, 1 around 4 and 8; the trees' uneven levels) run a
few dtype/op pairs, counts 1, p+1 and large, three roots; the algorithms added
since (SAMPLED: oneshot, biring, direct) run there on shared memory only. Inputs
are the small integers of tests/cases.py, exact in every dtype whatever the
reduction order (tests/test_same_bits.py checks that every rank ends with the same bits).

gather, scatter and all-to-all (direct) check every block against its exact
(sender, receiver, index) value; tests/test_gather_scatter_alltoall.py compares
them with gloo on the default selection, which is direct too.
"""

from __future__ import annotations

import math
import os
import tempfile
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

import ringcoll
from ringcoll import _C, check
from tests import cases, mp
from tests.cases import OPS, same
from tests.conftest import TRANSPORTS

# ring's reduce is new (reduce-scatter then a gather to the root); its other
# collectives are covered by test_collectives.py. The built-in algorithms: those
# written in Python have grids of their own (tests/test_python_algorithms.py).
COLLECTIVES = {a: (["reduce"] if a == "ring" else _C.provides(a))
               for a in ringcoll.algorithms() if _C.is_builtin(a)}
KINDS = [torch.float32, torch.float16, torch.int32, torch.bool]
FEW = [(torch.float32, "SUM"), (torch.float32, "AVG"), (torch.int32, "MAX"),
       (torch.float16, "PREMUL_SUM"), (torch.bool, "BXOR")]
WORLD_SIZES = [1, 2, 3, 4, 5, 7, 9]
# Both transports up to 5 ranks; 7 on gloo and 9 on shared memory (7-9 processes on
# CI's 2 cores are the slowest worlds).
GRID = [(p, t) for p in WORLD_SIZES for t in TRANSPORTS
        if (p > 1 or t == "shm") and (p <= 5 or t == {7: "gloo", 9: "shm"}[p])]
# Past 4 ranks these run on shared memory only (CI's time).
SAMPLED = ("oneshot", "biring", "direct")


def _plan(p, tiny):
    """(dtype/op pairs, counts, roots) for one group."""
    if tiny:  # segmentation only matters for long blocks
        return FEW[:2], [40 * p + 3], [p - 1]
    if p <= 4:
        pairs = [(d, op) for d in KINDS for op in OPS if cases.op_valid(op, d)]
        return pairs, cases.counts(p, 300), list(range(p))
    return FEW, [1, p + 1, 300], sorted({0, p // 2, p - 1})


def _serves(algo, coll, p, n, nbytes, root=0):
    """Whether the algorithm's declaration (ringcoll.schedules.Applies) serves the call
    (a call it does not serve raises on every rank: tests/test_python_algorithms.py);
    n is its schedule's, nbytes the selector's."""
    return not check.refusal(algo, coll, p, n, nbytes, root=root)


def _declared_counts(algo, colls, p):
    """Counts that serve an algorithm declaring count multiples (an imported MSCCL
    algorithm's chunks): every collective's schedule n a multiple."""
    out = []
    for c in colls:
        if c == "barrier":
            continue
        m = _C.applicability(algo, c)["count_multiple"]
        if m > 1:
            per = m if c in ("allreduce", "broadcast", "reduce") else m // math.gcd(m, p)
            out += [per, 7 * per]
    return out


def _check(failures, what, got, want):
    if not same(got, want):
        bad = (got != want).nonzero()[:5].flatten().tolist() if got.shape == want.shape else "shape"
        failures.append(f"{what}: differs from the reference at {bad}: got "
                        f"{got.flatten()[:8].tolist()} want {want.flatten()[:8].tolist()}")


def _reducing(failures, rank, p, algo, colls, group, pairs, counts, roots, label):
    for dtype, op in pairs:
        rop = cases.reduce_op(op)
        for n in counts:
            what = f"{algo}[{label}] {dtype} {op} n={n}"
            inputs = [cases.make_input(r, n, dtype, op, p) for r in range(p)]
            want = cases.reference(inputs, op, dtype, p)
            es = inputs[rank].element_size()
            if "allreduce" in colls and _serves(algo, "allreduce", p, n, n * es):
                x = inputs[rank].clone()
                dist.all_reduce(x, op=rop, group=group)
                _check(failures, f"allreduce {what}", x, want)
                if op not in ("AVG", "PREMUL_SUM") and label == "default":
                    g = inputs[rank].clone()
                    dist.all_reduce(g, op=rop, group=mp.GLOO)
                    _check(failures, f"gloo allreduce {what}", x, g)
            if "reduce" in colls:
                for root in roots:
                    if not _serves(algo, "reduce", p, n, n * es, root):
                        continue
                    x = inputs[rank].clone()
                    dist.reduce(x, dst=root, op=rop, group=group)
                    _check(failures, f"reduce root={root} {what}", x,
                           want if rank == root else inputs[rank])
            if "reducescatter" in colls and _serves(algo, "reducescatter", p, p * n, p * n * es):
                ins = [cases.make_input(r, p * n, dtype, op, p) for r in range(p)]
                full = cases.reference(ins, op, dtype, p)
                out = torch.empty(n, dtype=dtype)
                src = ins[rank].clone()
                dist.reduce_scatter_tensor(out, src, op=rop, group=group)
                _check(failures, f"reducescatter {what}", out, full[rank * n:(rank + 1) * n])
                # the input is read where it is (a schedule that writes only its
                # block, two-shot's) or copied (the ring's): either way kept
                _check(failures, f"reducescatter keeps its input {what}", src, ins[rank])
                # in place: the output is the input's own block
                buf = ins[rank].clone()
                dist.reduce_scatter_tensor(buf[rank * n:(rank + 1) * n], buf, op=rop, group=group)
                _check(failures, f"reducescatter in place {what}", buf[rank * n:(rank + 1) * n],
                       full[rank * n:(rank + 1) * n])


def _copying(failures, rank, p, algo, colls, group, dtypes, counts, roots, label):
    for dtype in dtypes:
        for n in counts:
            what = f"{algo}[{label}] {dtype} n={n}"
            es = torch.tensor([], dtype=dtype).element_size()
            if "allgather" in colls and _serves(algo, "allgather", p, p * n, p * n * es):
                parts = [cases.make_input(r, n, dtype, "SUM", p, salt=r) for r in range(p)]
                out = torch.empty(p * n, dtype=dtype)
                dist.all_gather_into_tensor(out, parts[rank].clone(), group=group)
                _check(failures, f"allgather {what}", out, torch.cat(parts))
            if "broadcast" in colls:
                for root in roots:
                    if not _serves(algo, "broadcast", p, n, n * es, root):
                        continue
                    want = cases.make_input(root, n, dtype, "SUM", p, salt=7)
                    x = want.clone() if rank == root else torch.zeros(n, dtype=dtype)
                    dist.broadcast(x, src=root, group=group)
                    _check(failures, f"broadcast root={root} {what}", x, want)


def _block(src, dst, n, dtype, salt=0):
    """n elements rank src sends rank dst: small integers (< 119), exact in every
    dtype, different for neighbouring (src, dst, salt)."""
    v = (37 * src + 11 * dst + 5 * torch.arange(n, dtype=torch.int64) + 3 * salt + 1) % 119
    return (v % 2 == 1) if dtype == torch.bool else v.to(dtype)


def _splits(s, d, p, n):
    """Elements rank s sends rank d in the uneven all-to-all of count n: 0 .. p+1,
    so some blocks are empty, plus n."""
    return (s + 2 * d + n) % (p + 2) + (n if (s + d) % 2 == 0 else 0)


def _exchanging(failures, rank, p, algo, colls, group, dtypes, counts, roots, label):
    for dtype in dtypes:
        for n in counts:
            what = f"{algo}[{label}] {dtype} n={n}"
            es = torch.tensor([], dtype=dtype).element_size()
            for root in roots:
                if "gather" in colls and _serves(algo, "gather", p, p * n, p * n * es, root):
                    out = [torch.zeros(n, dtype=dtype) for _ in range(p)] if rank == root else None
                    dist.gather(_block(rank, root, n, dtype), out, dst=root, group=group)
                    if rank == root:
                        _check(failures, f"gather root={root} {what}", torch.cat(out),
                               torch.cat([_block(q, root, n, dtype) for q in range(p)]))
                if "scatter" in colls and _serves(algo, "scatter", p, p * n, p * n * es, root):
                    ins = ([_block(root, q, n, dtype, salt=1) for q in range(p)]
                           if rank == root else None)
                    y = torch.zeros(n, dtype=dtype)
                    dist.scatter(y, ins, src=root, group=group)
                    _check(failures, f"scatter root={root} {what}", y,
                           _block(root, rank, n, dtype, salt=1))
            if "alltoall" in colls and not _C.applicability(algo, "alltoall")["everywhere"]:
                # uneven counts are the built-ins'; a declared one gets even blocks
                if _serves(algo, "alltoall", p, 2 * p * n, p * n * es):
                    outs = [torch.zeros(n, dtype=dtype) for _ in range(p)]
                    dist.all_to_all(outs, [_block(rank, d, n, dtype) for d in range(p)],
                                    group=group)
                    _check(failures, f"all_to_all {what}", torch.cat(outs),
                           torch.cat([_block(s, rank, n, dtype) for s in range(p)]))
            elif "alltoall" in colls:
                send = [_splits(rank, d, p, n) for d in range(p)]
                recv = [_splits(s, rank, p, n) for s in range(p)]
                x = torch.cat([_block(rank, d, send[d], dtype, salt=2) for d in range(p)])
                y = torch.zeros(sum(recv), dtype=dtype)
                dist.all_to_all_single(y, x, recv, send, group=group)
                _check(failures, f"all_to_all_single uneven {what}", y,
                       torch.cat([_block(s, rank, recv[s], dtype, salt=2) for s in range(p)]))
                outs = [torch.zeros(n, dtype=dtype) for _ in range(p)]
                dist.all_to_all(outs, [_block(rank, d, n, dtype) for d in range(p)], group=group)
                _check(failures, f"all_to_all {what}", torch.cat(outs),
                       torch.cat([_block(s, rank, n, dtype) for s in range(p)]))


def algorithms_matrix(rank, p, algos=None):
    """Every algorithm of `algos` ({name: collectives it provides}; default: the
    built-in ones) on this world's ranks; the failures."""
    failures = []
    shm = os.environ.get("RINGCOLL_TRANSPORT") == "shm"
    for algo, colls in (algos or COLLECTIVES).items():
        if p > 4 and algo in SAMPLED and not shm:
            continue
        for label, chunk in (("default", None), ("tiny-segments", 64))[:2 if p <= 4 else 1]:
            if algo == "direct" and chunk is not None:
                continue  # test_gather_scatter_alltoall.py runs its tiny segments
            group = dist.new_group(backend="ringcoll", timeout=timedelta(seconds=60),
                                   pg_options=ringcoll.Options(algo=algo, chunk_bytes=chunk))
            pairs, counts, roots = _plan(p, chunk is not None)
            counts = sorted(set(counts) | set(_declared_counts(algo, colls, p)))
            _reducing(failures, rank, p, algo, colls, group, pairs, counts, roots, label)
            dtypes = list(dict.fromkeys(d for d, _ in pairs))
            _copying(failures, rank, p, algo, colls, group, dtypes, counts, roots, label)
            _exchanging(failures, rank, p, algo, colls, group, dtypes, counts, roots, label)
            if "barrier" in colls:
                dist.barrier(group=group)
            dist.destroy_process_group(group)
    return failures


@pytest.mark.parametrize("world_size, transport", GRID)
def test_every_algorithm_against_references(world_size, transport):
    mp.run_checks(world_size, algorithms_matrix, timeout=600, transport=transport)


# --------------------------------------------------------------------------------
# selection in a running group

SPEC = "allreduce=twoshot:0-64,rhd:64-4K,ring;reduce=tree;broadcast=tree;reducescatter=rhd"


def selection_world(rank, p, log_dir):
    failures = []
    # Capture this rank's stderr, where RINGCOLL_DEBUG logs each call's choice.
    path = os.path.join(log_dir, f"rank{rank}.log")
    saved = os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 2)
    try:
        group = dist.new_group(backend="ringcoll",
                               pg_options=ringcoll.Options(algo=SPEC, debug=True))
        for n in (4, 100, 5000):  # float32: 16 B, 400 B, 20000 B
            inputs = [cases.make_input(r, n, torch.float32, "SUM", p) for r in range(p)]
            x = inputs[rank].clone()
            dist.all_reduce(x, group=group)
            _check(failures, f"allreduce n={n}", x, cases.reference(inputs, "SUM",
                                                                   torch.float32, p))
        x = torch.full((3,), float(rank))
        dist.broadcast(x, src=p - 1, group=group)
        _check(failures, "broadcast", x, torch.full((3,), float(p - 1)))
        ag = torch.empty(p * 2)
        dist.all_gather_into_tensor(ag, torch.full((2,), float(rank)), group=group)
        _check(failures, "allgather", ag, torch.arange(p, dtype=torch.float32).repeat_interleave(2))
        dist.barrier(group=group)
        g = [torch.zeros(1) for _ in range(p)] if rank == 0 else None
        dist.gather(torch.full((1,), float(rank)), g, dst=0, group=group)
        if rank == 0:
            _check(failures, "gather", torch.cat(g), torch.arange(p, dtype=torch.float32))
        # One name for every collective: it runs what it provides; the rest run their
        # default (logged with the reason).
        tree = dist.new_group(backend="ringcoll",
                              pg_options=ringcoll.Options(algo="tree", debug=True))
        rs = torch.empty(1)
        dist.reduce_scatter_tensor(rs, torch.full((p,), float(rank + 1)), group=tree)
        _check(failures, "tree group's reduce-scatter (ring)", rs,
               torch.full((1,), float(p * (p + 1) // 2)))
        y = torch.ones(5)
        dist.all_reduce(y, group=tree)
        _check(failures, "tree allreduce", y, torch.full((5,), float(p)))
        # direct for everything: all-to-all runs it, an all-reduce runs ring.
        direct = dist.new_group(backend="ringcoll", pg_options=ringcoll.Options(algo="direct"))
        z = torch.ones(2)
        dist.all_reduce(z, group=direct)
        _check(failures, "direct group's all-reduce (ring)", z, torch.full((2,), float(p)))
        out = torch.zeros(p)
        dist.all_to_all_single(out, torch.full((p,), float(rank)), group=direct)
        _check(failures, "direct all_to_all_single", out, torch.arange(p, dtype=torch.float32))
    finally:
        os.dup2(saved, 2)
        os.close(fd)
    log = open(path).read()
    me = f"[ringcoll rank {rank}/{p}]"
    for line in (
            f"{me} all_reduce 16 B: twoshot (RINGCOLL_ALGO all_reduce range 0-64)",
            f"{me} all_reduce 400 B: rhd (RINGCOLL_ALGO all_reduce range 64-4K)",
            f"{me} all_reduce 20000 B: ring (RINGCOLL_ALGO all_reduce, beyond its ranges)",
            f"{me} broadcast 12 B: tree (RINGCOLL_ALGO broadcast)",
            f"{me} all_gather_into_tensor {8 * p} B: ring "
            f"(default: RINGCOLL_ALGO names no all_gather)",
            f"{me} barrier {p} B: ring (default: RINGCOLL_ALGO names no barrier)",
            f"{me} gather {4 * p} B: direct (default: RINGCOLL_ALGO names no gather)",
            f"{me} reduce_scatter_tensor {4 * p} B: ring "
            f"(default: tree (RINGCOLL_ALGO=tree) does not provide reduce_scatter)",
            f"{me} all_reduce 20 B: tree (RINGCOLL_ALGO=tree)"):
        if line not in log:
            failures.append(f"log lacks {line!r}:\n{log}")
    return failures


def test_selection_per_collective_and_size():
    with tempfile.TemporaryDirectory() as d:
        mp.run_checks(3, selection_world, d, timeout=300, transport="shm")

