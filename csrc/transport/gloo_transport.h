// Transport over gloo point-to-point (a MessagePort), for ranks on other hosts (or
// every rank, with RINGCOLL_TRANSPORT=gloo). gloo does the networking.
//
// Sends go straight from the caller's memory. A receive lands in place when the
// executor offers a destination, else in one of a few staging buffers per peer,
// which recvView() hands out as the receive view. gloo completes an operation only
// inside a blocking wait, so one thread per peer and direction waits for that
// lane's operations in post order (gloo completes them in that order) and rings
// the doorbell after each, so the executor sleeps instead of polling.
//
// Staging is sized from the largest message (slotBytes); a message larger than
// that is a bug in the caller. A failed operation fails every later call for that
// peer with a PeerError naming it and gloo's reason.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "transport/doorbell.h"
#include "transport/message_port.h"
#include "transport/transport.h"

namespace ringcoll {

class GlooTransport final : public Transport {
 public:
  // `bell`: the doorbell to ring when an operation completes (shared with other
  // transports of the same backend); null: a private one.
  GlooTransport(std::shared_ptr<MessagePort> port, Doorbell* bell, size_t slotBytes,
                std::chrono::milliseconds timeout);
  ~GlooTransport() override;

  int rank() const override { return port_->rank(); }
  int size() const override { return port_->size(); }
  std::string name() const override { return "gloo"; }

  bool trySend(int peer, const void* src, size_t bytes) override;
  uint64_t sendsDone(int peer) override;
  bool tryPostRecv(int peer, void* dst, size_t bytes) override;
  const void* recvView(int peer) override;
  void releaseRecv(int peer) override;

  uint32_t idleToken() override { return bell_->token(); }
  void idle(uint32_t token, Clock::time_point until) override { bell_->wait(token, until); }
  void wake() override { bell_->ring(); }

 private:
  class Lane;
  struct Posted {
    void* ptr;
    bool staged;
  };
  struct Peer {
    std::unique_ptr<Lane> sends;
    std::unique_ptr<Lane> recvs;
    std::deque<Posted> posted;       // receives not yet released
    uint64_t consumed = 0;           // receives released
    std::vector<void*> freeStaging;  // staging buffers not in use
    size_t stagingCount = 0;         // staging buffers of this peer
  };

  Lane& lane(std::unique_ptr<Lane>& slot, int peer, const char* what);

  std::shared_ptr<MessagePort> port_;
  DoorbellWord ownWord_;
  std::unique_ptr<Doorbell> ownBell_;
  Doorbell* bell_;
  const size_t slotBytes_;
  const std::chrono::milliseconds timeout_;
  std::vector<Peer> peers_;
  std::vector<void*> staging_;  // every staging buffer, for release
};

}  // namespace ringcoll
