// Internal to the point-to-point engine (p2p.cc, p2p_progress.cc, p2p_failures.cc):
// the wire header and the engine's per-request and per-peer state.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>

#include "common/errors.h"
#include "engine/p2p.h"

namespace ringcoll {

namespace p2p_detail {
constexpr uint32_t kMagic = 0x50324352u;  // "RC2P"
// Payload segments posted ahead of the one being consumed: keeps gloo's lane busy
// while a segment is copied out; shared memory takes them as they come anyway.
constexpr size_t kWindowSegments = 4;

inline std::string peerName(int peer) {
  return peer == P2PEngine::kAnySource ? std::string("any rank") : RC_STR("rank ", peer);
}

inline std::string mismatchText(int source, uint64_t sent, int64_t tag, size_t expected) {
  return RC_STR("rank ", source, " sent a message of ", sent, " bytes with tag ", tag,
                " but this receive expects ", expected,
                " bytes (the message was dropped; nothing was written)");
}
}  // namespace p2p_detail

struct P2PEngine::Header {
  uint32_t magic;
  uint32_t channel;
  int64_t tag;
  uint64_t bytes;
  uint64_t number;  // 1, 2, ... per sender and receiver (errors name it)
};

struct P2PEngine::Op {
  Request req;
  Clock::time_point posted;
  Header header{};  // sends: what goes first (gloo reads it until sent)
  bool headerHanded = false;
  size_t handed = 0;    // payload bytes handed to the transport
  uint64_t doneAt = 0;  // the transport's sendsDone() count that completes it
  Result result;

  std::string describe() const {
    return RC_STR(req.send ? "sending to " : "waiting for a message from ",
                  p2p_detail::peerName(req.peer), " (tag ", req.tag, ", ",
                  req.anySize ? std::string("any size") : RC_STR(req.bytes, " bytes"), ")");
  }
};

// A message that arrived before any receive took it.
struct P2PEngine::Stashed {
  int source = -1;
  uint32_t channel = 0;
  int64_t tag = 0;
  uint64_t bytes = 0;
  uint64_t arrival = 0;  // engine-wide arrival order (any-source takes the oldest)
  Clock::time_point arrived;
  std::unique_ptr<char[]> data;
  bool complete = false;
  OpPtr waiter;  // a receive that took it while its payload still arrives
};

struct P2PEngine::Peer {
  // Outgoing.
  std::deque<OpPtr> sendQueue;  // the head is being handed over
  std::deque<OpPtr> inflight;   // handed over; done once sendsDone() >= doneAt
  uint64_t handed = 0;          // messages handed to the transport
  uint64_t numbered = 0;        // headers numbered
  Clock::time_point outMoved;
  std::string outBroken;        // a send was cut mid-message: why
  // Incoming.
  std::unique_ptr<Header> headerBuf = std::make_unique<Header>();  // gloo lands here
  bool headerPosted = false;
  bool inMessage = false;
  Header in{};
  char* dst = nullptr;               // where the payload goes; null: dropped
  OpPtr op;                          // the receive it completes, or
  std::shared_ptr<Stashed> filling;  // the stash entry it fills
  uint64_t posted = 0;
  uint64_t received = 0;
  Clock::time_point inMoved;
  std::deque<std::shared_ptr<Stashed>> stashed;  // unmatched, in arrival order
  // The transport's failure for this peer, once there was one.
  std::string failed;
  bool failedTimedOut = false;
};

}  // namespace ringcoll
