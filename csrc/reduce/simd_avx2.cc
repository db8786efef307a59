// AVX2 + F16C SUM kernels: 32-byte vectors, float arithmetic on 8 lanes. The
// contract (bit-identical to applyOp<T, SumOp>) is cpu_simd.h's.
//
// Each step adds in float, then tests for NaN: without one (the common case) the
// plain add and conversion give the functor's bits; with one, the step is redone
// with a's NaN winning (addAFirst) and, for float16, NaN lanes converted as
// floatToHalf converts them. Those fix-ups, not the branch, are what makes NaN
// lanes bit-identical; the branch only keeps them off the common path.
#include "reduce/simd_kernels.h"

#if RC_SIMD_X86
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#define RC_SIMD_TARGET __attribute__((target("avx2,f16c")))

namespace ringcoll::simd::avx2 {

namespace {

#include "reduce/simd_walk.h"

// Whether any lane of x or y is NaN.
RC_SIMD_TARGET inline bool anyNan(__m256 x, __m256 y) {
  const __m256 unord = _mm256_cmp_ps(x, y, _CMP_UNORD_Q);
  return !_mm256_testz_ps(unord, unord);
}

// a + b with a's NaN (quieted) winning when both are NaN: the add alone leaves
// that choice to the compiler's operand order. A lone NaN operand, or inf - inf
// (x86's default NaN, 0xffc00000), comes from the add itself as in the functor.
RC_SIMD_TARGET inline __m256 addAFirst(__m256 a, __m256 b) {
  const __m256 sum = _mm256_add_ps(a, b);
  const __m256 aNan = _mm256_cmp_ps(a, a, _CMP_UNORD_Q);
  const __m256 aQuiet = _mm256_or_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(0x00400000)));
  return _mm256_blendv_ps(sum, aQuiet, aNan);
}

// floatToBf16 with the bfloat16 left in the HIGH half of each 32-bit lane (the
// low half is garbage): round to nearest even with an integer add, as the
// functor does (vcvtneps2bf16 would flush subnormals). NaN lanes need no
// fix-up: a NaN sum of two widened bfloat16 is an input's NaN quieted or x86's
// default NaN, both with the quiet bit set and zero low 16 bits, so the add
// cannot carry and leaves (bits >> 16) | 0x40, the functor's NaN.
RC_SIMD_TARGET inline __m256i bf16High(__m256 f) {
  const __m256i x = _mm256_castps_si256(f);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  return _mm256_add_epi32(x, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
}

// floatToHalf's NaN on 16 halves from vcvtps2ph: the instruction keeps the top
// payload bits (sign | 0x7e00 | payload >> 13) where the functor gives sign | 0x7e00.
// Its rounding (nearest even, overflow to inf, subnormal results) already matches.
RC_SIMD_TARGET inline __m256i canonicalHalfNan(__m256i h) {
  const __m256i nan = _mm256_cmpgt_epi16(_mm256_and_si256(h, _mm256_set1_epi16(0x7fff)),
                                         _mm256_set1_epi16(0x7c00));
  const __m256i kept = _mm256_andnot_si256(_mm256_and_si256(nan, _mm256_set1_epi16(0x7fff)), h);
  return _mm256_or_si256(kept, _mm256_and_si256(nan, _mm256_set1_epi16(0x7e00)));
}

template <bool kTwo>
RC_SIMD_TARGET inline void store(char* dst, char* dst2, __m256i v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), v);
  if constexpr (kTwo) _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst2), v);
}

RC_SIMD_TARGET inline __m256i load(const char* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

struct Float32Step {
  static constexpr size_t kElems = 8, kBytes = 4;
  template <bool kTwo>
  RC_SIMD_TARGET static void step(char* dst, char* dst2, const char* a, const char* b) {
    const __m256 va = _mm256_castsi256_ps(load(a)), vb = _mm256_castsi256_ps(load(b));
    __m256 s = _mm256_add_ps(va, vb);
    if (__builtin_expect(anyNan(va, vb), 0)) s = addAFirst(va, vb);
    store<kTwo>(dst, dst2, _mm256_castps_si256(s));
  }
};

// bfloat16 -> float is a 16-bit shift. The even elements (low halves of the
// 32-bit lanes) are shifted up, the odd ones masked in place, so no shuffle is
// needed either way and the results go back to the lanes they came from.
struct BFloat16Step {
  static constexpr size_t kElems = 16, kBytes = 2;
  template <bool kTwo>
  RC_SIMD_TARGET static void step(char* dst, char* dst2, const char* a, const char* b) {
    const __m256i va = load(a), vb = load(b), high = _mm256_set1_epi32(int32_t(0xffff0000u));
    const __m256 ae = _mm256_castsi256_ps(_mm256_slli_epi32(va, 16));
    const __m256 be = _mm256_castsi256_ps(_mm256_slli_epi32(vb, 16));
    const __m256 ao = _mm256_castsi256_ps(_mm256_and_si256(va, high));
    const __m256 bo = _mm256_castsi256_ps(_mm256_and_si256(vb, high));
    __m256 se = _mm256_add_ps(ae, be), so = _mm256_add_ps(ao, bo);
    if (__builtin_expect(anyNan(se, so), 0)) {
      se = addAFirst(ae, be);
      so = addAFirst(ao, bo);
    }
    const __m256i re = bf16High(se), ro = bf16High(so);
    store<kTwo>(dst, dst2, _mm256_or_si256(_mm256_srli_epi32(re, 16), _mm256_and_si256(ro, high)));
  }
};

RC_SIMD_TARGET inline __m256 halfsToFloats(const char* p) {  // 8 halves
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// float16 <-> float with F16C: vcvtph2ps is exact, vcvtps2ph rounds to nearest
// even (immediate, not MXCSR).
struct Float16Step {
  static constexpr size_t kElems = 16, kBytes = 2;
  template <bool kTwo>
  RC_SIMD_TARGET static void step(char* dst, char* dst2, const char* a, const char* b) {
    const __m256 alo = halfsToFloats(a), ahi = halfsToFloats(a + 16);
    const __m256 blo = halfsToFloats(b), bhi = halfsToFloats(b + 16);
    __m256 lo = _mm256_add_ps(alo, blo), hi = _mm256_add_ps(ahi, bhi);
    const bool nan = anyNan(lo, hi);
    if (__builtin_expect(nan, 0)) {
      lo = addAFirst(alo, blo);
      hi = addAFirst(ahi, bhi);
    }
    constexpr int kRne = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    __m256i h = _mm256_set_m128i(_mm256_cvtps_ph(hi, kRne), _mm256_cvtps_ph(lo, kRne));
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

}  // namespace ringcoll::simd::avx2

#endif  // RC_SIMD_X86
