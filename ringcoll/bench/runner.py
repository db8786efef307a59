"""Runs the sweep inside one world: every backend on the same tensors, the same
sizes, alternating per size so all backends see the same machine noise.

Timing (nccl-tests' method): `warmup` calls, then `runs` timed regions of `iters`
back-to-back async calls each, a barrier before each region, the region's time per
call; the median over regions; the slowest rank's median is reported. On CUDA the
region is timed with CUDA events on the current stream.
"""

from __future__ import annotations

import statistics
import sys
import time

import torch
import torch.distributed as dist

from . import records

DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
          "bfloat16": torch.bfloat16}


def make_groups(backends, device, algo):
    """One process group per backend under test, on the same ranks."""
    import ringcoll

    groups = {}
    for b in backends:
        if b == "ringcoll":
            opts = ringcoll.Options(algo=algo) if algo else None
            groups[b] = dist.new_group(backend="ringcoll", pg_options=opts)
        elif b in ("gloo", "nccl", "nccl-ring"):
            groups[b] = dist.new_group(backend="nccl" if b.startswith("nccl") else b)
        else:
            raise ValueError(f"unknown backend {b!r} (ringcoll, gloo, nccl, nccl-ring)")
    return groups


def _time_region(case, iters, device):
    if device == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        works = [case.run() for _ in range(iters)]
        for w in works:
            w.wait()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / iters
    t0 = time.perf_counter()
    works = [case.run() for _ in range(iters)]
    for w in works:
        w.wait()
    return (time.perf_counter() - t0) / iters


def measure(case, iters, warmup, runs, device, meta):
    for _ in range(warmup):
        case.run().wait()
    per_run = []
    for _ in range(runs):
        dist.barrier(group=meta)
        per_run.append(_time_region(case, iters, device))
    t = torch.tensor([statistics.median(per_run)], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=meta)  # the slowest rank
    return float(t.item())


def check(case, meta):
    case.reset()
    case.run().wait()
    if case.expected is None:
        return 0
    wrong = torch.tensor([records.count_wrong(case.output, case.expected)], dtype=torch.int64)
    dist.all_reduce(wrong, group=meta)
    return int(wrong.item())


def sweep(args, device, meta, log=print):
    """Returns the result rows (on every rank; rank 0 logs progress)."""
    p = dist.get_world_size()
    rank = dist.get_rank()
    dtype = DTYPES[args.dtype]
    elem = torch.tensor([], dtype=dtype).element_size()
    groups = make_groups(args.backends, device, args.algo)
    dev = torch.device(device, torch.cuda.current_device()) if device == "cuda" else "cpu"
    rows = []
    for size in records.sweep(args.minbytes, args.maxbytes, args.stepfactor):
        line = []
        for coll in args.collectives:
            rec = records.RECORDS[coll]
            count = records.count_for(rec, size, p, elem)
            for backend, group in groups.items():
                row = {"backend": backend, "collective": coll, "nproc": p, "device": device,
                       "dtype": args.dtype, "op": args.op if rec.reduces else "none",
                       "size": count * elem, "count": count, "root": -1, "oop": None, "ip": None}
                for key, inplace in (("oop", False), ("ip", True)):
                    case = rec.build(rank, p, count, dtype, args.op, dev, inplace, group)
                    if case is None:
                        continue
                    t = measure(case, args.iters, args.warmup, args.runs, device, meta)
                    algbw, busbw = records.bandwidths(coll, count * elem, t, p)
                    wrong = check(case, meta) if args.check else 0
                    row[key] = {"time_us": t * 1e6, "algbw": algbw, "busbw": busbw,
                                "wrong": wrong}
                rows.append(row)
                m = row["ip"] or row["oop"]
                line.append(f"{backend} {coll} {m['busbw']:.3f}")
        if rank == 0:
            log(f"[p={p}] {size:>10d} B  busbw GB/s: " + ", ".join(line), file=sys.stderr,
                flush=True)
    return rows
