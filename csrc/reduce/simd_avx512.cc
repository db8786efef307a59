// AVX-512 (F, BW, VL) SUM kernels: 64-byte vectors, float arithmetic on 16 lanes,
// NaN fix-ups through mask registers. The same steps, fast path without NaN and
// exact redo with one, as simd_avx2.cc, which gives the reasons; the contract is
// cpu_simd.h's.
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

#include "reduce/simd_walk.h"

// Whether any lane of x or y is NaN.
RC_SIMD_TARGET inline bool anyNan(__m512 x, __m512 y) {
  return _mm512_cmp_ps_mask(x, y, _CMP_UNORD_Q) != 0;
}

// a + b, a's NaN (quieted) when a is NaN: deterministic for two NaNs.
RC_SIMD_TARGET inline __m512 addAFirst(__m512 a, __m512 b) {
  const __m512 sum = _mm512_add_ps(a, b);
  const __mmask16 aNan = _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
  return _mm512_castsi512_ps(_mm512_mask_or_epi32(_mm512_castps_si512(sum), aNan,
                                                  _mm512_castps_si512(a),
                                                  _mm512_set1_epi32(0x00400000)));
}

// floatToBf16 into the high half of each 32-bit lane, integer rounding
// (vcvtneps2bf16 flushes subnormals); NaN lanes come out right unaided.
RC_SIMD_TARGET inline __m512i bf16High(__m512 f) {
  const __m512i x = _mm512_castps_si512(f);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  return _mm512_add_epi32(x, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb));
}

// vcvtps2ph keeps NaN payload bits; the functor's NaN is sign | 0x7e00.
RC_SIMD_TARGET inline __m512i canonicalHalfNan(__m512i h) {
  const __mmask32 nan = _mm512_cmpgt_epi16_mask(_mm512_and_si512(h, _mm512_set1_epi16(0x7fff)),
                                                _mm512_set1_epi16(0x7c00));
  const __m512i canon = _mm512_or_si512(_mm512_and_si512(h, _mm512_set1_epi16(-0x8000)),
                                        _mm512_set1_epi16(0x7e00));
  return _mm512_mask_blend_epi16(nan, h, canon);
}

template <bool kTwo>
RC_SIMD_TARGET inline void store(char* dst, char* dst2, __m512i v) {
  _mm512_storeu_si512(dst, v);
  if constexpr (kTwo) _mm512_storeu_si512(dst2, v);
}

RC_SIMD_TARGET inline __m512i load(const char* p) { return _mm512_loadu_si512(p); }

struct Float32Step {
  static constexpr size_t kElems = 16, kBytes = 4;
  template <bool kTwo>
  RC_SIMD_TARGET static void step(char* dst, char* dst2, const char* a, const char* b) {
    const __m512 va = _mm512_castsi512_ps(load(a)), vb = _mm512_castsi512_ps(load(b));
    __m512 s = _mm512_add_ps(va, vb);
    if (__builtin_expect(anyNan(va, vb), 0)) s = addAFirst(va, vb);
    store<kTwo>(dst, dst2, _mm512_castps_si512(s));
  }
};

// Even elements shifted up, odd ones masked in place: no shuffles.
struct BFloat16Step {
  static constexpr size_t kElems = 32, kBytes = 2;
  template <bool kTwo>
  RC_SIMD_TARGET static void step(char* dst, char* dst2, const char* a, const char* b) {
    const __m512i va = load(a), vb = load(b), high = _mm512_set1_epi32(int32_t(0xffff0000u));
    const __m512 ae = _mm512_castsi512_ps(_mm512_slli_epi32(va, 16));
    const __m512 be = _mm512_castsi512_ps(_mm512_slli_epi32(vb, 16));
    const __m512 ao = _mm512_castsi512_ps(_mm512_and_si512(va, high));
    const __m512 bo = _mm512_castsi512_ps(_mm512_and_si512(vb, high));
    __m512 se = _mm512_add_ps(ae, be), so = _mm512_add_ps(ao, bo);
    if (__builtin_expect(anyNan(se, so), 0)) {
      se = addAFirst(ae, be);
      so = addAFirst(ao, bo);
    }
    const __m512i re = bf16High(se), ro = bf16High(so);
    store<kTwo>(dst, dst2, _mm512_or_si512(_mm512_srli_epi32(re, 16), _mm512_and_si512(ro, high)));
  }
};

RC_SIMD_TARGET inline __m512 halfsToFloats(const char* p) {  // 16 halves
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

struct Float16Step {
  static constexpr size_t kElems = 32, kBytes = 2;
  template <bool kTwo>
  RC_SIMD_TARGET static void step(char* dst, char* dst2, const char* a, const char* b) {
    const __m512 alo = halfsToFloats(a), ahi = halfsToFloats(a + 32);
    const __m512 blo = halfsToFloats(b), bhi = halfsToFloats(b + 32);
    __m512 lo = _mm512_add_ps(alo, blo), hi = _mm512_add_ps(ahi, bhi);
    const bool nan = anyNan(lo, hi);
    if (__builtin_expect(nan, 0)) {
      lo = addAFirst(alo, blo);
      hi = addAFirst(ahi, bhi);
    }
    constexpr int kRne = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    __m512i h = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtps_ph(lo, kRne)),
                                   _mm512_cvtps_ph(hi, kRne), 1);
    if (__builtin_expect(nan, 0)) h = canonicalHalfNan(h);
    store<kTwo>(dst, dst2, h);
  }
};

}  // namespace

void sumFloat32(void* dst, void* dst2, const void* a, const void* b, size_t count) {
  walk<Float32Step>(dst, dst2, a, b, count);
}
void sumBFloat16(void* dst, void* dst2, const void* a, const void* b, size_t count) {
  walk<BFloat16Step>(dst, dst2, a, b, count);
}
void sumFloat16(void* dst, void* dst2, const void* a, const void* b, size_t count) {
  walk<Float16Step>(dst, dst2, a, b, count);
}

}  // namespace ringcoll::simd::avx512

#endif  // RC_SIMD_X86
