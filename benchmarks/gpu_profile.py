"""Where a large CUDA collective's device time goes: ringcoll against NCCL, the same
ranks, under torch's profiler (CUPTI), one Chrome trace per rank.

    python benchmarks/gpu_profile.py --out DIR          # 2 ranks share GPU 0
    python benchmarks/gpu_profile.py --device cpu --out DIR   # a dry run of the method

Each rank warms up, then profiles `--calls` calls of each collective (reduce-scatter,
all-gather, all-reduce, `--bytes` of float32) on each backend, every call inside a
record_function range named `<backend> <collective> <k>` and followed by a
synchronize, so a trace shows per call which kernels ran (NCCL's send/recv and
ring kernels, ringcoll's reductions) and the gaps between them; then the reduction
alone (ringcoll's kernel and torch.add on one chunk's size) for comparison. Rank 0 prints the
profiler's table of device time per kernel. The traces are written to
DIR/trace_rank<r>.json, and summarized from them: per profiled call, each kernel's
start (from the call's start on the device) and duration, and the call's device time.

    python benchmarks/gpu_profile.py --summarize DIR    # the summary of traces already written
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from ringcoll.gpu import share_gpu_env  # noqa: E402
from tests import mp  # noqa: E402


def world(rank, p, device, n_bytes, calls, out):
    if device == "cuda":
        torch.cuda.set_device(0)
    stock = dist.new_group(backend="nccl" if device == "cuda" else "gloo")
    groups = {"ringcoll": dist.group.WORLD, "stock": stock}
    n = n_bytes // 4 // p * p
    full = torch.ones(n, device=device)
    part = torch.empty(n // p, device=device)

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()
        dist.barrier(group=mp.GLOO)

    colls = {
        "reduce_scatter": lambda g: dist.reduce_scatter_tensor(part, full, group=g),
        "all_gather": lambda g: dist.all_gather_into_tensor(full, part, group=g),
        "all_reduce": lambda g: dist.all_reduce(full, group=g),
    }
    for g in groups.values():  # warm-up: communicators, plans, segments
        for fn in colls.values():
            for _ in range(2):
                fn(g)
    sync()
    acts = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=acts) as prof:
        for cname, fn in colls.items():
            for bname, g in groups.items():
                for k in range(calls):
                    full.fill_(1)
                    sync()
                    with torch.profiler.record_function(f"{bname} {cname} {k}"):
                        fn(g)
                        sync()
        if device == "cuda":  # the reduction alone, same size as one rank's chunk
            import ringcoll
            a, b, o = (torch.ones(n // p, device=device) for _ in range(3))
            for k in range(calls):
                for what, fn in (("ringcoll cuda_reduce", lambda: ringcoll._C.cuda_reduce(
                                     a, b, "sum", o)),
                                 ("torch.add", lambda: torch.add(a, b, out=o))):
                    sync()
                    with torch.profiler.record_function(f"alone {what} {k}"):
                        fn()
                        sync()
    os.makedirs(out, exist_ok=True)
    prof.export_chrome_trace(os.path.join(out, f"trace_rank{rank}.json"))
    if rank == 0:
        key = "self_cuda_time_total" if device == "cuda" else "self_cpu_time_total"
        return prof.key_averages().table(sort_by=key, row_limit=25)
    return None


def summarize(out, nproc):
    """Per rank and profiled call (record_function range on the device), the kernels
    it ran: start after the call's first device activity + duration, in ms."""
    lines = []
    for rank in range(nproc):
        with open(os.path.join(out, f"trace_rank{rank}.json")) as f:
            events = json.load(f)["traceEvents"]
        spans = [e for e in events if e.get("ph") == "X"]
        kernels = sorted((e for e in spans if e.get("cat") == "kernel"), key=lambda e: e["ts"])
        calls = sorted((e for e in spans if e.get("cat") == "gpu_user_annotation"
                        and (e["name"].split(":")[0].split() or [""])[0] in ("ringcoll", "stock", "alone", "nccl")),
                       key=lambda e: e["ts"])
        # torch may record a call's range more than once: keep the longest. NCCL's own
        # ranges ("nccl:<op>", one per call, not numbered) are each kept.
        longest = {}
        for call in calls:
            key = (call["name"], call["ts"]) if call["name"].startswith("nccl:") else call["name"]
            if call["dur"] > longest.get(key, {"dur": -1})["dur"]:
                longest[key] = call
        for call in sorted(longest.values(), key=lambda e: e["ts"]):
            t0, t1 = call["ts"], call["ts"] + call["dur"]
            ks = [k for k in kernels if t0 - 1 <= k["ts"] <= t1 + 1]
            parts = "; ".join(f"{_short(k['name'])} @{(k['ts'] - t0) / 1e3:.3f}+{k['dur'] / 1e3:.3f}"
                              for k in ks)
            lines.append(f"rank {rank} {call['name']:<30} {call['dur'] / 1e3:7.3f} ms  {parts}")
    return "\n".join(lines)


def _short(name):
    for key, short in (("SendRecv", "nccl SendRecv"), ("reduceKernel", "ringcoll reduce"),
                       ("copyKernel", "ringcoll copy"), ("vectorized_elementwise", "torch elementwise")):
        if key in name:
            return short
    return name.split("(")[0][:40]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--bytes", type=int, default=16 << 20)
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--out", default="gpu-profile")
    ap.add_argument("--summarize", metavar="DIR", help="only summarize DIR's traces")
    args = ap.parse_args()
    if args.summarize:
        print(summarize(args.summarize, args.nproc))
        return
    envs = [share_gpu_env(r) if args.device == "cuda" else {} for r in range(args.nproc)]
    res = mp.run_world(args.nproc, world, args.device, args.bytes, args.calls,
                       os.path.abspath(args.out), timeout=300,
                       rank_env={k: [e[k] for e in envs] for k in envs[0]} if envs[0] else None)
    print(f"p = {args.nproc}, {args.device}, {args.bytes} B float32, {args.calls} calls each")
    print(res[0])
    print("per call: kernel @start+duration (ms, from the call's start on the device)")
    print(summarize(os.path.abspath(args.out), args.nproc))


if __name__ == "__main__":
    main()
