#include "engine/p2p.h"

#include <algorithm>
#include <cstring>

#include "engine/p2p_state.h"

namespace ringcoll {

using namespace p2p_detail;

P2PEngine::P2PEngine(std::unique_ptr<Transport> transport, size_t segmentBytes)
    : transport_(std::move(transport)),
      segmentBytes_(segmentBytes),
      rank_(transport_->rank()),
      size_(transport_->size()) {
  static_assert(sizeof(Header) == 32, "the header's layout is the wire format");
  RC_ASSERT(segmentBytes_ >= sizeof(Header), "segments of ", segmentBytes_, " bytes");
  peers_.resize(static_cast<size_t>(size_));
  lastMove_ = Clock::now();
  for (auto& p : peers_) p.outMoved = p.inMoved = lastMove_;
  thread_ = std::thread([this] { loop(); });
}

P2PEngine::~P2PEngine() {
  stop(Stop::kAbort);
  // The transport is closed, but gloo keeps the buffers of operations it never
  // completed registered until its group goes, and may still write or read them:
  // leak those (the header buffers of idle peers, requests failed mid-message)
  // rather than free memory gloo may touch.
  for (auto& op : graveyard_) (void)op.release();
  for (auto& p : peers_) {
    if (p.headerPosted) (void)p.headerBuf.release();
  }
}

void P2PEngine::post(Request r) {
  auto op = std::make_unique<Op>();
  op->req = std::move(r);
  op->posted = Clock::now();
  int stopping;
  {
    std::lock_guard<Mutex> lock(mutex_);
    stopping = stopping_;
    if (stopping == 0) {
      inbox_.push_back(std::move(op));
      transport_->wake();
      return;
    }
  }
  const std::string why = stoppedWhile(stopping == 1 + static_cast<int>(Stop::kAbort)
                                           ? Stop::kAbort : Stop::kShutdown) + op->describe();
  complete(std::move(op), why);
}

// The start of the error of a request that a stop ends; describe() completes it.
std::string P2PEngine::stoppedWhile(Stop how) {
  return how == Stop::kAbort
             ? "aborted (ProcessGroup abort() was called) while "
             : "the process group was shut down (destroy_process_group) while ";
}

void P2PEngine::requestStop(Stop how) {
  const int want = 1 + static_cast<int>(how);
  std::lock_guard<Mutex> lock(mutex_);
  stopping_ = std::max(stopping_, want);
  if (!stopped_) transport_->wake();
}

void P2PEngine::stop(Stop how) {
  requestStop(how);
  std::deque<OpPtr> late;  // posted after the thread's last intake
  {
    std::lock_guard<Mutex> once(joinMutex_);
    if (thread_.joinable()) thread_.join();
    std::lock_guard<Mutex> lock(mutex_);
    stopped_ = true;
    late.swap(inbox_);
  }
  // Posted after the thread's last look: they end as the stop's kind says, as the
  // requests the thread held did; their closures run with no lock held.
  for (auto& op : late) {
    const std::string why = stoppedWhile(how) + op->describe();
    complete(std::move(op), why);
  }
  std::lock_guard<Mutex> once(joinMutex_);
  transport_.reset();
}

void P2PEngine::complete(OpPtr op, const std::string& error, bool timedOut,
                         bool memoryInUse) {
  checkNoLockHeld("completing a point-to-point request (its closure)");
  op->result.error = error;
  op->result.timedOut = timedOut;
  if (op->req.done) op->req.done(op->result);
  if (memoryInUse) graveyard_.push_back(std::move(op));
}

// ---------------------------------------------------------------------------------
// The progress thread

void P2PEngine::loop() {
  markOwnThread();
  try {
    for (;;) {
      // Taken before looking, so that whatever arrives (or is posted) after the
      // look ends the idle wait below.
      const uint32_t token = transport_->idleToken();
      bool moved = intake();
      for (int q = 0; q < size_; ++q) {
        if (q == rank_ || !peers_[q].failed.empty()) continue;
        try {
          moved |= progressPeer(q);
        } catch (const PeerError& e) {
          failPeer(q, e.what(), e.timedOut());
          moved = true;
        }
      }
      const auto now = Clock::now();
      moved |= expire(now);
      if (moved) lastMove_ = now;
      int stopping;
      {
        std::lock_guard<Mutex> lock(mutex_);
        stopping = stopping_;
      }
      if (stopping == 1 + static_cast<int>(Stop::kAbort)) {
        failAll(stoppedWhile(Stop::kAbort));
        return;
      }
      if (stopping != 0) {
        if (!pending()) return;
        if (now - lastMove_ >= kShutdownGrace) {
          failAll(stoppedWhile(Stop::kShutdown));
          return;
        }
      }
      if (moved) continue;
      auto until = nextDeadline();
      if (stopping != 0) until = std::min(until, lastMove_ + kShutdownGrace);
      try {
        transport_->idle(token, until);
      } catch (const PeerError& e) {
        // Shared memory reports a peer's exit while it sleeps.
        if (e.peer() >= 0 && e.peer() < size_ && e.peer() != rank_) {
          failPeer(e.peer(), e.what(), e.timedOut());
        }
      }
    }
  } catch (const std::exception& e) {
    // A broken invariant of this engine: fail what waits rather than hang it.
    failAll(RC_STR("ringcoll point-to-point failed (", e.what(), ") while "));
    std::lock_guard<Mutex> lock(mutex_);
    stopping_ = 1 + static_cast<int>(Stop::kAbort);
  }
}

bool P2PEngine::intake() {
  std::deque<OpPtr> in;
  {
    std::lock_guard<Mutex> lock(mutex_);
    in.swap(inbox_);
  }
  for (auto& op : in) {
    if (op->req.send) {
      acceptSend(std::move(op));
    } else {
      acceptRecv(std::move(op));
    }
  }
  return !in.empty();
}

void P2PEngine::acceptSend(OpPtr op) {
  const int q = op->req.peer;
  if (q == rank_) return sendToSelf(std::move(op));
  Peer& p = peers_[q];
  if (!p.failed.empty()) {
    return complete(std::move(op), RC_STR("rank ", q, " failed earlier: ", p.failed),
                    p.failedTimedOut);
  }
  if (!p.outBroken.empty()) return complete(std::move(op), p.outBroken);
  op->header = Header{kMagic, static_cast<uint32_t>(op->req.channel), op->req.tag,
                      op->req.bytes, ++p.numbered};
  p.sendQueue.push_back(std::move(op));
}

// A send to this rank: straight into a waiting receive, else into the stash.
void P2PEngine::sendToSelf(OpPtr op) {
  const auto channel = static_cast<uint32_t>(op->req.channel);
  const size_t bytes = op->req.bytes;
  const char* src = static_cast<const char*>(op->req.buf);
  if (OpPtr r = takeRecv(rank_, channel, op->req.tag)) {
    r->result.source = rank_;
    if (r->req.anySize) {
      r->result.data.assign(src, src + bytes);
    } else if (r->req.bytes != bytes) {
      const std::string why = mismatchText(rank_, bytes, op->req.tag, r->req.bytes);
      complete(std::move(r), why);
      return complete(std::move(op));
    } else if (bytes != 0) {
      std::memcpy(r->req.buf, src, bytes);
    }
    complete(std::move(r));
    return complete(std::move(op));
  }
  auto s = std::make_shared<Stashed>();
  s->source = rank_;
  s->channel = channel;
  s->tag = op->req.tag;
  s->bytes = bytes;
  s->arrival = ++arrivals_;
  s->arrived = Clock::now();
  s->data.reset(new char[bytes]);
  if (bytes != 0) std::memcpy(s->data.get(), src, bytes);
  s->complete = true;
  peers_[rank_].stashed.push_back(std::move(s));
  complete(std::move(op));
}

void P2PEngine::acceptRecv(OpPtr op) {
  const int q = op->req.peer;
  // Only a message that came before the receive's deadline: the progress thread may
  // take a request in a while after it was posted (a busy core), and a receive
  // that timed out meanwhile must not take a message meant for a later one.
  const auto deadline = op->posted + op->req.timeout;
  if (auto s = takeStashed(q, static_cast<uint32_t>(op->req.channel), op->req.tag, deadline)) {
    op->result.source = s->source;
    if (!op->req.anySize && s->bytes != op->req.bytes) {
      const std::string why = mismatchText(s->source, s->bytes, s->tag, op->req.bytes);
      return complete(std::move(op), why);
    }
    if (s->complete) return deliverStashed(std::move(op), *s);
    s->waiter = std::move(op);  // completed when its last segment arrives
    return;
  }
  if (q != kAnySource && q != rank_ && !peers_[q].failed.empty()) {
    return complete(std::move(op), RC_STR("rank ", q, " failed earlier: ", peers_[q].failed),
                    peers_[q].failedTimedOut);
  }
  if (q == kAnySource && anySourceHopeless()) {
    return complete(std::move(op), "every other rank failed earlier");
  }
  recvs_.push_back(std::move(op));
}

void P2PEngine::deliverStashed(OpPtr op, Stashed& s) {
  op->result.source = s.source;
  if (op->req.anySize) {
    op->result.data.assign(s.data.get(), s.data.get() + s.bytes);
  } else if (s.bytes != 0) {
    std::memcpy(op->req.buf, s.data.get(), s.bytes);
  }
  complete(std::move(op));
}

P2PEngine::OpPtr P2PEngine::takeRecv(int q, uint32_t channel, int64_t tag) {
  const auto now = Clock::now();
  for (auto it = recvs_.begin(); it != recvs_.end(); ++it) {
    const Request& r = (*it)->req;
    // A receive that timed out (expire() fails it next) takes nothing.
    if (static_cast<uint32_t>(r.channel) == channel && r.tag == tag &&
        (r.peer == q || r.peer == kAnySource) && !recvLate(**it, now)) {
      OpPtr op = std::move(*it);
      recvs_.erase(it);
      return op;
    }
  }
  return nullptr;
}

std::shared_ptr<P2PEngine::Stashed> P2PEngine::takeStashed(int peer, uint32_t channel,
                                                           int64_t tag,
                                                           Clock::time_point before) {
  auto matches = [&](const std::shared_ptr<Stashed>& s) {
    return s->channel == channel && s->tag == tag && s->arrived < before;
  };
  int bestPeer = -1;
  uint64_t bestArrival = 0;
  std::deque<std::shared_ptr<Stashed>>::iterator best;
  for (int q = 0; q < size_; ++q) {
    if (peer != kAnySource && q != peer) continue;
    auto& st = peers_[q].stashed;
    auto it = std::find_if(st.begin(), st.end(), matches);
    if (it != st.end() && (bestPeer < 0 || (*it)->arrival < bestArrival)) {
      bestPeer = q;
      bestArrival = (*it)->arrival;
      best = it;
    }
  }
  if (bestPeer < 0) return nullptr;
  auto s = std::move(*best);
  peers_[bestPeer].stashed.erase(best);
  return s;
}

}  // namespace ringcoll
