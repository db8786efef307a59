"""Single-GPU bandwidth of ringcoll's reduce kernel against torch.add, same buffers.

    python benchmarks/kernel_bw.py        # needs a CUDA build of ringcoll and a GPU

Bytes moved per call = 3 x size (read a, read b, write out); the figure is that
over the median of timed calls (CUDA events). Offsets 0 and 4 bytes show the
16-byte pack path and the head/tail path. "+stop word": the same kernel reading the
host-mapped stop word a collective's kernels read (CudaReducer's contract: one read
per block), to show what that read costs.
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
    print(f"{'dtype':>9} {'size':>9} {'off':>3} {'ringcoll GB/s':>14} {'+stop word GB/s':>16}"
          f" {'torch.add GB/s':>15}")
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for mib in (1, 16, 256):
            for off in (0, 4):
                es = torch.tensor([], dtype=dtype).element_size()
                n = mib * (1 << 20) // es
                k = off // es
                a = torch.ones(n + k, dtype=dtype, device="cuda")[k:]
                b = torch.ones(n + k, dtype=dtype, device="cuda")[k:]
                out = torch.empty(n + k, dtype=dtype, device="cuda")[k:]
                t_r = bench(lambda: ringcoll._C.cuda_reduce(a, b, "sum", out))
                t_s = bench(lambda: ringcoll._C.cuda_reduce(a, b, "sum", out, stop_word=True))
                t_t = bench(lambda: torch.add(a, b, out=out))
                gb = 3 * n * es / 1e9
                print(f"{str(dtype)[6:]:>9} {mib:>6}MiB {off:>3} {gb / t_r:14.0f} {gb / t_s:16.0f}"
                      f" {gb / t_t:15.0f}")


if __name__ == "__main__":
    main()
