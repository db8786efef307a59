// CPU loops over the shared functors. Plain loops the compiler vectorises for
// float/int; the 16-bit float types go through Elem<T>'s float widening.
#include <cstring>

#include "reduce/dispatch.h"
#include "reduce/reducer.h"
#include "reduce/vector.h"

namespace ringcoll {

namespace {
// The same head / 16-byte packs / tail walk as the CUDA kernel (reduce/vector.h),
// so the pack code path is exercised by CPU tests.
template <typename T, typename Op>
void reduceLoop(T* dst, const T* a, const T* b, size_t count) {
  const VecSplit s = vectorSplit(reinterpret_cast<uintptr_t>(dst),
                                 reinterpret_cast<uintptr_t>(a),
                                 reinterpret_cast<uintptr_t>(b), count, sizeof(T));
  for (size_t i = 0; i < s.head; ++i) dst[i] = applyOp<T, Op>(a[i], b[i]);
  auto* dp = reinterpret_cast<Pack16*>(dst + s.head);
  const auto* ap = reinterpret_cast<const Pack16*>(a + s.head);
  const auto* bp = reinterpret_cast<const Pack16*>(b + s.head);
  for (size_t k = 0; k < s.packs; ++k) reducePack<T, Op>(dp[k], ap[k], bp[k]);
  const size_t t0 = count - s.tail;
  for (size_t i = t0; i < count; ++i) dst[i] = applyOp<T, Op>(a[i], b[i]);
}
}  // namespace

void CpuReducer::reduce(void* dst, const void* a, const void* b, size_t count,
                        DType dtype, RedOp op) {
  if (count == 0) return;
  dispatchDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    dispatchOp(op, [&](auto opTag) {
      using Op = decltype(opTag);
      reduceLoop<T, Op>(static_cast<T*>(dst), static_cast<const T*>(a),
                        static_cast<const T*>(b), count);
    });
  });
}

void CpuReducer::reduce2(void* dst, void* dst2, const void* a, const void* b, size_t count,
                         DType dtype, RedOp op) {
  reduce(dst, a, b, count, dtype, op);
  if (dst2 != nullptr) copy(dst2, dst, count * elementSize(dtype));
}

void CpuReducer::divide(void* buf, size_t count, DType dtype, int divisor) {
  dispatchDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(buf);
    for (size_t i = 0; i < count; ++i) p[i] = divideBy(p[i], divisor);
  });
}

void CpuReducer::multiply(void* buf, size_t count, DType dtype, double factor) {
  dispatchDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(buf);
    for (size_t i = 0; i < count; ++i) p[i] = multiplyBy(p[i], factor);
  });
}

void CpuReducer::copy(void* dst, const void* src, size_t bytes) {
  if (bytes != 0 && dst != src) std::memcpy(dst, src, bytes);
}

}  // namespace ringcoll
