// CPU loops over the shared functors. Plain loops the compiler vectorises for
// float/int; the 16-bit float types go through Elem<T>'s float widening.
#include <cstring>

#include "reduce/dispatch.h"
#include "reduce/reducer.h"

namespace ringcoll {

namespace {
template <typename T, typename Op>
void reduceLoop(T* dst, const T* a, const T* b, size_t count) {
  for (size_t i = 0; i < count; ++i) dst[i] = applyOp<T, Op>(a[i], b[i]);
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
