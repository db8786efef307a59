// GPU transport: ncclSend/ncclRecv between the ranks of one communicator. It is
// stream-ordered (transport/transport.h): nothing here blocks the host.
//
// Two streams: `compute` (the backend's comm stream, where the reducer's kernels
// run) and an internal transfer stream. Posts are collected into a batch; flush()
// makes the transfer stream wait for everything already on `compute` (the data
// being sent was produced there, and the staging or destination memory being
// received into was last read or written there), then enqueues the batch as one
// ncclGroupStart ... ncclGroupEnd and records an event after it. recvView() makes
// `compute` wait for the event of the batch that carried that receive, and hands
// out its memory; so the executor's "post wave w, then reduce wave w-1" overlaps the
// transfer of one segment with the reduction of the previous one on the GPU, with
// no host synchronisation inside a collective. fence() makes `compute` wait for
// every batch flushed so far.
//
// A receive lands in place when the executor offers a destination, else in a
// staging buffer of slotBytes (device memory, allocated on first need and kept).
// No torch here: the communicator is created by the backend (unique id through
// the c10d store) and handed over; every NCCL call is made under its lock
// (transport/nccl_comm.h), and a batch that cannot be enqueued within the
// communicator's limit (a dead peer during connection set-up) aborts it and throws
// PeerError.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "transport/nccl_comm.h"
#include "transport/transport.h"

namespace ringcoll {

class NcclTransport final : public Transport {
 public:
  NcclTransport(NcclComm& comm, int rank, int size, cudaStream_t compute, size_t slotBytes);
  ~NcclTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "nccl"; }
  bool streamOrdered() const override { return true; }
  cudaStream_t transferStream() const { return transfer_; }

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

 private:
  struct Event;  // a recorded CUDA event shared by the receives of one batch
  struct Post {
    bool send;
    int peer;
    void* ptr;
    size_t bytes;
  };
  struct Recv {
    void* ptr;
    bool staged;
    std::shared_ptr<Event> done;  // null until flushed
    bool waited = false;
  };

  NcclComm& comm_;
  int rank_;
  int size_;
  cudaStream_t compute_;
  cudaStream_t transfer_ = nullptr;
  size_t slotBytes_;
  std::vector<Post> batch_;
  std::vector<uint64_t> postedSends_;
  std::vector<uint64_t> flushedSends_;
  std::vector<std::deque<Recv>> recvs_;        // per peer, oldest first
  std::vector<std::vector<void*>> freeStaging_;  // per peer
  std::vector<void*> staging_;                 // every staging buffer, for release
  std::shared_ptr<Event> last_;                // after the last flushed batch
};

}  // namespace ringcoll
