// The SIMD SUM kernels of each level (simd_avx2.cc, simd_avx512.cc), found by
// simdSum() in cpu_simd.cc; the contract is cpu_simd.h's. Compiled only for x86
// with GCC or Clang, where a function can carry its own target attribute, so the
// rest of the build stays baseline x86-64 and the CPU is asked at run time.
#pragma once

#include <cstddef>

// -DRC_SIMD_X86=0 builds the non-x86 variant (functor loops only) on x86 too.
#ifndef RC_SIMD_X86
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define RC_SIMD_X86 1
#else
#define RC_SIMD_X86 0
#endif
#endif

#if RC_SIMD_X86
namespace ringcoll::simd {

#define RC_SIMD_SUM_KERNELS                                                          \
  void sumFloat32(void* dst, void* dst2, const void* a, const void* b, size_t count);  \
  void sumBFloat16(void* dst, void* dst2, const void* a, const void* b, size_t count); \
  void sumFloat16(void* dst, void* dst2, const void* a, const void* b, size_t count);

namespace avx2 {
RC_SIMD_SUM_KERNELS
// dst = src with non-temporal stores (cpu_simd.h: simdStreamCopy).
void streamCopy(void* dst, const void* src, size_t bytes);
}
namespace avx512 {
RC_SIMD_SUM_KERNELS
}

#undef RC_SIMD_SUM_KERNELS

}  // namespace ringcoll::simd
#endif
