"""Host cost per wave of the stream path, on its CPU emulation
(RINGCOLL_TRANSPORT=stream): the time an async all_reduce takes to return (body,
executor, every wave's batch and reductions enqueued; nothing waited for) divided
by its waves, with the previous call finished so that no queue is busy. The
emulated device runs on the same cores, so this is an upper bound of what the
executor and StreamTransport cost the host per wave; on a GPU the same calls
enqueue NCCL groups and kernels instead.

    python benchmarks/stream_host_cost.py [--nproc 2 4] [--calls 200]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def waves(p, n_bytes, chunk):
    """Ring all-reduce waves: 2(p-1) steps, each cut into segments of `chunk`."""
    per_rank = max(1, -(-n_bytes // p // chunk))
    return 2 * (p - 1) * per_rank


def worker(rank, p, port, sizes, chunk, calls, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                      RINGCOLL_TRANSPORT="stream", RINGCOLL_CHUNK_BYTES=str(chunk))
    import ringcoll  # noqa: F401

    dist.init_process_group("ringcoll", rank=rank, world_size=p)
    rows = []
    for n_bytes in sizes:
        x = torch.ones(max(1, n_bytes // 4))
        for _ in range(5):
            dist.all_reduce(x)
        ts = []
        for _ in range(calls):
            dist.barrier()
            t0 = time.perf_counter()
            w = dist.all_reduce(x, async_op=True)
            ts.append(time.perf_counter() - t0)
            w.wait()
        rows.append((n_bytes, statistics.median(ts)))
    if rank == 0:
        out.put(rows)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nproc", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--chunk", type=int, default=4096)
    args = ap.parse_args()
    sizes = [8, 64 << 10, 1 << 20]
    ctx = mp.get_context("spawn")
    print(f"{'p':>2} {'bytes':>8} {'waves':>6} {'launch us':>10} {'us/wave':>8}")
    for i, p in enumerate(args.nproc):
        q = ctx.Queue()
        procs = [ctx.Process(target=worker, args=(r, p, 29600 + i, sizes, args.chunk,
                                                  args.calls, q)) for r in range(p)]
        for pr in procs:
            pr.start()
        rows = q.get(timeout=600)
        for pr in procs:
            pr.join()
        for n_bytes, t in rows:
            w = waves(p, n_bytes, args.chunk)
            print(f"{p:>2} {n_bytes:>8} {w:>6} {t * 1e6:>10.1f} {t * 1e6 / w:>8.2f}")


if __name__ == "__main__":
    main()
