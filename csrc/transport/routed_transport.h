// One transport per link: every peer is served by the transport chosen for its
// link (shared memory within a host, gloo between hosts; the backend decides, see
// engine/topology.h). The routed transport forwards each verb to the peer's
// transport and sleeps on the doorbell they all ring, so a rank whose ring has one
// link of each kind waits for both at once.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "transport/transport.h"

namespace ringcoll {

class RoutedTransport final : public Transport {
 public:
  // byPeer[q]: the transport for rank q (null for this rank). `sleeper`: the one
  // whose idle() sleeps on the shared doorbell (and checks its peers). `owned`: in
  // the order they were made (a transport may use one made before it).
  RoutedTransport(int rank, int size, std::vector<Transport*> byPeer, Transport* sleeper,
                  std::vector<std::unique_ptr<Transport>> owned);
  // Closes the owned transports last-made first: a gloo transport rings the shared
  // memory transport's doorbell from its lane threads until they are joined, so it
  // must go before the segment that holds the doorbell is unmapped.
  ~RoutedTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return name_; }

  bool trySend(int peer, const void* src, size_t bytes) override {
    return byPeer_[peer]->trySend(peer, src, bytes);
  }
  bool copiesSends(int peer) const override { return byPeer_[peer]->copiesSends(peer); }
  void* sendSlot(int peer, size_t bytes) override { return byPeer_[peer]->sendSlot(peer, bytes); }
  void commitSlot(int peer, size_t bytes) override { byPeer_[peer]->commitSlot(peer, bytes); }
  uint64_t sendsDone(int peer) override { return byPeer_[peer]->sendsDone(peer); }
  bool tryPostRecv(int peer, void* dst, size_t bytes) override {
    return byPeer_[peer]->tryPostRecv(peer, dst, bytes);
  }
  const void* recvView(int peer) override { return byPeer_[peer]->recvView(peer); }
  const void* recvViewAny(int peer, size_t* got) override {
    return byPeer_[peer]->recvViewAny(peer, got);
  }
  void releaseRecv(int peer) override { byPeer_[peer]->releaseRecv(peer); }
  void flush() override;
  uint32_t idleToken() override { return sleeper_->idleToken(); }
  void idle(uint32_t token, Clock::time_point until) override { sleeper_->idle(token, until); }
  void wake() override { sleeper_->wake(); }

  // The transport serving `peer`'s link ("shm", "gloo").
  std::string linkName(int peer) const { return byPeer_[peer]->name(); }

 private:
  const int rank_;
  const int size_;
  std::vector<Transport*> byPeer_;
  Transport* sleeper_;
  std::vector<std::unique_ptr<Transport>> owned_;
  std::string name_;
};

}  // namespace ringcoll
