// StreamTransport: the logic of a stream-ordered transport (transport.h), written
// once for NCCL (nccl_transport.h) and for its CPU emulation
// (cpu_stream_transport.h), so that CI runs the GPU path's ordering on every
// commit. A device gives two queues that run in order, `compute` (where the
// reducer's work runs) and `transfer`, with markers between them; the subclass is
// the thin glue to them (CUDA events and NCCL calls, or host threads).
//
// Posts are collected into a batch; flush() makes `transfer` wait for everything
// already on `compute` (the data being sent was produced there, and the staging or
// destination memory being received into was last read or written there), then
// enqueues the batch as one unit (NCCL: one ncclGroupStart ... ncclGroupEnd) and
// marks `transfer` after it. recvView() makes `compute` wait for the marker of the
// batch that carried that receive and hands out its memory, so "post wave w, then
// reduce wave w-1" overlaps the transfer of one segment with the reduction of the
// previous one, with no host synchronisation inside a collective. fence() makes
// `compute` wait for every batch flushed so far: the executor calls it at the end
// of every job, so that whatever completes after the job on `compute` (the Work's
// end) also covers its sends, which read their source until their batch ran.
//
// A receive lands in place when the executor offers a destination, else in a
// staging buffer of slotBytes (the device's memory, allocated on first need and
// kept until the transport goes).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

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
  // enqueueBatch: the posts as one unit on `transfer` (they pair with the peers'
  // batch of the same wave); allocStaging/freeStaging: device memory of slotBytes.
  virtual MarkerPtr markCompute() = 0;
  virtual MarkerPtr markTransfer() = 0;
  virtual void transferWaits(const MarkerPtr& m) = 0;
  virtual void computeWaits(const MarkerPtr& m) = 0;
  virtual void enqueueBatch(const std::vector<Post>& batch) = 0;
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
    MarkerPtr done;  // null until flushed
    bool waited = false;
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
  MarkerPtr last_;                               // after the last flushed batch
  std::function<void()> joinHook_;

  void joinCompute(const MarkerPtr& m);
};

}  // namespace ringcoll
