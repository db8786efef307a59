// The walk every SIMD SUM kernel shares, instantiated once per level: whole steps
// of K::kElems elements, between a head that brings dst to a step boundary (so
// the stores of the main loop are aligned) and a tail. Head and tail run the same
// step on zero-padded copies, so every element gets the kernel's arithmetic
// however short the call, and no element falls back to the functor loops (whose
// choice between two NaNs varies, see cpu_simd.h).
//
// Include inside the anonymous namespace of a level's .cc, after <cstring> and
// after defining RC_SIMD_TARGET as that level's target attribute: the walk must
// carry the attribute for the level's steps to be inlined into it (code for a
// wider target is never inlined into a baseline function).
//
// K provides kElems, kBytes (the element size) and
//   template <bool kTwo> static void step(char* dst, char* dst2, const char* a, const char* b);
// which reads kElems elements of a and b (unaligned loads) before it writes dst,
// and dst2 when kTwo, so dst may alias a.

#ifndef RC_SIMD_TARGET
#error "define RC_SIMD_TARGET before including reduce/simd_walk.h"
#endif

// The first n < K::kElems elements, through one step on stack copies.
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
