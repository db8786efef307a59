// The SIMD SUM algorithm, written once against a level's vector vocabulary V and
// instantiated by each level's .cc (simd_avx2.cc, simd_avx512.cc). The contract,
// bit-identical to applyOp<T, SumOp>, is cpu_simd.h's.
//
// Include inside the anonymous namespace of a level's .cc, after <cstdint>,
// <cstring>, the definition of RC_SIMD_TARGET (the level's target attribute) and
// of V. Everything here carries the attribute so that V's intrinsics inline into
// it: code for a wider target is never inlined into a baseline function.
//
// V provides, for F a vector of float lanes and I the same bits as integers:
//   kBytes                        bytes in one vector
//   load(p) -> I, store(p, I)     unaligned
//   asFloat(I) -> F, asInt(F) -> I
//   add(F, F) -> F                the plain add
//   anyNan(F x, F y) -> bool      whether a lane of x or y is NaN
//   addAFirst(F a, F b) -> F      a + b, but a's NaN (quieted) wherever a is NaN
//   shiftUp16(I), high16(I)       the low / high 16 bits of each 32-bit lane, as
//                                 the high 16 bits (the rest zero)
//   joinHigh16(I even, I odd)     even's high 16 bits into the low halves, odd's
//                                 into the high halves
//   bf16High(F) -> I              floatToBf16 of each lane, in its high 16 bits
//   halfsToFloats(p) -> F         kBytes / 4 halves at p, widened exactly
//   floatsToHalfs(F lo, F hi) -> I  both narrowed to nearest even, in order
//   canonicalHalfNan(I) -> I      NaN halves made sign | 0x7e00 (floatToHalf's)
//
// Every step adds in float, then tests for NaN: without one (the common case) the
// plain add and conversion already give the functor's bits; with one, the step is
// redone with a's NaN winning (x86 returns the first operand's NaN, and which
// operand the compiler puts first is its choice) and, for float16, NaN lanes
// made canonical (vcvtps2ph keeps payload bits). Those fix-ups, not the branch,
// make NaN lanes bit-identical; the branch keeps them off the common path.

#ifndef RC_SIMD_TARGET
#error "define RC_SIMD_TARGET before including reduce/simd_sum.h"
#endif

template <class V>
struct Float32Step {
  static constexpr size_t kElems = V::kBytes / 4, kBytes = 4;
  template <bool kTwo>
  RC_SIMD_TARGET static void step(char* dst, char* dst2, const char* a, const char* b) {
    const auto va = V::asFloat(V::load(a)), vb = V::asFloat(V::load(b));
    auto s = V::add(va, vb);
    // inf - inf needs nothing: the plain add gives x86's default NaN, as the functor.
    if (__builtin_expect(V::anyNan(va, vb), 0)) s = V::addAFirst(va, vb);
    V::store(dst, V::asInt(s));
    if constexpr (kTwo) V::store(dst2, V::asInt(s));
  }
};

// bfloat16 -> float is a 16-bit shift: the even elements (low halves of the
// 32-bit lanes) are shifted up and the odd ones masked in place, so no shuffle is
// needed and every result goes back to the lane it came from. NaN lanes need no
// conversion fix-up: a NaN sum of two widened bfloat16 is an input's NaN quieted
// or x86's default NaN, both with the quiet bit set and zero low 16 bits, so
// bf16High's rounding add cannot carry and leaves (bits >> 16) | 0x40, exactly
// floatToBf16's NaN.
template <class V>
struct BFloat16Step {
  static constexpr size_t kElems = V::kBytes / 2, kBytes = 2;
  template <bool kTwo>
  RC_SIMD_TARGET static void step(char* dst, char* dst2, const char* a, const char* b) {
    const auto va = V::load(a), vb = V::load(b);
    const auto ae = V::asFloat(V::shiftUp16(va)), be = V::asFloat(V::shiftUp16(vb));
    const auto ao = V::asFloat(V::high16(va)), bo = V::asFloat(V::high16(vb));
    auto se = V::add(ae, be), so = V::add(ao, bo);
    if (__builtin_expect(V::anyNan(se, so), 0)) {
      se = V::addAFirst(ae, be);
      so = V::addAFirst(ao, bo);
    }
    const auto r = V::joinHigh16(V::bf16High(se), V::bf16High(so));
    V::store(dst, r);
    if constexpr (kTwo) V::store(dst2, r);
  }
};

template <class V>
struct Float16Step {
  static constexpr size_t kElems = V::kBytes / 2, kBytes = 2;
  template <bool kTwo>
  RC_SIMD_TARGET static void step(char* dst, char* dst2, const char* a, const char* b) {
    constexpr size_t kHalf = V::kBytes / 2;
    const auto alo = V::halfsToFloats(a), ahi = V::halfsToFloats(a + kHalf);
    const auto blo = V::halfsToFloats(b), bhi = V::halfsToFloats(b + kHalf);
    auto lo = V::add(alo, blo), hi = V::add(ahi, bhi);
    const bool nan = V::anyNan(lo, hi);
    if (__builtin_expect(nan, 0)) {
      lo = V::addAFirst(alo, blo);
      hi = V::addAFirst(ahi, bhi);
    }
    auto r = V::floatsToHalfs(lo, hi);
    if (__builtin_expect(nan, 0)) r = V::canonicalHalfNan(r);
    V::store(dst, r);
    if constexpr (kTwo) V::store(dst2, r);
  }
};

// The first n < K::kElems elements, through one step on zero-padded stack copies,
// so every element gets the same arithmetic however short the call (no element
// falls back to the functor loops, whose two-NaN choice varies).
template <class K, bool kTwo>
RC_SIMD_TARGET void stepPartial(char* dst, char* dst2, const char* a, const char* b, size_t n) {
  if (n == 0) return;
  constexpr size_t kStepBytes = K::kElems * K::kBytes;
  alignas(64) char ba[kStepBytes] = {};
  alignas(64) char bb[kStepBytes] = {};
  alignas(64) char bd[kStepBytes];
  const size_t bytes = n * K::kBytes;
  memcpy(ba, a, bytes);
  memcpy(bb, b, bytes);
  K::template step<false>(bd, nullptr, ba, bb);
  memcpy(dst, bd, bytes);
  if constexpr (kTwo) memcpy(dst2, bd, bytes);
}

// Whole steps between a head that brings dst to a step boundary (so the main
// loop's stores are aligned) and a tail. Each step loads a and b before it
// stores, so dst may alias a.
template <class K, bool kTwo>
RC_SIMD_TARGET void walkSteps(char* dst, char* dst2, const char* a, const char* b,
                              size_t count) {
  constexpr size_t kStepBytes = K::kElems * K::kBytes;
  const size_t mis = reinterpret_cast<uintptr_t>(dst) % kStepBytes;
  size_t head = mis == 0 ? 0 : (kStepBytes - mis) / K::kBytes;
  if (head > count) head = count;
  stepPartial<K, kTwo>(dst, dst2, a, b, head);
  size_t i = head;
  for (; i + K::kElems <= count; i += K::kElems) {
    const size_t off = i * K::kBytes;
    K::template step<kTwo>(dst + off, kTwo ? dst2 + off : nullptr, a + off, b + off);
  }
  const size_t off = i * K::kBytes;
  stepPartial<K, kTwo>(dst + off, kTwo ? dst2 + off : nullptr, a + off, b + off, count - i);
}

template <class K>
RC_SIMD_TARGET void walk(void* dst, void* dst2, const void* a, const void* b, size_t count) {
  auto* d = static_cast<char*>(dst);
  const auto* pa = static_cast<const char*>(a);
  const auto* pb = static_cast<const char*>(b);
  if (dst2 == nullptr) {
    walkSteps<K, false>(d, nullptr, pa, pb, count);
  } else {
    walkSteps<K, true>(d, static_cast<char*>(dst2), pa, pb, count);
  }
}

// The level's exported kernels (simd_kernels.h), in the level's namespace.
#define RC_SIMD_DEFINE_SUM_KERNELS                                                        \
  void sumFloat32(void* dst, void* dst2, const void* a, const void* b, size_t count) {    \
    walk<Float32Step<V>>(dst, dst2, a, b, count);                                         \
  }                                                                                       \
  void sumBFloat16(void* dst, void* dst2, const void* a, const void* b, size_t count) {   \
    walk<BFloat16Step<V>>(dst, dst2, a, b, count);                                        \
  }                                                                                       \
  void sumFloat16(void* dst, void* dst2, const void* a, const void* b, size_t count) {    \
    walk<Float16Step<V>>(dst, dst2, a, b, count);                                         \
  }
