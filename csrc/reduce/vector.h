// The 16-byte vector path shared by the CUDA kernels and the CPU reducer.
//
// A reduction over `count` elements is split into a scalar head (elements before
// the first 16-byte boundary), whole 16-byte packs, and a scalar tail. Packs are
// used only when dst, a and b sit at the same offset from a 16-byte boundary and
// that offset is a whole number of elements; otherwise everything is head (the
// unaligned fallback). The arithmetic is host-callable so CPU tests cover it, and
// the CPU reducer walks the same split so it runs reducePack too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "reduce/functors.h"

namespace ringcoll {

struct alignas(16) Pack16 {
  uint8_t bytes[16];
};
static_assert(sizeof(Pack16) == 16 && alignof(Pack16) == 16, "one 16-byte vector");

struct VecSplit {
  size_t head = 0;   // scalar elements first
  size_t packs = 0;  // then this many 16-byte packs
  size_t tail = 0;   // then scalar elements
};

RC_HD VecSplit vectorSplit(uintptr_t dst, uintptr_t a, uintptr_t b, size_t count,
                           size_t elemSize) {
  VecSplit s;
  const uintptr_t off = dst % 16;
  if (elemSize == 0 || elemSize > 16 || a % 16 != off || b % 16 != off ||
      off % elemSize != 0) {
    s.head = count;
    return s;
  }
  const size_t perPack = 16 / elemSize;
  const size_t head = ((16 - off) % 16) / elemSize;
  s.head = head < count ? head : count;
  s.packs = (count - s.head) / perPack;
  s.tail = count - s.head - s.packs * perPack;
  return s;
}

// d = op(a, b) for the 16 / sizeof(T) elements of one pack.
template <typename T, typename Op>
RC_HD void reducePack(Pack16& d, const Pack16& a, const Pack16& b) {
  constexpr int kN = 16 / static_cast<int>(sizeof(T));
  T av[kN], bv[kN], dv[kN];
  memcpy(av, a.bytes, 16);
  memcpy(bv, b.bytes, 16);
#if defined(__CUDACC__)
#pragma unroll
#endif
  for (int i = 0; i < kN; ++i) dv[i] = applyOp<T, Op>(av[i], bv[i]);
  memcpy(d.bytes, dv, 16);
}

}  // namespace ringcoll
