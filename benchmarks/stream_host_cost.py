"""Host cost per call of the stream path, on its CPU emulation
(RINGCOLL_TRANSPORT=stream), beside what each call enqueued: the time an async
all_reduce takes to return (body, executor, every batch and reduction enqueued;
nothing waited for), with the previous call finished so that no queue is busy, and
the stream path's counts per call (csrc/common/stream_stats.h: batches = NCCL groups
on a GPU, kernels = reducer launches, markers = CUDA events, stream waits, host
waits). The emulated device runs on the same cores, so the time is an upper bound
of what the executor and StreamTransport cost the host; on a GPU the same calls
enqueue the same counts of NCCL groups, kernels and events
(benchmarks/gpu_host_cost.py prints them there, with the time of each part).

    python benchmarks/stream_host_cost.py [--nproc 2 4] [--calls 200] [--algo ring]

The algorithm is the default choice on CUDA (which the emulation runs) unless
--algo names one.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

COUNTS = ("batches", "batches_on_compute", "kernels", "markers", "stream_waits", "host_waits")


def worker(rank, p, port, sizes, chunk, calls, algo, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                      RINGCOLL_TRANSPORT="stream", RINGCOLL_CHUNK_BYTES=str(chunk),
                      RINGCOLL_FINGERPRINT="0")  # as on CUDA by default
    if algo:
        os.environ["RINGCOLL_ALGO"] = algo
    import ringcoll  # noqa: F401

    dist.init_process_group("ringcoll", rank=rank, world_size=p)
    be = dist.group.WORLD._get_backend(torch.device("cpu"))
    rows = []
    for n_bytes in sizes:
        x = torch.ones(max(1, n_bytes // 4))
        for _ in range(5):
            dist.all_reduce(x)
        ts = []
        be.stream_stats(cuda=False, reset=True)
        for _ in range(calls):
            dist.barrier()
            t0 = time.perf_counter()
            w = dist.all_reduce(x, async_op=True)
            ts.append(time.perf_counter() - t0)
            w.wait()
        s = be.stream_stats(cuda=False, reset=True)
        # (barriers carry no tensor: they run on the host path, not counted here)
        assert s["collectives"] == calls, s
        per = {c: s[c] / calls for c in COUNTS}
        rows.append((n_bytes, statistics.median(ts), per))
    if rank == 0:
        out.put(rows)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nproc", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--chunk", type=int, default=4096)
    ap.add_argument("--algo", default=None, help="RINGCOLL_ALGO (default: the CUDA default)")
    args = ap.parse_args()
    sizes = [8, 64 << 10, 1 << 20]
    ctx = mp.get_context("spawn")
    print(f"{'p':>2} {'bytes':>8} {'launch us':>10} {'us/batch':>9} "
          + " ".join(f"{c:>18}" for c in COUNTS))
    for i, p in enumerate(args.nproc):
        q = ctx.Queue()
        procs = [ctx.Process(target=worker, args=(r, p, 29600 + i, sizes, args.chunk,
                                                  args.calls, args.algo, q)) for r in range(p)]
        for pr in procs:
            pr.start()
        rows = q.get(timeout=600)
        for pr in procs:
            pr.join()
        for n_bytes, t, per in rows:
            print(f"{p:>2} {n_bytes:>8} {t * 1e6:>10.1f} {t * 1e6 / max(per['batches'], 1):>9.2f} "
                  + " ".join(f"{per[c]:>18.2f}" for c in COUNTS))


if __name__ == "__main__":
    main()
