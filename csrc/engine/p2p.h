// Point-to-point messages with tags (user send/recv, recv from any source,
// batch_isend_irecv; monitoredBarrier's arrivals and releases) over a transport of
// their own, so that they never interleave with a collective's message pairing.
//
// The transport pairs messages per direction in post order and knows no tags; this
// engine adds them. Every message is a 32-byte header, then its payload cut into
// segments of at most `segmentBytes` (the transport's largest message):
//
//   header  {magic, channel, tag, bytes, number}   number: 1, 2, ... per direction
//   payload ceil(bytes / segmentBytes) segments; none for 0 bytes
//
// Sender: sends to one peer go out in post order, eagerly (no handshake); a send is
// done when the transport no longer reads its source (shared memory: once copied;
// gloo: once gloo sent it). Receiver: one header receive is always posted per peer,
// so that a sender never waits for the receiver's program to call recv. A header is
// matched against the posted receives (the oldest that takes (peer, channel, tag),
// a specific-source one or an any-source one); its payload lands in the receive's
// memory (in place over gloo, copied out of the shared slot over shared memory). An
// unmatched message is stashed (its payload copied into memory of its own) and taken
// by a later receive, oldest first per peer, oldest arrival first for any source.
// Messages with the same (sender, channel, tag) are thus received in send order.
//
// A header whose size differs from the matching receive's fails that receive with
// both sizes; its payload is read and dropped, so nothing is written and the
// peer's stream stays in step (the sender cannot see it: its send completes).
//
// One progress thread drives the transport and completes the requests: it sleeps in
// the transport's idle() and post() wakes it. Failures:
//   * a peer that exited or whose connection failed (the transport's PeerError)
//     fails every request to or from it, at once and later; any-source receives go
//     on while another peer may still send;
//   * a request that made no progress within its timeout fails saying "Timed out"
//     and naming the peer. A receive that had not started, or a send that had not
//     handed over its header, leaves the peer's stream intact; a send cut mid-message
//     makes later sends to that peer fail;
//   * stop(kAbort) fails everything at once; stop(kShutdown) lets requests finish
//     while they move and fails them after kShutdownGrace without progress.
// A request's memory stays referenced (its `done` closure alive) while the
// transport may still read or write it, even after it failed.
//
// Files: p2p.cc (life cycle, intake, matching, the stash), p2p_progress.cc (the
// transport verbs per peer), p2p_failures.cc (timeouts, failed peers, stopping),
// p2p_state.h (the wire header and the state they share).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/failure.h"
#include "common/locks.h"
#include "transport/transport.h"

namespace ringcoll {

class P2PEngine {
 public:
  using Clock = std::chrono::steady_clock;

  // Messages of different channels never match: user send/recv, and
  // monitoredBarrier's (whose tags are the barrier's call numbers).
  enum class Channel : uint32_t { kUser = 0, kMonitoredBarrier = 1 };
  static constexpr int kAnySource = -1;

  struct Result {
    std::string error;       // empty: success. Names the peer; no op label.
    bool timedOut = false;
    int source = -1;         // receives: the rank the message came from
    std::vector<char> data;  // receives with anySize: the payload
  };

  struct Request {
    bool send = false;
    int peer = kAnySource;  // kAnySource: receives only
    Channel channel = Channel::kUser;
    int64_t tag = 0;
    void* buf = nullptr;    // send: read until done; receive: written
    size_t bytes = 0;
    bool anySize = false;   // receive whatever size comes, into Result::data
    std::chrono::milliseconds timeout{0};
    // Called exactly once, on the progress thread (or in post() once stopped); must
    // not throw. Whatever keeps `buf` alive belongs in its captures.
    std::function<void(Result&)> done;
  };

  // `transport`: this engine's own (never shared with collectives).
  P2PEngine(std::unique_ptr<Transport> transport, size_t segmentBytes);
  ~P2PEngine();  // stop(kAbort)
  P2PEngine(const P2PEngine&) = delete;
  P2PEngine& operator=(const P2PEngine&) = delete;

  // Thread-safe.
  void post(Request r);

  enum class Stop { kShutdown, kAbort };
  // Idempotent; joins the progress thread and closes the transport. Requests posted
  // later fail at once. Not on the progress thread (a request's closure): use
  // requestStop there.
  void stop(Stop how);
  // The stop without the join: the progress thread fails (kAbort) or winds down
  // (kShutdown) the requests, and later posts fail at once. Any thread.
  void requestStop(Stop how);

 private:
  struct Header;
  struct Op;
  struct Stashed;
  struct Peer;
  using OpPtr = std::unique_ptr<Op>;

  void loop();
  bool intake();
  void acceptSend(OpPtr op);
  void acceptRecv(OpPtr op);
  void sendToSelf(OpPtr op);
  bool progressPeer(int q);
  bool progressSends(int q);
  bool progressRecvs(int q);
  void onHeader(int q, const Header& h);
  void messageDone(int q);
  OpPtr takeRecv(int q, uint32_t channel, int64_t tag);
  // The oldest stashed message from `peer` (any: kAnySource) that came `before`.
  std::shared_ptr<Stashed> takeStashed(int peer, uint32_t channel, int64_t tag,
                                       Clock::time_point before);
  // Whether an unmatched receive timed out: `timeout` without a message from its
  // peer since it was posted.
  bool recvLate(const Op& op, Clock::time_point now) const;
  void deliverStashed(OpPtr op, Stashed& s);
  bool expire(Clock::time_point now);
  Clock::time_point nextDeadline() const;
  bool pending() const;
  void failPeer(int q, const std::string& why, bool timedOut);
  // Fails every request in flight with `whilePrefix` + what it was doing.
  void failAll(const std::string& whilePrefix);
  // "aborted (...) while " / "the process group was shut down (...) while ".
  static std::string stoppedWhile(Stop how);
  bool anySourceHopeless() const;
  // Completes `op` (error empty: success); `memoryInUse`: the transport may still
  // touch its buffer, so the request (and what its closure keeps alive) is kept.
  void complete(OpPtr op, const std::string& error = "", bool timedOut = false,
                bool memoryInUse = false);

  std::unique_ptr<Transport> transport_;
  const size_t segmentBytes_;
  const int rank_;
  const int size_;

  // Neither is held while a request's closure runs (common/locks.h).
  Mutex joinMutex_{"P2PEngine::joinMutex_"};  // one stop() joins and closes
  Mutex mutex_{"P2PEngine::mutex_"};          // guards inbox_, stopping_, stopped_
  std::deque<OpPtr> inbox_;
  int stopping_ = 0;  // 0, or 1 + Stop
  bool stopped_ = false;

  // Progress thread only, from here on.
  std::vector<Peer> peers_;
  std::list<OpPtr> recvs_;  // posted and unmatched, in post order
  uint64_t arrivals_ = 0;
  Clock::time_point lastMove_;
  std::vector<OpPtr> graveyard_;  // failed while the transport may touch their memory

  std::thread thread_;  // last: starts once everything above exists
};

}  // namespace ringcoll
