"""torch.compile'd code calling the functional collectives on a ringcoll group gives
the eager results, and the exact ones.

torch.distributed._functional_collectives (all_reduce, all_gather_tensor,
reduce_scatter_tensor, all_to_all_single) are what compiled code calls: dynamo
traces them into the graph as _c10d_functional ops, inductor emits calls to them,
and at run time they reach the group's backend (allreduce,
allgather_into_tensor_coalesced, reduce_scatter_tensor_coalesced, alltoall_base)
and wait for the Work. With fullgraph=True a graph break (a collective dynamo could
not trace) is an error, not a silent fallback to eager.

Compiling with inductor on CPU generates and builds C++ for the pointwise ops
around the collectives: 20-40 s per world on CI's 2 cores, so this is one small
function (one graph) covering the four ops, all_to_all_single with equal and with
uneven splits, with 2 ranks under inductor and 3 under aot_eager (the same dynamo
trace and functionalized graph, run without the C++ build: inductor's part does not
depend on the world size, the collectives' arguments do).
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from tests import mp
from tests.cases import same

# Runs on every torch CI tests (tests/conftest.py): torch.compile's tracing of the op
# changes with torch.
pytestmark = pytest.mark.every_torch


def _splits(rank, p):
    """all_to_all_single's uneven splits: rank s sends s + d + 1 elements to rank d."""
    return [s + rank + 1 for s in range(p)], [rank + d + 1 for d in range(p)]


def _inputs(rank, p):
    """Small integers in float32: every sum below is exact."""
    x = torch.arange(5, dtype=torch.float32) + rank
    y = torch.arange(3, dtype=torch.float32) * (rank + 1)
    z = torch.arange(2 * p, dtype=torch.float32) + 10 * rank
    w = torch.arange(2 * p, dtype=torch.float32) + 100 * rank
    v = torch.arange(sum(_splits(rank, p)[1]), dtype=torch.float32) + 1000 * rank
    return x, y, z, w, v


def collectives(x, y, z, w, v, out_splits, in_splits):
    import torch.distributed._functional_collectives as fc

    group = dist.group.WORLD
    a = fc.all_reduce(x * 2, "sum", group)
    b = fc.all_gather_tensor(y + 1, 0, group)
    c = fc.reduce_scatter_tensor(z, "sum", 0, group)
    d = fc.all_to_all_single(w, None, None, group)
    e = fc.all_to_all_single(v * 3, out_splits, in_splits, group)
    return a + 1, b * 2, c - 1, d, e + 1


def _wait(ts):
    import torch.distributed._functional_collectives as fc

    return [fc.wait_tensor(t) if isinstance(t, fc.AsyncCollectiveTensor) else t for t in ts]


def compile_world(rank, p, backend):
    assert dist.get_backend() == "ringcoll"
    failures = []
    args = _inputs(rank, p) + _splits(rank, p)
    eager = _wait(collectives(*args))
    compiled = _wait(torch.compile(collectives, fullgraph=True, backend=backend)(*args))
    xs, ys, zs, ws, vs = zip(*[_inputs(r, p) for r in range(p)])
    uneven = []
    for s in range(p):
        start = sum(_splits(s, p)[1][:rank])
        uneven.append(vs[s][start:start + _splits(s, p)[1][rank]] * 3 + 1)
    exact = [sum(x * 2 for x in xs) + 1,
             torch.cat([(y + 1) * 2 for y in ys]),
             sum(zs)[2 * rank:2 * rank + 2] - 1,
             torch.cat([w[2 * rank:2 * rank + 2] for w in ws]),
             torch.cat(uneven)]
    names = ["all_reduce", "all_gather_tensor", "reduce_scatter_tensor",
             "all_to_all_single", "all_to_all_single uneven"]
    for name, e, c, x in zip(names, eager, compiled, exact):
        if not same(c, e):
            failures.append(f"{name}: compiled {c.tolist()} but eager {e.tolist()}")
        if not same(e, x):
            failures.append(f"{name}: eager {e.tolist()} but exact {x.tolist()}")
    return failures


@pytest.mark.parametrize("world_size, backend", [(2, "inductor"), (3, "aot_eager")])
def test_compiled_functional_collectives_match_eager(world_size, backend, tmp_path):
    # One inductor cache for the world: ranks compiling the same graph reuse it.
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
           "TORCHINDUCTOR_COMPILE_THREADS": "1"}
    mp.run_checks(world_size, compile_world, backend, timeout=600, env=env,
                  pg_timeout_s=300)
