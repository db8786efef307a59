"""Single-thread bandwidth of the CPU reducer's SUM (dst = a + b) at every SIMD
level this machine and build offer, against torch.add(a, b, out=dst).

    python benchmarks/cpu_reduce_bw.py [--reps 7] [--sizes 64K,1M,16M,64M]

Convention: GB/s = 3 x N / time, N the bytes of one operand: a and b are read and
dst is written (write-allocate traffic not counted), 1 GB = 1e9 bytes. dst is a
third tensor (out of place). Each figure is the median over --reps timed loops of
about 30 ms each, after one warm-up loop; the machine is shared and noisy, so
compare columns of one run rather than runs. Every call goes through Python
(about a microsecond or two for either column), which shows at 64 KiB.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from ringcoll import _C

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text):
    text = text.strip().upper().rstrip("IB")
    return int(text[:-1]) * UNITS[text[-1]] if text[-1] in UNITS else int(text)


def levels():
    """SIMD levels to run: every available one (a build without the level
    argument has only the functor loops, shown as 'scalar')."""
    return list(_C.cpu_simd_levels()) if hasattr(_C, "cpu_simd_levels") else ["scalar"]


def ringcoll_call(level, a, b, out):
    if hasattr(_C, "cpu_simd_levels"):
        return lambda: _C.cpu_reduce(a, b, "sum", out=out, level=level)
    return lambda: _C.cpu_reduce(a, b, "sum", out=out)


def median_seconds(fn, reps, target_s=0.03):
    """Median seconds per call over `reps` loops of enough calls to last target_s."""
    fn()
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-7)
    iters = max(1, int(target_s / once))
    per_call = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        per_call.append((time.perf_counter() - t0) / iters)
    return statistics.median(per_call)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--sizes", default="64K,1M,16M,64M", help="bytes of one operand")
    args = ap.parse_args()
    torch.set_num_threads(1)
    lv = levels()
    cols = [f"ringcoll {x}" for x in lv] + ["torch.add"]
    print("CPU SUM bandwidth, 1 thread, GB/s = 3 x operand bytes / time "
          f"(median of {args.reps})")
    print(f"{'dtype':<9}{'size':>7}" + "".join(f"{c:>17}" for c in cols))
    for dtype in DTYPES:
        for size in (parse_size(s) for s in args.sizes.split(",")):
            n = size // torch.empty((), dtype=dtype).element_size()
            g = torch.Generator().manual_seed(n)
            a = torch.randn(n, generator=g).to(dtype)
            b = torch.randn(n, generator=g).to(dtype)
            out = torch.empty_like(a)
            fns = [ringcoll_call(x, a, b, out) for x in lv]
            fns.append(lambda: torch.add(a, b, out=out))
            gbps = [3 * size / median_seconds(f, args.reps) / 1e9 for f in fns]
            label = f"{size >> 20}M" if size >= 1 << 20 else f"{size >> 10}K"
            print(f"{str(dtype).replace('torch.', ''):<9}{label:>7}"
                  + "".join(f"{x:>17.1f}" for x in gbps), flush=True)


if __name__ == "__main__":
    main()
