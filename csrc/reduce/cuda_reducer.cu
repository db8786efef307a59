// The reduction kernels. One grid-stride kernel per (dtype, op): a scalar head,
// 16-byte packs, a scalar tail (the split is vectorSplit(), shared with the CPU
// reducer). Every element op is the shared functor, so float16/bfloat16/float8
// widen to float for the op and round to nearest even once.
#include <algorithm>

#include "common/cuda_check.h"
#include "reduce/cuda_reducer.h"
#include "reduce/dispatch.h"
#include "reduce/vector.h"

namespace ringcoll {

namespace {

constexpr int kThreads = 512;
constexpr size_t kMaxBlocks = 4096;

unsigned blocksFor(size_t work) {
  const size_t b = (work + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<size_t>(1, std::min(b, kMaxBlocks)));
}

template <typename T, typename Op>
__global__ void reduceKernel(T* dst, const T* a, const T* b, size_t count, VecSplit s) {
  const size_t tid = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = tid; i < s.head; i += stride) dst[i] = applyOp<T, Op>(a[i], b[i]);
  // 16-byte loads and stores through uint4, the widest global access.
  uint4* dp = reinterpret_cast<uint4*>(dst + s.head);
  const uint4* ap = reinterpret_cast<const uint4*>(a + s.head);
  const uint4* bp = reinterpret_cast<const uint4*>(b + s.head);
  for (size_t k = tid; k < s.packs; k += stride) {
    const uint4 av = ap[k];
    const uint4 bv = bp[k];
    Pack16 pa, pb, pd;
    memcpy(pa.bytes, &av, 16);
    memcpy(pb.bytes, &bv, 16);
    reducePack<T, Op>(pd, pa, pb);
    uint4 dv;
    memcpy(&dv, pd.bytes, 16);
    dp[k] = dv;
  }
  const size_t t0 = count - s.tail;
  for (size_t i = t0 + tid; i < count; i += stride) dst[i] = applyOp<T, Op>(a[i], b[i]);
}

template <typename T>
__global__ void divideKernel(T* buf, size_t count, int divisor) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += stride) {
    buf[i] = divideBy(buf[i], divisor);
  }
}

template <typename T>
__global__ void multiplyKernel(T* buf, size_t count, double factor) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += stride) {
    buf[i] = multiplyBy(buf[i], factor);
  }
}

}  // namespace

cudaError_t launchReduce(void* dst, const void* a, const void* b, size_t count, DType dtype,
                         RedOp op, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (!opSupported(op, dtype)) return cudaErrorInvalidValue;
  return dispatchDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    return dispatchOp(op, [&](auto opTag) {
      using Op = decltype(opTag);
      const VecSplit s = vectorSplit(reinterpret_cast<uintptr_t>(dst),
                                     reinterpret_cast<uintptr_t>(a),
                                     reinterpret_cast<uintptr_t>(b), count, sizeof(T));
      const size_t work = std::max(s.packs, s.head + s.tail);
      reduceKernel<T, Op><<<blocksFor(work), kThreads, 0, stream>>>(
          static_cast<T*>(dst), static_cast<const T*>(a), static_cast<const T*>(b), count, s);
      return cudaGetLastError();
    });
  });
}

cudaError_t launchDivide(void* buf, size_t count, DType dtype, int divisor,
                         cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  return dispatchDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    divideKernel<T><<<blocksFor(count), kThreads, 0, stream>>>(static_cast<T*>(buf), count,
                                                              divisor);
    return cudaGetLastError();
  });
}

cudaError_t launchMultiply(void* buf, size_t count, DType dtype, double factor,
                           cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  return dispatchDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    multiplyKernel<T><<<blocksFor(count), kThreads, 0, stream>>>(static_cast<T*>(buf), count,
                                                                factor);
    return cudaGetLastError();
  });
}

void CudaReducer::reduce(void* dst, const void* a, const void* b, size_t count, DType dtype,
                         RedOp op) {
  RC_CUDA_CHECK(launchReduce(dst, a, b, count, dtype, op, stream_));
}

void CudaReducer::reduce2(void* dst, void* dst2, const void* a, const void* b, size_t count,
                          DType dtype, RedOp op) {
  reduce(dst, a, b, count, dtype, op);
  if (dst2 != nullptr) copy(dst2, dst, count * elementSize(dtype), false);
}

void CudaReducer::divide(void* buf, size_t count, DType dtype, int divisor) {
  RC_CUDA_CHECK(launchDivide(buf, count, dtype, divisor, stream_));
}

void CudaReducer::multiply(void* buf, size_t count, DType dtype, double factor) {
  RC_CUDA_CHECK(launchMultiply(buf, count, dtype, factor, stream_));
}

void CudaReducer::copy(void* dst, const void* src, size_t bytes, bool) {
  if (bytes == 0 || dst == src) return;
  RC_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
}

}  // namespace ringcoll
