// What a stream path (backend/stream_path.h) enqueues, counted, and where its host
// time goes, so that "what does one small collective cost, and where" is a number
// on the emulation in CI and on a GPU, not a guess (docs/GPU.md, "Where a small
// call's time goes"; benchmarks/stream_host_cost.py and gpu_host_cost.py print it).
//
// Counts are always kept (one relaxed atomic add each). Host time per part is kept
// only while `timing` is on (RingcollBackend.stream_stats(timing=True)): a clock
// read costs about 20 ns, and a small CUDA collective makes some twenty of them.
//
// Parts of the host time, exclusive of each other except `launch`, which is the
// whole of StreamPath::launch (the rest of launch is the body's torch calls, the
// schedule and plan lookup, the executor's own logic and the Work):
//   ready    the comm stream made to wait for the caller's stream
//   batch    enqueuing batches (NCCL: ncclGroupStart ... ncclGroupEnd)
//   marker   markers recorded and stream waits (CUDA events)
//   kernel   reducer operations enqueued (kernel launches)
//   end      the job's end: protecting the tensors, its end marker, the future
// Written by the enqueuing thread only (one launch at a time); read by any.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>

namespace ringcoll {

struct StreamStats {
  enum Count : int {
    kCollectives,       // jobs launched
    kBatches,           // batches enqueued (NCCL groups: waves)
    kBatchesOnCompute,  // ... of them enqueued on the compute stream (nothing to overlap)
    kPosts,             // sends and receives in those batches
    kKernels,           // reducer operations (reduce, copy, divide, multiply, latch, header)
    kMarkers,           // markers recorded (CUDA events), the job's end included
    kStreamWaits,       // one stream made to wait for a marker of another
    kHostWaits,         // the enqueuing thread waited for the device (in-flight bound)
    // kKernels by kind: what a call's device work is made of, against the schedule's
    // least (benchmarks/stream_counts.py)
    kKernelsReduce,     // reductions (a wave's received bytes folded in)
    kKernelsCopy,       // copies (staging, a one-shot's input, a non-contiguous tensor)
    kKernelsScale,      // divisions and multiplications (AVG, PREMUL_SUM)
    kKernelsLatch,      // the stop word's device copy refreshed (reducer.h)
    kKernelsHeader,     // fingerprint headers written and checked
    kNumCounts
  };
  enum class Kernel : int { kReduce, kCopy, kScale, kLatch, kHeader };
  enum Part : int { kLaunch, kReady, kBatch, kMarker, kKernel, kEnd, kNumParts };
  static constexpr const char* kCountNames[kNumCounts] = {
      "collectives", "batches", "batches_on_compute", "posts",
      "kernels",     "markers", "stream_waits",       "host_waits",
      "kernels_reduce", "kernels_copy", "kernels_scale", "kernels_latch", "kernels_header"};
  static constexpr const char* kPartNames[kNumParts] = {"launch", "ready", "batch",
                                                         "marker", "kernel", "end"};

  void add(Count c, uint64_t k = 1) { counts[c].fetch_add(k, std::memory_order_relaxed); }
  uint64_t count(Count c) const { return counts[c].load(std::memory_order_relaxed); }
  uint64_t nanos(Part p) const { return ns[p].load(std::memory_order_relaxed); }
  void reset() {
    for (auto& c : counts) c.store(0, std::memory_order_relaxed);
    for (auto& t : ns) t.store(0, std::memory_order_relaxed);
  }

  // Adds the time from its construction to its destruction to `part`, when timing.
  class Timer {
   public:
    Timer(StreamStats* s, Part part) : s_(s && s->timing.load(std::memory_order_relaxed) ? s : nullptr), part_(part) {
      if (s_) t0_ = std::chrono::steady_clock::now();
    }
    ~Timer() {
      if (!s_) return;
      const auto d = std::chrono::steady_clock::now() - t0_;
      s_->ns[part_].fetch_add(
          static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count()),
          std::memory_order_relaxed);
    }
    Timer(const Timer&) = delete;
    Timer& operator=(const Timer&) = delete;

   private:
    StreamStats* s_;
    Part part_;
    std::chrono::steady_clock::time_point t0_;
  };

  std::atomic<bool> timing{false};
  std::array<std::atomic<uint64_t>, kNumCounts> counts{};
  std::array<std::atomic<uint64_t>, kNumParts> ns{};
};

}  // namespace ringcoll
