"""The rank processes of the single-machine benchmarks (cpu_entry, cpu_wait,
ddp_overlap, stream_counts): each script runs itself once per rank with
`--rank --result PATH`, torch.distributed's env:// rendezvous on a fresh port, and
every rank hands its findings to rank 0, which writes them to PATH as one list."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from vs_cpu_libs import free_port


def run_ranks(script: str, p: int, argv: list, result: str, env: dict | None = None,
              new_session: bool = False):
    """Runs `script --rank --result RESULT *argv` as ranks 0..p-1 (OMP_NUM_THREADS=1
    unless `env` says otherwise) and waits for them: what rank 0 wrote (each rank's
    object, by rank), or None after printing the exit codes when a rank failed.
    `new_session`: each rank in a session of its own (a signal to the benchmark's
    process group does not reach it)."""
    base = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
            "WORLD_SIZE": str(p), "OMP_NUM_THREADS": "1", **(env or {})}
    procs = [subprocess.Popen([sys.executable, script, "--rank", "--result", result, *argv],
                              env=dict(base, RANK=str(r)), start_new_session=new_session)
             for r in range(p)]
    rcs = [pr.wait() for pr in procs]
    if any(rcs):
        print(f"p = {p}: a rank failed: exit codes {rcs}", file=sys.stderr)
        return None
    with open(result) as f:
        per_rank = json.load(f)
    os.unlink(result)
    return per_rank


def report(obj, result: str, group=None) -> int:
    """A rank's end: `obj` gathered to rank 0 (over `group`), which writes every
    rank's to `result` for run_ranks; then the world is destroyed. Returns 0."""
    import torch.distributed as dist

    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj, group=group)
    if dist.get_rank() == 0:
        with open(result, "w") as f:
            json.dump(out, f)
    dist.destroy_process_group()
    return 0
