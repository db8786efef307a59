// StreamTransport: the logic of a stream-ordered transport (transport.h), written
// once for NCCL (nccl_transport.h) and for its CPU emulation
// (cpu_stream_transport.h), so that CI runs the GPU path's ordering on every
// commit. A device gives two queues that run in order, `compute` (where the
// reducer's work runs) and `transfer`, with markers between them; the subclass is
// the thin glue to them (CUDA events and NCCL calls, or host threads).
//
// Posts are collected into a batch; flush() enqueues the batch as one unit (NCCL:
// one ncclGroupStart ... ncclGroupEnd), on one of the two queues:
//   * on `transfer` when received bytes of an earlier batch are still to be
//     consumed: there is reducer work for `compute` to overlap with this batch.
//     `transfer` first waits for everything already on `compute` (the data being
//     sent was produced there, and the staging or destination memory being
//     received into was last read or written there), and a marker after the batch
//     tells recvView() what `compute` must wait for. So "post wave w, then reduce
//     wave w-1" overlaps the transfer of one segment with the reduction of the
//     previous one, with no host synchronisation inside a collective;
//   * on `compute` itself otherwise (a small collective's every batch, a ring
//     step of one segment): stream order is then all the ordering there is, and
//     the batch costs no marker and no wait, as ProcessGroupNCCL runs everything on
//     one stream. `compute` first waits for the last `transfer` batch if it has
//     not yet, so batches run in flush order whichever queue they are on.
// recvView() makes `compute` wait for the marker of the batch that carried that
// receive (nothing when it ran on `compute`) and hands out its memory. fence()
// makes `compute` wait for every batch flushed so far: the executor calls it at
// the end of every job, so that whatever completes after the job on `compute`
// (the Work's end) also covers its sends, which read their source until their
// batch ran.
//
// In-flight bound. A launch on a GPU blocks once the device's launch queue is
// full, and the queue fills behind a kernel that waits for a dead peer; NCCL's
// launch runs under the communicator's lock, which the watchdog's abort needs
// (nccl_comm.h). So flush() never enqueues a batch while `maxBatches` batches are
// in flight: it waits on the host, holding no lock, for the oldest to complete
// (counted in StreamStats::kHostWaits), and throws PeerError once the transfers
// were aborted meanwhile (the owner's watchdog aborts them when a peer failed or
// the launch's timeout passed: backend/stream_path.h). Completion
// is read from markers it already has (after each `transfer` batch) and from one
// marker recorded on `compute` every kProbeEvery batches there.
//
// A receive lands in place when the executor offers a destination, else in a
// staging buffer of slotBytes (the device's memory, allocated on first need and
// kept until the transport goes).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/stream_stats.h"
#include "transport/transport.h"

namespace ringcoll {

class StreamTransport : public Transport {
 public:
  StreamTransport(int rank, int size, size_t slotBytes);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool streamOrdered() const override { return true; }

  bool trySend(int peer, const void* src, size_t bytes) override;
  uint64_t sendsDone(int peer) override { return flushedSends_[peer]; }
  bool tryPostRecv(int peer, void* dst, size_t bytes) override;
  const void* recvView(int peer) override;
  void releaseRecv(int peer) override;
  void flush() override;
  void fence() override;
  // Nothing to wait for on the host: every post completes in stream order.
  uint32_t idleToken() override { return 0; }
  void idle(uint32_t, Clock::time_point until) override;

  // Called on the enqueuing thread right after `compute` was made to wait for
  // transfers (recvView, fence): the device hands it to its reducer, whose large
  // kernels re-read the stop word after such a wait (reduce/reducer.h). Set once,
  // before the first post.
  void setJoinHook(std::function<void()> hook) { joinHook_ = std::move(hook); }
  // Where batches, posts, markers, stream waits and host waits are counted (and
  // timed); may stay null. Set once, before the first post.
  void setStats(StreamStats* stats) { stats_ = stats; }
  // The in-flight bound (above): `maxBatches` (0: none). Set once, before the
  // first post.
  void setInFlightBound(size_t maxBatches) { maxBatches_ = maxBatches; }
  size_t inFlightBound() const { return maxBatches_; }
  // A marker on `compute` every this many batches enqueued there (in-flight bound).
  static constexpr uint64_t kProbeEvery = 16;

 protected:
  // A point in one queue: complete once everything queued there before it ran.
  struct Marker {
    virtual ~Marker() = default;
  };
  using MarkerPtr = std::shared_ptr<Marker>;
  struct Post {
    bool send;
    int peer;
    void* ptr;
    size_t bytes;
  };

  // The glue. markCompute/markTransfer: a marker after what is queued so far;
  // transferWaits/computeWaits: later work on that queue waits for the marker;
  // enqueueBatch: the posts as one unit on `transfer`, or on `compute` when
  // `onCompute` (they pair with the peers' batch of the same wave); reached:
  // whether a marker completed on the device (a device fault throws); aborted:
  // why the transfers were aborted ("" if they were not); allocStaging/
  // freeStaging: device memory of slotBytes.
  virtual MarkerPtr markCompute() = 0;
  virtual MarkerPtr markTransfer() = 0;
  virtual void transferWaits(const MarkerPtr& m) = 0;
  virtual void computeWaits(const MarkerPtr& m) = 0;
  virtual void enqueueBatch(const std::vector<Post>& batch, bool onCompute) = 0;
  virtual bool reached(const MarkerPtr& m) = 0;
  virtual std::string aborted() = 0;
  virtual void* allocStaging(size_t bytes) = 0;
  virtual void freeStaging(void* p) = 0;

  // For the subclass's destructor (freeStaging is virtual): frees every staging
  // buffer. The device must be done with them.
  void releaseStaging();
  size_t slotBytes() const { return slotBytes_; }

 private:
  struct Recv {
    void* ptr;
    bool staged;
    bool flushed = false;
    MarkerPtr done;        // after its batch on `transfer`; null when it ran on `compute`
    bool waited = false;   // `compute` is ordered after its batch
  };
  // A marker that completes once the first `batches` batches did (in-flight bound).
  struct Probe {
    uint64_t batches;
    MarkerPtr marker;
  };

  const int rank_;
  const int size_;
  const size_t slotBytes_;
  std::vector<Post> batch_;
  std::vector<uint64_t> postedSends_;
  std::vector<uint64_t> flushedSends_;
  std::vector<std::deque<Recv>> recvs_;           // per peer, oldest first
  std::vector<std::vector<void*>> freeStaging_;  // per peer
  std::vector<void*> staging_;                   // every staging buffer, for release
  MarkerPtr last_;        // after the last batch flushed on `transfer`
  bool lastJoined_ = true;  // `compute` waits for last_
  std::function<void()> joinHook_;
  StreamStats* stats_ = nullptr;
  size_t maxBatches_ = 0;
  uint64_t flushed_ = 0;       // batches enqueued
  uint64_t completed_ = 0;     // of them, known complete
  uint64_t lastProbe_ = 0;     // flushed_ when the newest probe was taken
  std::deque<Probe> probes_;   // oldest first

  void joinCompute(const MarkerPtr& m);
  // Received bytes of an earlier batch wait to be consumed (flush()'s choice).
  bool consumesPending() const;
  // Whether another batch may be enqueued now; waits on the host for room (above).
  void awaitRoom();
  void noteCompleted();
  void count(StreamStats::Count c, uint64_t k = 1) {
    if (stats_) stats_->add(c, k);
  }
};

}  // namespace ringcoll
