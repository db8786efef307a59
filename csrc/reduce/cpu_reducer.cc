// CPU loops over the shared functors. Plain loops the compiler vectorises for
// float/int; the 16-bit float types go through Elem<T>'s float widening. SUM on
// float32/bfloat16/float16 goes to the SIMD kernels of the reducer's level
// (cpu_simd.h), which give the same bits at memory speed.
#include <unistd.h>

#include <cstring>

#include "common/errors.h"
#include "reduce/dispatch.h"
#include "reduce/reducer.h"
#include "reduce/vector.h"

namespace ringcoll {

namespace {
// The same head / 16-byte packs / tail walk as the CUDA kernel (reduce/vector.h),
// so the pack code path is exercised by CPU tests. With dst2 (kTwo) every value is
// computed once and stored twice; the pack is reduced into a local first because
// dst may alias a.
template <typename T, typename Op, bool kTwo>
void reduceLoop(T* dst, T* dst2, const T* a, const T* b, size_t count) {
  const VecSplit s = vectorSplit(reinterpret_cast<uintptr_t>(dst),
                                 reinterpret_cast<uintptr_t>(a),
                                 reinterpret_cast<uintptr_t>(b), count, sizeof(T));
  auto scalar = [&](size_t i) {
    const T v = applyOp<T, Op>(a[i], b[i]);
    dst[i] = v;
    if constexpr (kTwo) dst2[i] = v;
  };
  for (size_t i = 0; i < s.head; ++i) scalar(i);
  auto* dp = reinterpret_cast<Pack16*>(dst + s.head);
  const auto* ap = reinterpret_cast<const Pack16*>(a + s.head);
  const auto* bp = reinterpret_cast<const Pack16*>(b + s.head);
  for (size_t k = 0; k < s.packs; ++k) {
    if constexpr (kTwo) {
      Pack16 v;
      reducePack<T, Op>(v, ap[k], bp[k]);
      dp[k] = v;
      // dst2 need not share dst's alignment: memcpy, not a Pack16 store.
      std::memcpy(reinterpret_cast<char*>(dst2 + s.head) + 16 * k, v.bytes, 16);
    } else {
      reducePack<T, Op>(dp[k], ap[k], bp[k]);
    }
  }
  for (size_t i = count - s.tail; i < count; ++i) scalar(i);
}
}  // namespace

CpuReducer::CpuReducer(SimdLevel level) : level_(level) {
  RC_ASSERT(simdLevelAvailable(level), "SIMD level ", simdLevelName(level),
            " is not available on this CPU or build");
}

void CpuReducer::reduce(void* dst, const void* a, const void* b, size_t count,
                        DType dtype, RedOp op) {
  reduce2(dst, nullptr, a, b, count, dtype, op);
}

void CpuReducer::reduce2(void* dst, void* dst2, const void* a, const void* b, size_t count,
                         DType dtype, RedOp op) {
  if (count == 0) return;
  if (op == RedOp::kSum) {
    if (const SimdSumFn sum = simdSum(level_, dtype)) {
      sum(dst, dst2, a, b, count);
      return;
    }
  }
  dispatchDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    dispatchOp(op, [&](auto opTag) {
      using Op = decltype(opTag);
      T* d = static_cast<T*>(dst);
      const T* pa = static_cast<const T*>(a);
      const T* pb = static_cast<const T*>(b);
      if (dst2 == nullptr) {
        reduceLoop<T, Op, false>(d, nullptr, pa, pb, count);
      } else {
        reduceLoop<T, Op, true>(d, static_cast<T*>(dst2), pa, pb, count);
      }
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

void CpuReducer::copy(void* dst, const void* src, size_t bytes, bool streaming) {
  if (bytes == 0 || dst == src) return;
  if (streaming) {
    if (const SimdCopyFn stream = simdStreamCopy(level_)) {
      stream(dst, src, bytes);
      return;
    }
  }
  std::memcpy(dst, src, bytes);
}

// A p = 2 all-reduce of 64 MiB moved 2.5x its size through memory per rank with
// cached stores (each destination line read before it is written) against 2x with
// streaming ones, 10-20% of its time on this machine's 32 MiB L3; below half the
// cache the destination is still cached when the caller reads it, and streaming
// would only evict it.
size_t CpuReducer::streamingBytes() const {
  static const size_t bytes = [] {
    long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (llc <= 0) llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return static_cast<size_t>(llc > 0 ? llc : (32L << 20)) / 2;
  }();
  return bytes;
}

}  // namespace ringcoll
