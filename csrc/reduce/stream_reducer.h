// StreamReducer: the CUDA reducer's contract (reduce/cuda_reducer.h) on the CPU,
// for the emulation of the GPU path (RINGCOLL_TRANSPORT=stream). Every operation
// is enqueued on the compute stream (common/cpu_stream.h) and runs there later, in
// order, with the CPU reducer's loops; nothing runs at the call. Like the CUDA
// reducer it has
//   * a stop word, read by every operation before it touches memory: the backend
//     sets it when a collective failed, so reductions queued behind transfers that
//     never came do not write stale staging bytes into a user's tensor. As on the
//     device, an operation over more than latchBytes reads a copy latched in
//     stream order after each transfer wait (reducer.h), so CI runs the ordering
//     that the CUDA reducer's latched word relies on;
//   * fingerprint headers in its own memory (slot 0 this rank's, 1 + r rank r's),
//     written and compared in stream order: checkHeader compares the 64 received
//     bytes with the expected ones (engine/fingerprint.h's one rule) and, on a
//     difference, records both and the peer, then sets the stop word.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "common/cpu_stream.h"
#include "reduce/reducer.h"

namespace ringcoll {

class StreamReducer final : public StreamOrderedReducer {
 public:
  static constexpr size_t kHeaderBytes = 64;

  // `latchBytes`: RINGCOLL_STOP_LATCH_BYTES (common/knobs.h).
  StreamReducer(CpuStream& stream, size_t headerSlots, size_t latchBytes);

  CpuStream& stream() { return stream_; }

  void reduce(void* dst, const void* a, const void* b, size_t count, DType dtype,
              RedOp op) override;
  void reduce2(void* dst, void* dst2, const void* a, const void* b, size_t count,
               DType dtype, RedOp op) override;
  void reduceMany(void* dst, const void* const* srcs, size_t k, size_t count, DType dtype,
                  RedOp op) override;
  void divide(void* buf, size_t count, DType dtype, int divisor) override;
  void multiply(void* buf, size_t count, DType dtype, double factor) override;
  void copy(void* dst, const void* src, size_t bytes, bool streaming) override;
  size_t streamingBytes() const override { return cpu_.streamingBytes(); }
  std::shared_ptr<void> allocate(size_t bytes) override { return cpu_.allocate(bytes); }

  void* headerSlot(size_t slot) override;
  void writeHeader(void* dst, const void* bytes, size_t n) override;
  void checkHeader(const void* got, const void* want, size_t n, int peer) override;

  // StreamOrderedReducer's, as CudaReducer's.
  void stopKernels() override { stop_.store(true, std::memory_order_release); }
  bool kernelsStopped() const override { return stop_.load(std::memory_order_acquire); }
  int mismatchPeer() const override { return mismatchPeer_.load(std::memory_order_acquire); }
  void mismatchBytes(uint8_t* want, uint8_t* got) const override;

 private:
  // Runs `fn`, which writes `bytes`, on the stream unless the stop word it reads
  // (the host's, or the latched copy: reducer.h) is set by then.
  template <typename Fn>
  void enqueue(StreamStats::Kernel kind, size_t bytes, Fn fn) {
    countKernels(kind);
    switch (stopRead(bytes)) {
      case StopRead::kHost:
        stream_.enqueue([this, fn] {
          if (!kernelsStopped()) fn();
        });
        return;
      case StopRead::kLatchFirst:
        countKernels(StreamStats::Kernel::kLatch);
        stream_.enqueue([this] {
          if (kernelsStopped()) latched_.store(true, std::memory_order_release);
        });
        [[fallthrough]];
      case StopRead::kLatched:
        break;
    }
    stream_.enqueue([this, fn] {
      if (!latched_.load(std::memory_order_acquire)) fn();
    });
  }

  CpuStream& stream_;
  CpuReducer cpu_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> latched_{false};  // the stream's copy of stop_ (sticky)
  std::atomic<int> mismatchPeer_{-1};
  uint8_t want_[kHeaderBytes] = {};
  uint8_t got_[kHeaderBytes] = {};
  std::vector<uint8_t> headers_;  // headerSlots x kHeaderBytes
};

}  // namespace ringcoll
