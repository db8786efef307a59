// Run-time choice of SIMD code for the CPU reducer's hottest pairs: SUM on
// float32, bfloat16 and float16. Every other (dtype, op) pair, and every machine
// or build without the instructions, runs the functor loops (functors.h).
//
// Contract of a SIMD kernel: for every input, including NaN, infinities, signed
// zeros and subnormals, it writes exactly the bits applyOp<T, SumOp> writes
// (widen to float, one float add a + b, round to nearest even, NaN mapped as
// floatToHalf / floatToBf16 map it). The one case the functors leave open is an
// add of two NaNs: x86 returns its first operand, and which operand the compiler
// puts first in the functor loops varies with position and vectorisation, so
// they give a's or b's NaN. The kernels always give a's (quieted), as "a + b"
// evaluated in that order on x86 does.
//
// No intrinsics here: this header is included by reducer.h, which nvcc compiles.
#pragma once

#include <cstddef>
#include <cstdint>

#include "reduce/types.h"

namespace ringcoll {

// In increasing order of width. kAvx2 needs AVX2 and F16C; kAvx512 needs
// AVX-512 F, BW and VL. Neither uses AVX512_BF16: its vcvtneps2bf16 flushes
// float subnormals to zero, which the functor's rounding does not.
enum class SimdLevel : uint8_t { kScalar, kAvx2, kAvx512 };
inline constexpr SimdLevel kSimdLevels[] = {SimdLevel::kScalar, SimdLevel::kAvx2,
                                            SimdLevel::kAvx512};

const char* simdLevelName(SimdLevel level);  // "scalar", "avx2", "avx512"
// Whether this build has the level's code and this CPU (and OS) runs it; kScalar
// always. Asked of the CPU once.
bool simdLevelAvailable(SimdLevel level);
// The widest available level: what a default-constructed CpuReducer uses.
SimdLevel bestSimdLevel();

// dst[i] = a[i] + b[i] and, when dst2 != nullptr, dst2[i] = the same, for `count`
// elements (the aliasing contract of Reducer::reduce2; pointers need only element
// alignment).
using SimdSumFn = void (*)(void* dst, void* dst2, const void* a, const void* b, size_t count);
// The kernel of `level` for SUM on `dtype`, or nullptr where that level has none
// (kScalar, other dtypes, a level this build or CPU lacks).
SimdSumFn simdSum(SimdLevel level, DType dtype);

// dst = src (no overlap) written with non-temporal stores: past the caches, so a
// destination that will not be read again soon costs no read-for-ownership of
// every line and evicts nothing. The bytes are those of memcpy. nullptr where the
// level has none (kScalar).
using SimdCopyFn = void (*)(void* dst, const void* src, size_t bytes);
SimdCopyFn simdStreamCopy(SimdLevel level);

}  // namespace ringcoll
