// The reduction kernels. One grid-stride kernel per (dtype, op): a scalar head,
// 16-byte packs, a scalar tail (the split is vectorSplit(), shared with the CPU
// reducer). Every element op is the shared functor, so float16/bfloat16/float8
// widen to float for the op and round to nearest even once.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <new>

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

// The stop word (CudaReducer's contract): read once per block, by one thread, from
// host-mapped memory or its latched device copy; every kernel returns without
// touching memory when it is set.
__device__ __forceinline__ bool stopped(const volatile int* stop) {
  __shared__ int skip;
  if (threadIdx.x == 0) skip = stop != nullptr ? *stop : 0;
  __syncthreads();
  return skip != 0;
}

template <typename T, typename Op>
__global__ void reduceKernel(T* dst, const T* a, const T* b, size_t count, VecSplit s,
                             const volatile int* stop) {
  if (stopped(stop)) return;
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

// Up to kMaxFold sources, passed by value (kernel parameter space).
struct FoldSources {
  const void* p[kMaxFold];
};

// dst = op(...op(dst, s0)..., s(k-1)) per element, the accumulator rounded to T after
// every op as k reduceKernel launches would round it: the same bits, one launch.
template <typename T, typename Op>
__global__ void reduceManyKernel(T* dst, FoldSources src, int k, size_t count, VecSplit s,
                                 const volatile int* stop) {
  if (stopped(stop)) return;
  const size_t tid = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  auto scalar = [&](size_t i) {
    T acc = dst[i];
    for (int j = 0; j < k; ++j) acc = applyOp<T, Op>(acc, static_cast<const T*>(src.p[j])[i]);
    dst[i] = acc;
  };
  for (size_t i = tid; i < s.head; i += stride) scalar(i);
  uint4* dp = reinterpret_cast<uint4*>(dst + s.head);
  for (size_t q = tid; q < s.packs; q += stride) {
    const uint4 dv = dp[q];
    Pack16 acc;
    memcpy(acc.bytes, &dv, 16);
    for (int j = 0; j < k; ++j) {
      const uint4 sv = reinterpret_cast<const uint4*>(static_cast<const T*>(src.p[j]) + s.head)[q];
      Pack16 ps;
      memcpy(ps.bytes, &sv, 16);
      reducePack<T, Op>(acc, acc, ps);
    }
    uint4 out;
    memcpy(&out, acc.bytes, 16);
    dp[q] = out;
  }
  for (size_t i = count - s.tail + tid; i < count; i += stride) scalar(i);
}

template <typename T>
__global__ void divideKernel(T* buf, size_t count, int divisor, const volatile int* stop) {
  if (stopped(stop)) return;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += stride) {
    buf[i] = divideBy(buf[i], divisor);
  }
}

template <typename T>
__global__ void multiplyKernel(T* buf, size_t count, double factor, const volatile int* stop) {
  if (stopped(stop)) return;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += stride) {
    buf[i] = multiplyBy(buf[i], factor);
  }
}

// dst = src, bytes: 16-byte packs between a byte head and tail (vectorSplit with
// one-byte elements).
__global__ void copyKernel(char* dst, const char* src, size_t bytes, VecSplit s,
                           const volatile int* stop) {
  if (stopped(stop)) return;
  const size_t tid = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = tid; i < s.head; i += stride) dst[i] = src[i];
  uint4* dp = reinterpret_cast<uint4*>(dst + s.head);
  const uint4* sp = reinterpret_cast<const uint4*>(src + s.head);
  for (size_t k = tid; k < s.packs; k += stride) dp[k] = sp[k];
  for (size_t i = bytes - s.tail + tid; i < bytes; i += stride) dst[i] = src[i];
}

// The fingerprint check (engine/fingerprint.h) on the device: one block of
// kHeaderBytes threads compares the received header with the expected one; on a
// difference the first such kernel records both and the peer in the control
// block, then sets the stop word.
__global__ void checkHeaderKernel(const uint8_t* got, HeaderBytes want, int peer,
                                  DeviceControl* ctl, int* latched) {
  if (stopped(&ctl->stop)) return;
  const int i = threadIdx.x;
  const bool differs = __syncthreads_or(got[i] != want.b[i]);
  if (!differs) return;
  // Check kernels run one after another on the reducer's one stream: no race for
  // the record, and no atomics on host-mapped memory.
  if (ctl->mismatchPeer != -1) return;
  __syncthreads();
  if (i == 0) ctl->mismatchPeer = peer;
  ctl->want[i] = want.b[i];
  ctl->got[i] = got[i];
  __threadfence_system();
  __syncthreads();
  if (i == 0) {
    *latched = 1;  // the large kernels behind this one read the device copy
    ctl->stop = 1;
    __threadfence_system();
  }
}

// The device copy of the stop word, refreshed in stream order. Sticky: once set it
// stays set, as the host word does.
__global__ void latchStopKernel(const volatile int* host, int* latched) {
  if (*host != 0) *latched = 1;
}

__global__ void writeHeaderKernel(uint8_t* dst, HeaderBytes bytes) {
  dst[threadIdx.x] = bytes.b[threadIdx.x];
}

}  // namespace

cudaError_t launchReduce(void* dst, const void* a, const void* b, size_t count, DType dtype,
                         RedOp op, cudaStream_t stream, const volatile int* stop) {
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
          static_cast<T*>(dst), static_cast<const T*>(a), static_cast<const T*>(b), count, s,
          stop);
      return cudaGetLastError();
    });
  });
}

cudaError_t launchReduceMany(void* dst, const void* const* srcs, size_t k, size_t count,
                             DType dtype, RedOp op, cudaStream_t stream,
                             const volatile int* stop) {
  if (count == 0 || k == 0) return cudaSuccess;
  if (k > kMaxFold || !opSupported(op, dtype)) return cudaErrorInvalidValue;
  return dispatchDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    const uintptr_t d = reinterpret_cast<uintptr_t>(dst);
    FoldSources src{};
    for (size_t j = 0; j < k; ++j) {
      // One split for all: every source at dst's offset from a 16-byte boundary.
      if (reinterpret_cast<uintptr_t>(srcs[j]) % 16 != d % 16) return cudaErrorInvalidValue;
      src.p[j] = srcs[j];
    }
    const VecSplit s = vectorSplit(d, d, d, count, sizeof(T));
    return dispatchOp(op, [&](auto opTag) {
      using Op = decltype(opTag);
      const size_t work = std::max(s.packs, s.head + s.tail);
      reduceManyKernel<T, Op><<<blocksFor(work), kThreads, 0, stream>>>(
          static_cast<T*>(dst), src, static_cast<int>(k), count, s, stop);
      return cudaGetLastError();
    });
  });
}

cudaError_t launchDivide(void* buf, size_t count, DType dtype, int divisor,
                         cudaStream_t stream, const volatile int* stop) {
  if (count == 0) return cudaSuccess;
  return dispatchDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    divideKernel<T><<<blocksFor(count), kThreads, 0, stream>>>(static_cast<T*>(buf), count,
                                                              divisor, stop);
    return cudaGetLastError();
  });
}

cudaError_t launchMultiply(void* buf, size_t count, DType dtype, double factor,
                           cudaStream_t stream, const volatile int* stop) {
  if (count == 0) return cudaSuccess;
  return dispatchDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    multiplyKernel<T><<<blocksFor(count), kThreads, 0, stream>>>(static_cast<T*>(buf), count,
                                                                factor, stop);
    return cudaGetLastError();
  });
}

CudaReducer::CudaReducer(cudaStream_t stream, size_t headerSlots, size_t latchBytes,
                         DeviceAllocator scratch)
    : StreamOrderedReducer(latchBytes),
      stream_(stream),
      scratch_(std::move(scratch)),
      headerSlots_(headerSlots) {
  // Host-mapped: the host sets `stop` with a plain store, with no CUDA call that
  // could queue behind a stuck kernel, and reads a device-detected mismatch without
  // synchronising.
  void* host = nullptr;
  RC_CUDA_CHECK(cudaHostAlloc(&host, sizeof(DeviceControl), cudaHostAllocMapped));
  control_ = new (host) DeviceControl();
  void* dev = nullptr;
  RC_CUDA_CHECK(cudaHostGetDevicePointer(&dev, host, 0));
  deviceControl_ = static_cast<DeviceControl*>(dev);
  RC_CUDA_CHECK(cudaMalloc(&headers_, headerSlots_ * kHeaderBytes));
  RC_CUDA_CHECK(cudaMalloc(&latched_, sizeof(int)));
  // Stream-ordered before every kernel of this reducer.
  RC_CUDA_CHECK(cudaMemsetAsync(latched_, 0, sizeof(int), stream_));
}

const volatile int* CudaReducer::stopWord(size_t bytes) {
  switch (stopRead(bytes)) {
    case StopRead::kHost:
      return &deviceControl_->stop;
    case StopRead::kLatchFirst:
      countKernels(StreamStats::Kernel::kLatch);
      latchStopKernel<<<1, 1, 0, stream_>>>(&deviceControl_->stop, latched_);
      RC_CUDA_CHECK(cudaGetLastError());
      [[fallthrough]];
    case StopRead::kLatched:
      break;
  }
  return latched_;
}

std::shared_ptr<void> CudaReducer::allocate(size_t bytes) {
  void* p = scratch_.alloc(bytes ? bytes : 1);
  RC_ASSERT(p != nullptr, "no scratch buffer of ", bytes, " bytes");
  return std::shared_ptr<void>(p, [free = scratch_.free](void* q) { free(q); });
}

CudaReducer::~CudaReducer() {
  // No throw in a destructor; cudaFree waits for the kernels that use the buffer.
  if (headers_) cudaFree(headers_);
  if (latched_) cudaFree(latched_);
  if (control_) cudaFreeHost(control_);
}

void CudaReducer::stopKernels() {
  control_->stop = 1;
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

int CudaReducer::mismatchPeer() const {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return control_->stop ? control_->mismatchPeer : -1;
}

void CudaReducer::mismatchBytes(uint8_t* want, uint8_t* got) const {
  for (size_t i = 0; i < kHeaderBytes; ++i) {
    want[i] = control_->want[i];
    got[i] = control_->got[i];
  }
}

void* CudaReducer::headerSlot(size_t slot) {
  RC_ASSERT(slot < headerSlots_, "header slot ", slot, " of ", headerSlots_);
  return static_cast<char*>(headers_) + slot * kHeaderBytes;
}

void CudaReducer::writeHeader(void* dst, const void* bytes, size_t n) {
  RC_ASSERT(n == kHeaderBytes, "a header of ", n, " bytes");
  HeaderBytes h;
  std::memcpy(h.b, bytes, kHeaderBytes);
  StreamStats::Timer t(stats(), StreamStats::kKernel);
  countKernels(StreamStats::Kernel::kHeader);
  writeHeaderKernel<<<1, kHeaderBytes, 0, stream_>>>(static_cast<uint8_t*>(dst), h);
  RC_CUDA_CHECK(cudaGetLastError());
}

void CudaReducer::checkHeader(const void* got, const void* want, size_t n, int peer) {
  RC_ASSERT(n == kHeaderBytes, "a header of ", n, " bytes");
  HeaderBytes h;
  std::memcpy(h.b, want, kHeaderBytes);
  StreamStats::Timer t(stats(), StreamStats::kKernel);
  countKernels(StreamStats::Kernel::kHeader);
  checkHeaderKernel<<<1, kHeaderBytes, 0, stream_>>>(static_cast<const uint8_t*>(got), h, peer,
                                                     deviceControl_, latched_);
  RC_CUDA_CHECK(cudaGetLastError());
}

void CudaReducer::reduce(void* dst, const void* a, const void* b, size_t count, DType dtype,
                         RedOp op) {
  if (count == 0) return;
  StreamStats::Timer t(stats(), StreamStats::kKernel);
  countKernels(StreamStats::Kernel::kReduce);
  RC_CUDA_CHECK(
      launchReduce(dst, a, b, count, dtype, op, stream_, stopWord(count * elementSize(dtype))));
}

void CudaReducer::reduceMany(void* dst, const void* const* srcs, size_t k, size_t count,
                             DType dtype, RedOp op) {
  if (count == 0 || k == 0) return;
  const uintptr_t off = reinterpret_cast<uintptr_t>(dst) % 16;
  bool aligned = true;
  for (size_t j = 0; j < k; ++j) aligned = aligned && reinterpret_cast<uintptr_t>(srcs[j]) % 16 == off;
  if (!aligned) {  // one split must serve every source: fold them one at a time
    Reducer::reduceMany(dst, srcs, k, count, dtype, op);
    return;
  }
  for (size_t j = 0; j < k; j += kMaxFold) {
    StreamStats::Timer t(stats(), StreamStats::kKernel);
    countKernels(StreamStats::Kernel::kReduce);
    RC_CUDA_CHECK(launchReduceMany(dst, srcs + j, std::min(kMaxFold, k - j), count, dtype, op,
                                   stream_, stopWord(count * elementSize(dtype))));
  }
}

void CudaReducer::reduce2(void* dst, void* dst2, const void* a, const void* b, size_t count,
                          DType dtype, RedOp op) {
  reduce(dst, a, b, count, dtype, op);
  if (dst2 != nullptr) copy(dst2, dst, count * elementSize(dtype), false);
}

void CudaReducer::divide(void* buf, size_t count, DType dtype, int divisor) {
  if (count == 0) return;
  StreamStats::Timer t(stats(), StreamStats::kKernel);
  countKernels(StreamStats::Kernel::kScale);
  RC_CUDA_CHECK(
      launchDivide(buf, count, dtype, divisor, stream_, stopWord(count * elementSize(dtype))));
}

void CudaReducer::multiply(void* buf, size_t count, DType dtype, double factor) {
  if (count == 0) return;
  StreamStats::Timer t(stats(), StreamStats::kKernel);
  countKernels(StreamStats::Kernel::kScale);
  RC_CUDA_CHECK(
      launchMultiply(buf, count, dtype, factor, stream_, stopWord(count * elementSize(dtype))));
}

void CudaReducer::copy(void* dst, const void* src, size_t bytes, bool) {
  if (bytes == 0 || dst == src) return;
  // A kernel, not cudaMemcpyAsync: it must honour the stop word too.
  const VecSplit s = vectorSplit(reinterpret_cast<uintptr_t>(dst),
                                 reinterpret_cast<uintptr_t>(src),
                                 reinterpret_cast<uintptr_t>(src), bytes, 1);
  StreamStats::Timer t(stats(), StreamStats::kKernel);
  countKernels(StreamStats::Kernel::kCopy);
  // Before the launch statement: stopWord may launch the latch kernel.
  const volatile int* stop = stopWord(bytes);
  copyKernel<<<blocksFor(std::max(s.packs, s.head + s.tail)), kThreads, 0, stream_>>>(
      static_cast<char*>(dst), static_cast<const char*>(src), bytes, s, stop);
  RC_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ringcoll
