// The one transport interface. A transport moves bytes between two ranks of one
// group and knows nothing else: no chunks, no dtypes, no reduce ops.
//
// Verb: start(toRank, sendBuf, sendBytes, fromRank, recvBuf, recvBytes) begins a
// paired exchange (either half may be absent: rank < 0 or bytes == 0) and returns a
// Pending whose wait() returns once both halves completed. Exchanges started on
// one transport complete in start order per (sender, receiver) pair, so a sender
// and receiver that walk the same schedule match each message without tags.
//
// Buffers must stay valid until wait() returns. A peer that fails or does not
// answer within the transport's timeout makes wait() throw PeerError naming it.
//
// Implementations (one file each, parallel names):
//   gloo_transport  - CPU memory, torch's ProcessGroupGloo point-to-point (any host)
//   nccl_transport  - CUDA memory, ncclSend/ncclRecv on the comm stream
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>

namespace ringcoll {

class Transport {
 public:
  class Pending {
   public:
    virtual ~Pending() = default;
    virtual void wait() = 0;
  };

  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* name() const = 0;

  virtual std::unique_ptr<Pending> start(int toRank, const void* sendBuf,
                                         size_t sendBytes, int fromRank,
                                         void* recvBuf, size_t recvBytes) = 0;

  // The peer a wait() is currently blocked on, -1 if none: lets a Work that timed
  // out on another thread say whom the collective was waiting for.
  int waitingFor() const { return waitingFor_.load(std::memory_order_relaxed); }

 protected:
  std::atomic<int> waitingFor_{-1};
};

}  // namespace ringcoll
