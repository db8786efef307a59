// The CPU emulation of NCCL's stream semantics (RINGCOLL_TRANSPORT=stream): a
// stream-ordered transport (stream_transport.h) for CPU memory whose "device" is
// two host threads (common/cpu_stream.h): `compute`, the reducer's
// (reduce/stream_reducer.h), and this transport's `transfer`. It exists so that
// CI, which has no GPU, runs what the GPU path runs: the executor's waves, the
// batching, ordering and staging of StreamTransport, the completion of a job
// only when its queues reach its end. It is as strict as NCCL where it matters:
//   * a batch runs later, in order, on `transfer`, as one unit: it ends once all
//     its sends left and all its receives arrived;
//   * a send reads its source when its batch runs, not when it was posted;
//   * received bytes are in place only once the batch ran; work ordered after
//     the batch (computeWaits) may read them, nothing else;
//   * with RINGCOLL_STREAM_DELAY_US every task starts after a random pause, so work
//     that is not ordered after what it depends on reads the wrong bytes.
// Bytes move over the backend's host transport (shared memory within a host,
// gloo between hosts), used by the transfer thread alone.
//
// A batch runs on the thread of the queue StreamTransport chose: `transfer`, or
// `compute` itself (stream_transport.h), where it holds up the reductions behind
// it as an NCCL kernel on the comm stream does.
//
// A failure inside a batch (a peer exited, abort()) is the transport's failure
// (failure()), as an NCCL error fails the communicator: later batches are skipped
// on either queue (on `transfer` the failure also fails the stream, as before).
// Compute work ordered after a failed batch waits, as behind an NCCL kernel stuck
// on a dead peer, until the transfers are aborted, and then runs: only the
// reducer's stop word, which the backend sets before it aborts them, keeps it from
// reading bytes that never came, as on a GPU.
#pragma once

#include <atomic>
#include <exception>
#include <mutex>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/cpu_stream.h"
#include "transport/stream_transport.h"

namespace ringcoll {

class CpuStreamTransport final : public StreamTransport {
 public:
  // `inner`: the host transport the bytes travel on (it must outlive this one,
  // and nothing else may use it); `compute`: the reducer's stream. A batch waits
  // for its peers as long as it takes, as NCCL's do: the stream path's watchdog
  // enforces the timeout and aborts. `failAfter` > 0 (tests): the failAfter-th
  // enqueued batch throws instead.
  CpuStreamTransport(Transport& inner, CpuStream& compute, size_t slotBytes,
                     uint32_t maxDelayUs, size_t failAfter = 0);
  ~CpuStreamTransport() override;

  std::string name() const override { return "stream(" + inner_.name() + ")"; }
  CpuStream& transferStream() { return transfer_; }
  // The peer the running batch waits for, -1 if none.
  int waitingFor() const { return waitPeer_.load(std::memory_order_relaxed); }
  // Fails the batch in flight and skips the rest (ncclCommAbort). Thread-safe, and
  // safe after the host transport is gone (a stream path that outlives its backend
  // aborts again when it ends): it touches only this transport's own state; a batch
  // waiting for its peers sees it within kAbortPoll. (Not shorter: the shared-memory
  // transport looks at its peers' liveness only within an idle of over 50 ms.)
  void abort() { transfer_.abort(); }
  static constexpr auto kAbortPoll = std::chrono::milliseconds(200);
  // The first batch's failure ("" if none), on either queue. Thread-safe.
  std::string failure() const;

 private:
  struct HostMarker;
  MarkerPtr wrap(CpuStream::MarkerPtr m);
  MarkerPtr markCompute() override { return wrap(compute_.mark()); }
  MarkerPtr markTransfer() override { return wrap(transfer_.mark()); }
  void transferWaits(const MarkerPtr& m) override;
  void computeWaits(const MarkerPtr& m) override;
  void enqueueBatch(const std::vector<Post>& batch, bool onCompute) override;
  bool reached(const MarkerPtr& m) override;
  std::string aborted() override {
    return transfer_.aborted() ? "the transfers were aborted" : "";
  }
  void* allocStaging(size_t bytes) override;
  void freeStaging(void* p) override;
  // On the thread of the batch's queue: the batch, as one unit.
  void runBatch(const std::vector<Post>& batch);
  // runBatch on `compute`: a failure is recorded, not thrown (the compute stream
  // goes on, as a GPU's does), and the task returns only once the transfers are
  // aborted, as a kernel stuck on a dead peer exits only then.
  void runBatchOnCompute(const std::vector<Post>& batch);
  void fail(std::exception_ptr e);

  Transport& inner_;
  CpuStream& compute_;
  std::atomic<int> waitPeer_{-1};
  const size_t failAfter_;
  size_t batches_ = 0;
  mutable std::mutex failureMutex_;
  std::string failure_;
  CpuStream transfer_;  // last: its thread stops before the members above go
};

}  // namespace ringcoll
