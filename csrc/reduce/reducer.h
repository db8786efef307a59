// The reducer interface the executor calls: element arithmetic on raw memory of
// one device, nothing else. Implementations: CpuReducer (here) and CudaReducer
// (reduce/cuda_reducer.h, enqueues kernels on the comm stream).
//
// Contract for every method: pointers are to `count` elements of `dtype`, aligned
// to the element size; dst may alias a or b entirely (an in-place reduction, in
// either operand order: schedules/schedule.h's kRecvReduceFirst folds incoming OP
// buffer) but must not partially overlap them: every element's operands are read
// before its result is written. The (dtype, op) pair has passed opSupported().
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>

#include "common/stream_stats.h"
#include "reduce/cpu_simd.h"
#include "reduce/types.h"

namespace ringcoll {

class Reducer {
 public:
  virtual ~Reducer() = default;
  // dst[i] = op(a[i], b[i]).
  virtual void reduce(void* dst, const void* a, const void* b, size_t count,
                      DType dtype, RedOp op) = 0;
  // dst[i] = op(a[i], b[i]) and, when dst2 != nullptr, also dst2[i] (the executor's
  // receive-reduce-forward: the result goes in place and into the outgoing
  // message). dst may alias a or b; dst2 aliases nothing.
  virtual void reduce2(void* dst, void* dst2, const void* a, const void* b, size_t count,
                       DType dtype, RedOp op) = 0;
  // dst[i] = op(...op(op(dst[i], srcs[0][i]), srcs[1][i])..., srcs[k-1][i]): the k
  // sources folded into dst in order, each element bit for bit what k reduce()
  // calls in that order give (the executor's fused consume: one kernel for a
  // one-shot's p-1 inputs). No source aliases dst or overlaps it.
  virtual void reduceMany(void* dst, const void* const* srcs, size_t k, size_t count,
                          DType dtype, RedOp op) {
    for (size_t i = 0; i < k; ++i) reduce(dst, dst, srcs[i], count, dtype, op);
  }
  // buf[i] = buf[i] / divisor (AVG's final step).
  virtual void divide(void* buf, size_t count, DType dtype, int divisor) = 0;
  // buf[i] = buf[i] * factor (PREMUL_SUM's first step).
  virtual void multiply(void* buf, size_t count, DType dtype, double factor) = 0;
  // dst = src, bytes of memory on this reducer's device. `streaming`: dst belongs
  // to a buffer too large for the caches and is not read again soon; the CPU
  // reducer then writes it past the caches (no read-for-ownership of each line).
  virtual void copy(void* dst, const void* src, size_t bytes, bool streaming) = 0;
  // Buffers larger than this are streamed (copy's `streaming`): half the CPU's
  // last-level cache; never on devices where it does not matter.
  virtual size_t streamingBytes() const = 0;

  // The fingerprint check on a device (stream-ordered transports; the CPU path
  // compares headers on the host, engine/executor.h). headerSlot: a 64-byte buffer
  // in device memory (slot 0 is this rank's header, 1 + r receives rank r's,
  // 1 + p + r is this rank's to rank r when they differ per peer); write-
  // Header: bytes (host memory, copied at the call) to a slot, in stream order;
  // checkHeader: in stream order, compare a received header with `want` (host
  // memory, copied at the call) and, when they differ, stop every later kernel and
  // record both (reduce/cuda_reducer.h). The CPU reducer has none of these.
  virtual void* headerSlot(size_t) { return nullptr; }
  // `bytes` of memory on this reducer's device, 64-byte aligned, for a job's
  // scratch (schedules/schedule.h), freed when the last holder lets go (after the
  // job's end); null where the device has none to give (engine/collectives.h then
  // refuses an algorithm that needs it).
  virtual std::shared_ptr<void> allocate(size_t) { return nullptr; }
  virtual void writeHeader(void*, const void*, size_t) {}
  virtual void checkHeader(const void*, const void*, size_t, int) {}
};

// A reducer whose work runs later on a stream (CudaReducer, and StreamReducer, its
// CPU emulation): besides the arithmetic, the stop word every operation reads
// before it touches memory, and the device fingerprint check's result
// (reduce/cuda_reducer.h).
//
// Where the stop word is read. A small operation (one writing at most
// RINGCOLL_STOP_LATCH_BYTES, common/knobs.h) reads the host's word itself, so it skips
// if the word was set before it started. A larger one has many blocks, and host-
// mapped reads by each of them cost far more than the arithmetic, so it reads a
// device-side copy of the word instead, which a one-thread operation refreshes
// (latches) before it whenever the stream has waited for transfers since the last
// refresh (transfersJoined). The contract both give: an operation enqueued behind a
// transfer that failed or was aborted, or behind a fingerprint check that found a
// mismatch, touches no memory, because the host sets the word before it aborts the
// transfers, and the check sets both words. What the latched copy does not give:
// a large operation already past its latch when the host sets the word may still
// run (it is not behind anything that failed).
class StreamOrderedReducer : public Reducer {
 public:
  // `latchBytes`: RINGCOLL_STOP_LATCH_BYTES.
  explicit StreamOrderedReducer(size_t latchBytes) : latchBytes_(latchBytes) {}
  // Host side of the stop word: set it (no device call; small operations that
  // start after this returns skip, and large ones whose latch runs after it), and
  // read it.
  virtual void stopKernels() = 0;
  virtual bool kernelsStopped() const = 0;
  // The compute stream was just made to wait for transfers (stream_transport.h's
  // join hook): the next large operation refreshes the device copy of the word
  // first. Called on the enqueuing thread, as every operation is.
  void transfersJoined() { stale_ = true; }
  // The peer whose header differed (-1: none yet), and both 64-byte headers.
  virtual int mismatchPeer() const = 0;
  virtual void mismatchBytes(uint8_t* want, uint8_t* got) const = 0;
  // Where operations are counted and timed (StreamStats::kKernels, kKernel); may
  // stay null. Set once, before the first operation.
  void setStats(StreamStats* stats) { stats_ = stats; }

 protected:
  StreamStats* stats() const { return stats_; }
  void countKernels(StreamStats::Kernel kind, uint64_t k = 1) {
    if (!stats_) return;
    stats_->add(StreamStats::kKernels, k);
    stats_->add(static_cast<StreamStats::Count>(StreamStats::kKernelsReduce +
                                                static_cast<int>(kind)), k);
  }
  // Which word an operation writing `bytes` reads, the policy above, for both
  // implementations: the host's; the latched copy; or the latched copy after a
  // refresh that the implementation enqueues first.
  enum class StopRead { kHost, kLatched, kLatchFirst };
  StopRead stopRead(size_t bytes) {
    if (bytes <= latchBytes_) return StopRead::kHost;
    if (!stale_) return StopRead::kLatched;
    stale_ = false;
    return StopRead::kLatchFirst;
  }

 private:
  const size_t latchBytes_;
  bool stale_ = true;  // a transfer wait since the last refresh (or none yet)
  StreamStats* stats_ = nullptr;
};

// SUM on float32, bfloat16 and float16 runs the SIMD kernels of the reducer's
// level (cpu_simd.h; bit-identical to the functors), everything else the functor
// loops. The level is the widest this CPU runs unless a test names one.
class CpuReducer final : public Reducer {
 public:
  CpuReducer() : level_(bestSimdLevel()) {}
  // `level` must be available (simdLevelAvailable); kScalar forces the functors.
  explicit CpuReducer(SimdLevel level);
  SimdLevel level() const { return level_; }
  void reduce(void* dst, const void* a, const void* b, size_t count, DType dtype,
              RedOp op) override;
  void reduce2(void* dst, void* dst2, const void* a, const void* b, size_t count,
               DType dtype, RedOp op) override;
  void divide(void* buf, size_t count, DType dtype, int divisor) override;
  void multiply(void* buf, size_t count, DType dtype, double factor) override;
  void copy(void* dst, const void* src, size_t bytes, bool streaming) override;
  size_t streamingBytes() const override;
  std::shared_ptr<void> allocate(size_t bytes) override {
    constexpr std::align_val_t kAlign{64};
    return std::shared_ptr<void>(::operator new(bytes ? bytes : 1, kAlign),
                                 [](void* q) { ::operator delete(q, kAlign); });
  }

 private:
  SimdLevel level_;
};

}  // namespace ringcoll
