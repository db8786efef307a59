"""A few all-reduces, for docs/ALGORITHMS.md's walk: run it under torchrun with
RINGCOLL_ALGO naming any algorithm (RINGCOLL_ALGO_MODULES for one written in
Python)."""
import torch
import torch.distributed as dist

import ringcoll  # noqa: F401  registers the backend (torch's autoload does too, once installed)

dist.init_process_group("ringcoll")
rank, p = dist.get_rank(), dist.get_world_size()
# multiples of 12: an algorithm that declares counts in 3 or 4 chunks (an MSCCL
# file's, docs/ALGORITHMS.md) serves them too
for n in (12, 1200, 120_000):
    x = torch.arange(n, dtype=torch.float32) + rank
    dist.all_reduce(x)
    want = torch.arange(n, dtype=torch.float32) * p + p * (p - 1) / 2
    assert torch.equal(x, want), f"rank {rank}: wrong all-reduce of {n} elements"
print(f"rank {rank} of {p}: 3 all-reduces exact", flush=True)
dist.destroy_process_group()
