"""Three ranks sharing one GPU run all-reduce, broadcast and reduce-scatter on sizes
0, 1, 3, 1001 and 1 Mi floats, each checked exactly (the small ones by the CUDA
default's one-hop algorithms, whose fused fold of several inputs needs p >= 3). Meant to run under compute-sanitizer,
which follows the spawned ranks with --target-processes all:

    compute-sanitizer --tool memcheck --report-api-errors no --target-processes all \
        python3 tests/gpu_sanitize.py
    compute-sanitizer --tool racecheck --kernel-name kns=ringcoll --target-processes all \
        python3 tests/gpu_sanitize.py

(tests/run_gpu.sh --sanitize runs both.) Exit status 1 if a result is wrong."""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from ringcoll.gpu import share_gpu_env  # noqa: E402
from tests import mp  # noqa: E402

SIZES = (0, 1, 3, 1001, 1 << 20)


def world(rank, p):
    torch.cuda.set_device(0)
    wrong = []
    for n in SIZES:
        x = torch.full((n,), rank + 1.0, device="cuda")
        dist.all_reduce(x)
        if not torch.all(x == p * (p + 1) / 2):
            wrong.append(f"all_reduce n={n}")
        y = torch.full((n,), float(rank), device="cuda")
        dist.broadcast(y, src=p - 1)
        if not torch.all(y == p - 1):
            wrong.append(f"broadcast n={n}")
        z = torch.arange(p * n, device="cuda", dtype=torch.float32) + rank
        out = torch.empty(n, device="cuda")
        dist.reduce_scatter_tensor(out, z)
        want = p * (torch.arange(n, device="cuda", dtype=torch.float32) + rank * n) + p * (p - 1) / 2
        if not torch.equal(out, want):
            wrong.append(f"reduce_scatter n={n}")
    torch.cuda.synchronize()
    return wrong


def main() -> int:
    p = 3
    envs = [share_gpu_env(r) for r in range(p)]
    res = mp.run_world(p, world, timeout=170,
                       rank_env={k: [e[k] for e in envs] for k in envs[0]})
    print("gpu_sanitize: wrong results per rank:", res)
    return 1 if any(res) else 0


if __name__ == "__main__":
    sys.exit(main())
