// CUDA reducer: the shared functors (functors.h) in kernels with 16-byte vector
// loads (vector.h), enqueued on one stream. Raw pointers, no torch.
//
// The stop word. Every kernel this reducer enqueues (reduce, copy, divide,
// multiply) first reads a stop word and returns without touching memory when it is
// set: a small kernel the host-mapped word itself, a large one a copy in device
// memory refreshed after each wait for transfers (reducer.h says where and why).
// The backend's watchdog sets it (stopKernels) before it aborts the communicator:
// the abort lets NCCL kernels stuck on a dead or late peer exit, and the reductions queued behind them would otherwise run on staging
// buffers that never received their data and write a wrong result into the user's
// tensor. The device sets it too, when a received fingerprint header differs from
// this rank's (checkHeader): no payload of that collective is then reduced or
// copied, and the host reads both headers from the control block.
//
// The launch* functions return the launch's cudaError_t; CudaReducer turns a
// failure into an exception naming the kernel.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/device_allocator.h"
#include "reduce/reducer.h"
#include "reduce/types.h"

namespace ringcoll {

constexpr size_t kHeaderBytes = 64;  // engine/fingerprint.h's header
struct HeaderBytes {
  uint8_t b[kHeaderBytes];
};

// Host-mapped; written by the device only in checkHeader, by the host only in
// stopKernels.
struct DeviceControl {
  volatile int stop = 0;           // non-zero: every kernel returns at once
  volatile int mismatchPeer = -1;  // the peer whose header differed, first one
  volatile uint8_t want[kHeaderBytes] = {};
  volatile uint8_t got[kHeaderBytes] = {};
};

// `stop`: a stop word in device-visible memory, or null (no check).
cudaError_t launchReduce(void* dst, const void* a, const void* b, size_t count, DType dtype,
                         RedOp op, cudaStream_t stream, const volatile int* stop = nullptr);
// dst = fold of dst and the k sources, in order (Reducer::reduceMany), k <= kMaxFold
// per launch. Every pointer at the same offset from a 16-byte boundary, else
// cudaErrorInvalidValue (CudaReducer then reduces one source at a time).
constexpr size_t kMaxFold = 8;
cudaError_t launchReduceMany(void* dst, const void* const* srcs, size_t k, size_t count,
                             DType dtype, RedOp op, cudaStream_t stream,
                             const volatile int* stop = nullptr);
cudaError_t launchDivide(void* buf, size_t count, DType dtype, int divisor,
                         cudaStream_t stream, const volatile int* stop = nullptr);
cudaError_t launchMultiply(void* buf, size_t count, DType dtype, double factor,
                           cudaStream_t stream, const volatile int* stop = nullptr);

class CudaReducer final : public StreamOrderedReducer {
 public:
  // `headerSlots`: 64-byte device buffers for fingerprint headers: slot 0 for this
  // rank's, 1 + r for rank r's, 1 + p + r for this rank's to rank r when a job's
  // headers differ per peer (2p + 1 in all).
  // `latchBytes`: RINGCOLL_STOP_LATCH_BYTES; kernels writing more read the latched
  // copy of the stop word (reducer.h).
  // `scratch`: where a job's scratch comes from (allocate()).
  CudaReducer(cudaStream_t stream, size_t headerSlots, size_t latchBytes,
              DeviceAllocator scratch);
  ~CudaReducer() override;
  CudaReducer(const CudaReducer&) = delete;
  CudaReducer& operator=(const CudaReducer&) = delete;

  void reduce(void* dst, const void* a, const void* b, size_t count, DType dtype,
              RedOp op) override;
  void reduce2(void* dst, void* dst2, const void* a, const void* b, size_t count,
               DType dtype, RedOp op) override;
  // One kernel per kMaxFold sources when they all sit at dst's offset from a
  // 16-byte boundary; else one reduce kernel per source (Reducer's).
  void reduceMany(void* dst, const void* const* srcs, size_t k, size_t count, DType dtype,
                  RedOp op) override;
  void divide(void* buf, size_t count, DType dtype, int divisor) override;
  void multiply(void* buf, size_t count, DType dtype, double factor) override;
  void copy(void* dst, const void* src, size_t bytes, bool streaming) override;
  // Device copies have no read-for-ownership to avoid: never stream.
  size_t streamingBytes() const override { return static_cast<size_t>(-1); }
  // A job's scratch in device memory, from the scratch allocator (the caching
  // allocator on this reducer's stream: a cudaMallocAsync per call, whose pool gave
  // its memory back at every synchronisation, cost one-shot 70-90 us of host time
  // a call on an H200). Freed when the last holder lets go, which the backend does
  // only once the job's end was reached, so no kernel of the job still uses it.
  std::shared_ptr<void> allocate(size_t bytes) override;

  // Fingerprint headers on the device (Reducer's contract).
  void* headerSlot(size_t slot) override;
  void writeHeader(void* dst, const void* bytes, size_t n) override;
  void checkHeader(const void* got, const void* want, size_t n, int peer) override;

  // StreamOrderedReducer's: the stop word and the check's result live in the
  // host-mapped control block.
  void stopKernels() override;
  bool kernelsStopped() const override { return control_->stop != 0; }
  int mismatchPeer() const override;
  void mismatchBytes(uint8_t* want, uint8_t* got) const override;

 private:
  // The word a kernel writing `bytes` reads: the host-mapped one, or the device
  // copy, latched first (one one-thread kernel) when a transfer wait came since.
  const volatile int* stopWord(size_t bytes);

  cudaStream_t stream_;
  DeviceAllocator scratch_;
  size_t headerSlots_;
  DeviceControl* control_ = nullptr;        // host address
  DeviceControl* deviceControl_ = nullptr;  // the same memory, device address
  void* headers_ = nullptr;                 // kHeaderSlots x kHeaderBytes, device
  int* latched_ = nullptr;                  // the device copy of the stop word
};

}  // namespace ringcoll
