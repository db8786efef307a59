// AVX-512 (F, BW, VL) vocabulary for the SIMD SUM kernels (simd_sum.h has the
// algorithm and the reasons; cpu_simd.h the contract): 64-byte vectors, 16 float
// lanes, NaN fix-ups through mask registers.
#include "reduce/simd_kernels.h"

#if RC_SIMD_X86
// GCC 12 flags the deliberately undefined vectors (_mm512_undefined_*, written
// `__Y = __Y`) inside its own AVX-512 headers as uninitialised: a false positive
// that later GCCs no longer give.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#define RC_SIMD_TARGET __attribute__((target("avx512f,avx512bw,avx512vl")))

namespace ringcoll::simd::avx512 {

namespace {

struct V {
  using F = __m512;
  using I = __m512i;
  static constexpr size_t kBytes = 64;

  RC_SIMD_TARGET static I load(const char* p) { return _mm512_loadu_si512(p); }
  RC_SIMD_TARGET static void store(char* p, I v) { _mm512_storeu_si512(p, v); }
  RC_SIMD_TARGET static F asFloat(I v) { return _mm512_castsi512_ps(v); }
  RC_SIMD_TARGET static I asInt(F v) { return _mm512_castps_si512(v); }
  RC_SIMD_TARGET static F add(F x, F y) { return _mm512_add_ps(x, y); }

  RC_SIMD_TARGET static bool anyNan(F x, F y) {
    return _mm512_cmp_ps_mask(x, y, _CMP_UNORD_Q) != 0;
  }
  RC_SIMD_TARGET static F addAFirst(F a, F b) {
    const __mmask16 aNan = _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
    return _mm512_castsi512_ps(_mm512_mask_or_epi32(asInt(_mm512_add_ps(a, b)), aNan, asInt(a),
                                                    _mm512_set1_epi32(0x00400000)));
  }

  RC_SIMD_TARGET static I shiftUp16(I v) { return _mm512_slli_epi32(v, 16); }
  RC_SIMD_TARGET static I high16(I v) {
    return _mm512_and_si512(v, _mm512_set1_epi32(static_cast<int32_t>(0xffff0000u)));
  }
  RC_SIMD_TARGET static I joinHigh16(I even, I odd) {
    return _mm512_or_si512(_mm512_srli_epi32(even, 16), high16(odd));
  }
  // Integer rounding: vcvtneps2bf16 (AVX512_BF16) flushes subnormals.
  RC_SIMD_TARGET static I bf16High(F f) {
    const I x = _mm512_castps_si512(f);
    const I lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    return _mm512_add_epi32(x, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb));
  }

  RC_SIMD_TARGET static F halfsToFloats(const char* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  RC_SIMD_TARGET static I floatsToHalfs(F lo, F hi) {
    constexpr int kRne = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtps_ph(lo, kRne)),
                              _mm512_cvtps_ph(hi, kRne), 1);
  }
  RC_SIMD_TARGET static I canonicalHalfNan(I h) {
    const __mmask32 nan = _mm512_cmpgt_epi16_mask(
        _mm512_and_si512(h, _mm512_set1_epi16(0x7fff)), _mm512_set1_epi16(0x7c00));
    const I canon = _mm512_or_si512(_mm512_and_si512(h, _mm512_set1_epi16(-0x8000)),
                                    _mm512_set1_epi16(0x7e00));
    return _mm512_mask_blend_epi16(nan, h, canon);
  }
};

#include "reduce/simd_sum.h"

}  // namespace

RC_SIMD_DEFINE_SUM_KERNELS

}  // namespace ringcoll::simd::avx512

#endif  // RC_SIMD_X86
