"""Single-GPU bandwidth of ringcoll's reduce kernel against torch.add, same buffers.

    python benchmarks/kernel_bw.py        # needs a CUDA build of ringcoll and a GPU

Bytes moved per call = 3 x size (read a, read b, write out); the figure is that
over the median of timed calls (CUDA events). Offsets 0 and 4 bytes show the
16-byte pack path and the head/tail path. "+host word": the same kernel reading the
host-mapped stop word once per block, as a collective's small kernels do (and, before
RINGCOLL_STOP_LATCH_BYTES, every kernel did); "+device word": reading the word's
device copy instead, as its large kernels do (reduce/reducer.h), to show what each
read costs.
"""

import os
import statistics
import sys

import torch

# Run as a script from the repository root (an in-place build, as tests/run_gpu.sh
# makes): the package is next to this directory, not installed.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import ringcoll  # noqa: E402


def bench(fn, iters=50):
    for _ in range(5):
        fn()
    times = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    return statistics.median(times)


def main():
    assert ringcoll.build_info()["cuda"], "needs the CUDA build of ringcoll"
    print(f"{'dtype':>9} {'size':>9} {'off':>3} {'ringcoll GB/s':>14} {'+host word GB/s':>16}"
          f" {'+device word GB/s':>18} {'torch.add GB/s':>15}")
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for mib in (1 / 64, 1, 8, 16, 256):
            for off in (0, 4):
                es = torch.tensor([], dtype=dtype).element_size()
                n = int(mib * (1 << 20)) // es
                k = off // es
                a = torch.ones(n + k, dtype=dtype, device="cuda")[k:]
                b = torch.ones(n + k, dtype=dtype, device="cuda")[k:]
                out = torch.empty(n + k, dtype=dtype, device="cuda")[k:]
                t_r = bench(lambda: ringcoll._C.cuda_reduce(a, b, "sum", out))
                t_s = bench(lambda: ringcoll._C.cuda_reduce(a, b, "sum", out, stop_word="host"))
                t_d = bench(lambda: ringcoll._C.cuda_reduce(a, b, "sum", out, stop_word="device"))
                t_t = bench(lambda: torch.add(a, b, out=out))
                gb = 3 * n * es / 1e9
                size = f"{mib * 1024:.0f}KiB" if mib < 1 else f"{mib}MiB"
                print(f"{str(dtype)[6:]:>9} {size:>9} {off:>3} {gb / t_r:14.0f} {gb / t_s:16.0f}"
                      f" {gb / t_d:18.0f} {gb / t_t:15.0f}")


if __name__ == "__main__":
    main()
