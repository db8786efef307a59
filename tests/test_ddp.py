"""A DDP training loop gives the same parameters with ringcoll as with gloo.

Both models live in the same world, built from the same seed, fed the same data;
one's DDP uses the default ringcoll group, the other a gloo group on the same ranks.
With 2 ranks the result is bitwise equal: each gradient element is the sum of two
values (already divided by the world size), and a + b == b + a exactly. With 3
ranks the ring and gloo add three values in different orders, so the results agree
only to float rounding (rtol 1e-5 after 5 steps), which is what we assert there.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from tests import mp

# Runs on every torch CI tests (tests/conftest.py): DDP's calls into the backend are
# torch's.
pytestmark = pytest.mark.every_torch


def train(rank, p, group, steps=5, device="cpu"):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 4))
    # Different initial weights per rank: DDP's broadcast from rank 0 must fix them.
    with torch.no_grad():
        for prm in model.parameters():
            prm.add_(rank * 0.01)
    model = model.to(device)
    ddp = DDP(model, process_group=group, bucket_cap_mb=0.001)  # several buckets
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(100 + rank)
    for _ in range(steps):
        x = torch.randn(8, 16, generator=gen).to(device)
        y = torch.randn(8, 4, generator=gen).to(device)
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
    return [prm.detach().cpu().clone() for prm in model.parameters()]


def ddp_equivalence(rank, p):
    ring = train(rank, p, None)
    gloo = train(rank, p, mp.GLOO)
    return ring, gloo


@pytest.mark.parametrize("world_size", [2, 3])
def test_ddp_matches_gloo(world_size, transport):
    per_rank = mp.run_world(world_size, ddp_equivalence, transport=transport)
    for rank, (ring, gloo) in enumerate(per_rank):
        for a, b in zip(ring, gloo):
            if world_size == 2:
                assert torch.equal(a, b), f"rank {rank}: max diff {(a - b).abs().max()}"
            else:
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    # All ranks hold the same parameters.
    for ring, _ in per_rank[1:]:
        for a, b in zip(ring, per_rank[0][0]):
            assert torch.equal(a, b)


def test_ddp_under_one_algorithm_name():
    """RINGCOLL_ALGO=rhd python train.py: rhd has no broadcast, so DDP's parameter
    broadcast runs the default (ring) while its gradient all-reduces run rhd."""
    per_rank = mp.run_world(3, ddp_equivalence, transport="shm",
                            env={"RINGCOLL_ALGO": "rhd"})
    for rank, (ring, gloo) in enumerate(per_rank):
        for a, b in zip(ring, gloo):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    for ring, _ in per_rank[1:]:
        for a, b in zip(ring, per_rank[0][0]):
            assert torch.equal(a, b)
