// Which SIMD levels this machine runs, and the kernel table behind simdSum().
#include "reduce/cpu_simd.h"

#include "reduce/simd_kernels.h"

namespace ringcoll {

namespace {

// The CPU's answer, per level: the features each level's target attribute names.
// __builtin_cpu_supports also checks that the OS saves the AVX / AVX-512 state.
bool cpuRuns(SimdLevel level) {
#if RC_SIMD_X86
  __builtin_cpu_init();
  switch (level) {
    case SimdLevel::kScalar: return true;
    case SimdLevel::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
    case SimdLevel::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
          __builtin_cpu_supports("avx512vl");
  }
  return false;
#else
  return level == SimdLevel::kScalar;
#endif
}

}  // namespace

const char* simdLevelName(SimdLevel level) {
  switch (level) {
    case SimdLevel::kScalar: return "scalar";
    case SimdLevel::kAvx2: return "avx2";
    case SimdLevel::kAvx512: return "avx512";
  }
  return "?";
}

bool simdLevelAvailable(SimdLevel level) {
  static const bool avail[] = {cpuRuns(SimdLevel::kScalar), cpuRuns(SimdLevel::kAvx2),
                               cpuRuns(SimdLevel::kAvx512)};
  static_assert(sizeof(avail) / sizeof(avail[0]) == sizeof(kSimdLevels) / sizeof(kSimdLevels[0]),
                "one entry per level");
  return avail[static_cast<size_t>(level)];
}

SimdLevel bestSimdLevel() {
  static const SimdLevel best = [] {
    SimdLevel b = SimdLevel::kScalar;
    for (SimdLevel l : kSimdLevels) {
      if (simdLevelAvailable(l)) b = l;
    }
    return b;
  }();
  return best;
}

SimdCopyFn simdStreamCopy(SimdLevel level) {
#if RC_SIMD_X86
  // One kernel for both levels: 32-byte streaming stores already write whole lines
  // past the cache.
  if (level != SimdLevel::kScalar && simdLevelAvailable(level)) return simd::avx2::streamCopy;
#else
  (void)level;
#endif
  return nullptr;
}

SimdSumFn simdSum(SimdLevel level, DType dtype) {
#if RC_SIMD_X86
  if (!simdLevelAvailable(level)) return nullptr;
  switch (level) {
    case SimdLevel::kScalar: return nullptr;
    case SimdLevel::kAvx2:
      if (dtype == DType::kFloat32) return simd::avx2::sumFloat32;
      if (dtype == DType::kBFloat16) return simd::avx2::sumBFloat16;
      if (dtype == DType::kFloat16) return simd::avx2::sumFloat16;
      return nullptr;
    case SimdLevel::kAvx512:
      if (dtype == DType::kFloat32) return simd::avx512::sumFloat32;
      if (dtype == DType::kBFloat16) return simd::avx512::sumBFloat16;
      if (dtype == DType::kFloat16) return simd::avx512::sumFloat16;
      return nullptr;
  }
#else
  (void)level;
  (void)dtype;
#endif
  return nullptr;
}

}  // namespace ringcoll
