"""Async ops complete in issue order with futures holding the outputs; several
subgroups work at once; the issue's example script runs as written."""

from __future__ import annotations

import torch
import torch.distributed as dist

from tests import mp


def many_async(rank, p):
    f = []
    works, xs = [], []
    for k in range(40):
        x = torch.full((k + 1,), float(rank + k))
        xs.append(x)
        works.append(dist.all_reduce(x, async_op=True))
    # A broadcast and an all-gather queued behind them, then a blocking op.
    b = torch.full((3,), float(rank))
    wb = dist.broadcast(b, src=p - 1, async_op=True)
    g = torch.empty(2 * p)
    wg = dist.all_gather_into_tensor(g, torch.full((2,), float(rank)), async_op=True)
    for k, (w, x) in enumerate(zip(works, xs)):
        w.wait()
        want = torch.full((k + 1,), float(sum(r + k for r in range(p))))
        if not torch.equal(x, want):
            f.append(f"async allreduce {k}: {x.tolist()}")
        fut = w.get_future().value()
        if not (isinstance(fut, list) and len(fut) == 1 and fut[0] is not None
                and torch.equal(fut[0], want)):
            f.append(f"future {k} value {fut}")
        if not w.is_completed() or not w.is_success():
            f.append(f"work {k} not completed/success after wait")
    wb.wait()
    wg.wait()
    if not torch.equal(b, torch.full((3,), float(p - 1))):
        f.append(f"async broadcast {b.tolist()}")
    if not torch.equal(g, torch.arange(p, dtype=torch.float32).repeat_interleave(2)):
        f.append(f"async all_gather {g.tolist()}")
    # AVG through the async path, the issue's last line.
    y = torch.full((4,), float(p * (rank + 1)))
    w = dist.all_reduce(y, op=dist.ReduceOp.AVG, async_op=True)
    w.wait()
    v = w.get_future().value()[0]
    if not torch.equal(v, torch.full((4,), float(sum(r + 1 for r in range(p))))):
        f.append(f"async AVG {v.tolist()}")
    return f


def test_async_in_order(transport):
    mp.run_checks(3, many_async, transport=transport)


def subgroups(rank, p):
    f = []
    even = dist.new_group([0, 2], backend="ringcoll")
    odd = dist.new_group([1, 3], backend="ringcoll")
    trio = dist.new_group([0, 1, 3], backend="ringcoll")
    mine = even if rank % 2 == 0 else odd
    members = [0, 2] if rank % 2 == 0 else [1, 3]
    works = []
    x = torch.full((10,), float(rank + 1))
    works.append(dist.all_reduce(x, group=mine, async_op=True))
    y = torch.full((7,), float(rank + 1))
    if rank in (0, 1, 3):
        works.append(dist.all_reduce(y, group=trio, async_op=True))
    z = torch.full((5,), float(rank + 1))
    works.append(dist.all_reduce(z, async_op=True))  # the world, at the same time
    for w in works:
        w.wait()
    if not torch.equal(x, torch.full((10,), float(sum(m + 1 for m in members)))):
        f.append(f"subgroup {members}: {x.tolist()}")
    if rank in (0, 1, 3) and not torch.equal(y, torch.full((7,), 1.0 + 2.0 + 4.0)):
        f.append(f"trio: {y.tolist()}")
    if not torch.equal(z, torch.full((5,), float(sum(range(1, p + 1))))):
        f.append(f"world: {z.tolist()}")
    # Group-local ranks: broadcast from the group's second member.
    b = torch.full((3,), float(rank))
    dist.broadcast(b, group_src=1, group=mine)
    if not torch.equal(b, torch.full((3,), float(members[1]))):
        f.append(f"subgroup broadcast: {b.tolist()}")
    dist.barrier(group=mine)
    dist.barrier()
    return f


def test_subgroups_at_once(transport):
    mp.run_checks(4, subgroups, transport=transport)


def issue_example(rank, p):
    """The snippet from the foundation issue, checked against gloo on the same ranks."""
    results = {}
    for name, group in (("ringcoll", None), ("gloo", mp.GLOO)):
        x = torch.arange(10, dtype=torch.float32) * (rank + 1)
        dist.all_reduce(x, group=group)
        out = torch.empty(p * 4)
        dist.all_gather_into_tensor(out, torch.ones(4), group=group)
        rs = torch.empty(2)
        dist.reduce_scatter_tensor(rs, torch.ones(2 * p), group=group)
        dist.broadcast(x, src=min(1, p - 1), group=group)
        dist.barrier(group=group)
        results[name] = (x.clone(), out, rs)
    w = dist.all_reduce(x, op=dist.ReduceOp.AVG, async_op=True)
    w.wait()
    avg = w.get_future().value()[0]
    f = []
    for a, b in zip(results["ringcoll"], results["gloo"]):
        if not torch.equal(a, b):
            f.append(f"ringcoll {a.tolist()} != gloo {b.tolist()}")
    if not torch.equal(avg, results["gloo"][0]):
        f.append(f"AVG of equal tensors changed them: {avg.tolist()}")
    return f


def test_issue_example_matches_gloo(transport):
    for p in (1, 3):
        mp.run_checks(p, issue_example, label=f"p={p} ", transport=transport)
