"""FSDP2 (fully_shard) on CPU trains a small transformer block the same with ringcoll
as with gloo, and its full state dict saves and loads through ringcoll.

Both models live in the same world, built from the same seed and fed the same
data (different per rank); one is sharded on the default ringcoll group, the other
on a gloo group over the same ranks. FSDP2 all-gathers parameters
(all_gather_into_tensor) before each block's forward and backward, and
reduce-scatters gradients (reduce_scatter_tensor, ReduceOp.AVG for float32).

Losses and parameters are bitwise equal with 2 ranks, by arithmetic: each gradient
element is the sum of two values (a + b == b + a) divided by 2 on both backends.
With 3 ranks a sum of three floats depends on its order. Measured here (torch 2.13,
this model): bitwise equal too, because for blocks of a few dozen elements and up
ringcoll's default reduce-scatter adds the three contributions in the same order
as gloo's (checked on random floats: equal from 30 elements per rank up; at 3 per
rank the two differ in the last bit). That is a coincidence of the two algorithms,
not a contract, so with 3 ranks we assert rtol 1e-5 / atol 1e-6 (what rounding of
a three-term sum can grow to in 10 steps of SGD with momentum on values of order
1), and that every rank of one backend holds bitwise the same parameters.

The checkpoint part: get_model_state_dict(full_state_dict=True, cpu_offload=True)
gathers every parameter to rank 0 (DTensor.full_tensor(), i.e. the functional
all_gather_tensor -> allgather_into_tensor_coalesced); set_model_state_dict with
broadcast_from_rank0 loads it into a freshly initialised sharded model (ringcoll
broadcasts); the reloaded model's full parameters equal the trained ones.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from tests import mp

# Runs on every torch CI tests (tests/conftest.py): FSDP2's calls into the backend are
# torch's.
pytestmark = pytest.mark.every_torch

DIM, HEADS, SEQ, BATCH, STEPS = 16, 2, 6, 4, 10


def _fully_shard():
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # torch < 2.6
        from torch.distributed._composable.fsdp import fully_shard
    return fully_shard


class Block(torch.nn.Module):
    """Pre-norm self-attention and MLP with residuals: a transformer layer's shape."""

    def __init__(self):
        super().__init__()
        self.norm1 = torch.nn.LayerNorm(DIM)
        self.qkv = torch.nn.Linear(DIM, 3 * DIM)
        self.proj = torch.nn.Linear(DIM, DIM)
        self.norm2 = torch.nn.LayerNorm(DIM)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(DIM, 4 * DIM), torch.nn.GELU(),
                                       torch.nn.Linear(4 * DIM, DIM))

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, HEADS, d // HEADS).unbind(2)
        att = torch.softmax(torch.einsum("bshd,bthd->bhst", q, k) / (d // HEADS) ** 0.5, -1)
        x = x + self.proj(torch.einsum("bhst,bthd->bshd", att, v).reshape(b, s, d))
        return x + self.mlp(self.norm2(x))


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Linear(8, DIM)
        self.blocks = torch.nn.ModuleList([Block(), Block()])
        self.head = torch.nn.Linear(DIM, 3)

    def forward(self, x):
        x = self.embed(x)
        for blk in self.blocks:
            x = blk(x)
        return self.head(x)


def _sharded(mesh, seed=0):
    fully_shard = _fully_shard()
    torch.manual_seed(seed)
    model = Model()
    for blk in model.blocks:
        fully_shard(blk, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def _full(model):
    return {n: p.full_tensor().clone() for n, p in model.named_parameters()}


def _train(rank, mesh):
    model = _sharded(mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(100 + rank)
    losses = []
    for _ in range(STEPS):
        x = torch.randn(BATCH, SEQ, 8, generator=gen)
        y = torch.randn(BATCH, SEQ, 3, generator=gen)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.detach().clone())
    return model, torch.stack(losses)


def fsdp2_world(rank, p):
    from torch.distributed.checkpoint.state_dict import (StateDictOptions,
                                                         get_model_state_dict,
                                                         set_model_state_dict)
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

    ring_mesh = init_device_mesh("cpu", (p,))
    assert dist.get_backend(ring_mesh.get_group()) == "ringcoll"
    gloo_mesh = DeviceMesh.from_group(mp.GLOO, "cpu")
    ring, ring_losses = _train(rank, ring_mesh)
    gloo, gloo_losses = _train(rank, gloo_mesh)
    ring_params, gloo_params = _full(ring), _full(gloo)

    # Save a full state dict (rank 0 only, on CPU) and load it into a fresh model.
    opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
    sd = get_model_state_dict(ring, options=opts)
    saved = {k: v.clone() for k, v in sd.items()}
    fresh = _sharded(ring_mesh, seed=1)  # other initial values
    set_model_state_dict(fresh, sd if rank == 0 else {},
                         options=StateDictOptions(full_state_dict=True,
                                                  broadcast_from_rank0=True))
    return {"ring_losses": ring_losses, "gloo_losses": gloo_losses,
            "ring": ring_params, "gloo": gloo_params, "saved": saved,
            "reloaded": _full(fresh)}


@pytest.mark.parametrize("world_size", [2, 3])
def test_fsdp2_matches_gloo_and_checkpoints(world_size):
    res = mp.run_world(world_size, fsdp2_world, timeout=600)
    for rank, r in enumerate(res):
        if world_size == 2:
            assert torch.equal(r["ring_losses"], r["gloo_losses"]), \
                (rank, r["ring_losses"], r["gloo_losses"])
            for n in r["ring"]:
                assert torch.equal(r["ring"][n], r["gloo"][n]), \
                    (rank, n, (r["ring"][n] - r["gloo"][n]).abs().max())
        else:
            torch.testing.assert_close(r["ring_losses"], r["gloo_losses"], rtol=1e-5,
                                       atol=1e-6)
            for n in r["ring"]:
                torch.testing.assert_close(r["ring"][n], r["gloo"][n], rtol=1e-5, atol=1e-6)
        # Every rank holds the same full parameters (ringcoll's own consistency).
        for n in r["ring"]:
            assert torch.equal(r["ring"][n], res[0]["ring"][n]), (rank, n)
        # The reloaded model is the trained one, bitwise.
        for n in r["ring"]:
            assert torch.equal(r["reloaded"][n], r["ring"][n]), (rank, n)
        # Rank 0 saved the full parameters; the others got nothing (cpu_offload).
        if rank == 0:
            assert sorted(r["saved"]) == sorted(r["ring"]), sorted(r["saved"])
            for n, v in r["saved"].items():
                assert v.device.type == "cpu" and torch.equal(v, r["ring"][n]), n
        else:
            assert r["saved"] == {}, sorted(r["saved"])
    assert res[0]["ring_losses"].shape == (STEPS,)
