// AVX2 + F16C vocabulary for the SIMD SUM kernels (simd_sum.h has the algorithm
// and the reasons; cpu_simd.h the contract): 32-byte vectors, 8 float lanes.
#include "reduce/simd_kernels.h"

#if RC_SIMD_X86
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#define RC_SIMD_TARGET __attribute__((target("avx2,f16c")))

namespace ringcoll::simd::avx2 {

namespace {

struct V {
  using F = __m256;
  using I = __m256i;
  static constexpr size_t kBytes = 32;

  RC_SIMD_TARGET static I load(const char* p) {
    return _mm256_loadu_si256(reinterpret_cast<const I*>(p));
  }
  RC_SIMD_TARGET static void store(char* p, I v) { _mm256_storeu_si256(reinterpret_cast<I*>(p), v); }
  RC_SIMD_TARGET static F asFloat(I v) { return _mm256_castsi256_ps(v); }
  RC_SIMD_TARGET static I asInt(F v) { return _mm256_castps_si256(v); }
  RC_SIMD_TARGET static F add(F x, F y) { return _mm256_add_ps(x, y); }

  RC_SIMD_TARGET static bool anyNan(F x, F y) {
    const F unord = _mm256_cmp_ps(x, y, _CMP_UNORD_Q);
    return !_mm256_testz_ps(unord, unord);
  }
  RC_SIMD_TARGET static F addAFirst(F a, F b) {
    const F aNan = _mm256_cmp_ps(a, a, _CMP_UNORD_Q);
    const F aQuiet = _mm256_or_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(0x00400000)));
    return _mm256_blendv_ps(_mm256_add_ps(a, b), aQuiet, aNan);
  }

  RC_SIMD_TARGET static I shiftUp16(I v) { return _mm256_slli_epi32(v, 16); }
  RC_SIMD_TARGET static I high16(I v) {
    return _mm256_and_si256(v, _mm256_set1_epi32(static_cast<int32_t>(0xffff0000u)));
  }
  RC_SIMD_TARGET static I joinHigh16(I even, I odd) {
    return _mm256_or_si256(_mm256_srli_epi32(even, 16), high16(odd));
  }
  // Round to nearest even with an integer add, as floatToBf16 (vcvtneps2bf16
  // would flush subnormals).
  RC_SIMD_TARGET static I bf16High(F f) {
    const I x = _mm256_castps_si256(f);
    const I lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    return _mm256_add_epi32(x, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
  }

  // vcvtph2ps is exact; vcvtps2ph rounds to nearest even by its immediate (not
  // MXCSR), overflow to inf and subnormal results as floatToHalf.
  RC_SIMD_TARGET static F halfsToFloats(const char* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  RC_SIMD_TARGET static I floatsToHalfs(F lo, F hi) {
    constexpr int kRne = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    return _mm256_set_m128i(_mm256_cvtps_ph(hi, kRne), _mm256_cvtps_ph(lo, kRne));
  }
  RC_SIMD_TARGET static I canonicalHalfNan(I h) {
    const I nan = _mm256_cmpgt_epi16(_mm256_and_si256(h, _mm256_set1_epi16(0x7fff)),
                                     _mm256_set1_epi16(0x7c00));
    const I kept = _mm256_andnot_si256(_mm256_and_si256(nan, _mm256_set1_epi16(0x7fff)), h);
    return _mm256_or_si256(kept, _mm256_and_si256(nan, _mm256_set1_epi16(0x7e00)));
  }
};

#include "reduce/simd_sum.h"

}  // namespace

RC_SIMD_DEFINE_SUM_KERNELS

// Unaligned head with memcpy up to a 32-byte boundary of dst, 32-byte streaming
// stores, the tail with memcpy; the fence orders the streaming stores before
// whatever publishes the data.
RC_SIMD_TARGET void streamCopy(void* dst, const void* src, size_t bytes) {
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  size_t head = (32 - reinterpret_cast<uintptr_t>(d) % 32) % 32;
  if (head > bytes) head = bytes;
  std::memcpy(d, s, head);
  d += head;
  s += head;
  bytes -= head;
  const size_t vectors = bytes / 32;
  for (size_t i = 0; i < vectors; ++i) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d) + i,
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s) + i));
  }
  _mm_sfence();
  std::memcpy(d + vectors * 32, s + vectors * 32, bytes - vectors * 32);
}

}  // namespace ringcoll::simd::avx2

#endif  // RC_SIMD_X86
