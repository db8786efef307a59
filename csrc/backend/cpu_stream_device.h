// The CPU emulation of a stream device (stream_device.h), for
// RINGCOLL_TRANSPORT=stream: a compute stream and a transfer stream of host
// threads (common/cpu_stream.h), the reducer that runs on the first
// (reduce/stream_reducer.h) and the transport that runs on the second over the
// backend's host transport (transport/cpu_stream_transport.h). CPU tensors run
// through the same stream path (stream_path.h) and executor waves as CUDA tensors
// over NCCL, which is how CI, with no GPU, runs the GPU path's logic.
//
// Differences from CUDA, where a host has no stream: the collective's body (its
// copies into the working buffer) runs on the launching thread once the compute
// stream is idle, which orders it after earlier collectives' reductions as the
// comm stream would (not after their transfers: the executor's join does that);
// Work.wait() blocks the host; the future completes when the end is reached;
// abortTransfers() returns once the compute stream drained (CUDA's returns at once
// and the device runs the queued kernels, which skip, later).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>

#include "backend/stream_device.h"
#include "common/cpu_stream.h"
#include "reduce/stream_reducer.h"
#include "transport/cpu_stream_transport.h"

namespace ringcoll {

class CpuStreamDevice final : public StreamDevice {
 public:
  // `host`: the transport the bytes travel on; it must outlive this device.
  // `maxDelayUs`, `failAfter`: RINGCOLL_STREAM_DELAY_US, RINGCOLL_STREAM_FAIL_AFTER.
  // `latchBytes`: RINGCOLL_STOP_LATCH_BYTES (the reducer's latched stop word).
  // `maxBatches`: the transport's in-flight bound (RINGCOLL_MAX_BATCHES_IN_FLIGHT).
  CpuStreamDevice(Transport& host, size_t chunkBytes, uint32_t maxDelayUs, size_t failAfter,
                  size_t latchBytes, size_t maxBatches);
  ~CpuStreamDevice() override;

  c10::Device device() const override { return c10::Device(c10::kCPU); }
  algo::Executor& executor() override { return *executor_; }
  std::string name() const override { return "cpu"; }

  void enqueue(const std::function<void()>& fn) override;
  void enqueueFinish(std::function<void()> fn) override;
  void protect(const std::vector<at::Tensor>&) override {}
  EventPtr recordEnd() override;
  bool futureOnDevice() const override { return false; }
  bool hasCallerStream() const override { return false; }
  void callerWaits(const EventPtr&) override {}

  bool reached(const EventPtr& end) override;
  std::string transferError() override;
  StreamOrderedReducer& reducer() override { return *reducer_; }
  void abortTransfers() override;
  bool mayFreeUnfinished() override { return drained_.load(std::memory_order_acquire); }
  void finalize(std::chrono::milliseconds limit) override;

 private:
  struct End;
  CpuStream compute_;
  std::unique_ptr<StreamReducer> reducer_;
  std::unique_ptr<CpuStreamTransport> transport_;
  std::unique_ptr<algo::Executor> executor_;
  std::atomic<bool> drained_{false};  // abortTransfers() returned: nothing runs any more
};

}  // namespace ringcoll
