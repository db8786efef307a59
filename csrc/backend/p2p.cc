#include "backend/p2p.h"

#include <algorithm>
#include <cstring>

#include "common/errors.h"

namespace ringcoll {

namespace {
constexpr uint32_t kMagic = 0x50324352u;  // "RC2P"
// Payload segments posted ahead of the one being consumed: keeps gloo's lane busy
// while a segment is copied out; shared memory takes them as they come anyway.
constexpr size_t kWindowSegments = 4;

std::string peerName(int peer) {
  return peer == P2PEngine::kAnySource ? std::string("any rank") : RC_STR("rank ", peer);
}

std::string mismatchText(int source, uint64_t sent, int64_t tag, size_t expected) {
  return RC_STR("rank ", source, " sent a message of ", sent, " bytes with tag ", tag,
                " but this receive expects ", expected,
                " bytes (the message was dropped; nothing was written)");
}
}  // namespace

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
                  peerName(req.peer), " (tag ", req.tag, ", ",
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
    std::lock_guard<std::mutex> lock(mutex_);
    stopping = stopping_;
    if (stopping == 0) {
      inbox_.push_back(std::move(op));
      transport_->wake();
      return;
    }
  }
  complete(std::move(op), stopping == 1 + static_cast<int>(Stop::kAbort)
                              ? "the process group was aborted"
                              : "the process group was shut down");
}

void P2PEngine::stop(Stop how) {
  const int want = 1 + static_cast<int>(how);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = std::max(stopping_, want);
    if (!stopped_) transport_->wake();
  }
  std::lock_guard<std::mutex> once(joinMutex_);
  if (thread_.joinable()) thread_.join();
  std::deque<OpPtr> late;  // posted after the thread's last intake
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopped_ = true;
    late.swap(inbox_);
  }
  for (auto& op : late) complete(std::move(op), "the process group was stopped");
  transport_.reset();
}

void P2PEngine::complete(OpPtr op, const std::string& error, bool timedOut,
                         bool memoryInUse) {
  op->result.error = error;
  op->result.timedOut = timedOut;
  if (op->req.done) op->req.done(op->result);
  if (memoryInUse) graveyard_.push_back(std::move(op));
}

// ---------------------------------------------------------------------------------
// The progress thread

void P2PEngine::loop() {
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
        std::lock_guard<std::mutex> lock(mutex_);
        stopping = stopping_;
      }
      if (stopping == 1 + static_cast<int>(Stop::kAbort)) {
        failAll("aborted (ProcessGroup abort() was called) while ");
        return;
      }
      if (stopping != 0) {
        if (!pending()) return;
        if (now - lastMove_ >= kShutdownGrace) {
          failAll("the process group was shut down (destroy_process_group) while ");
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
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = 1 + static_cast<int>(Stop::kAbort);
  }
}

bool P2PEngine::intake() {
  std::deque<OpPtr> in;
  {
    std::lock_guard<std::mutex> lock(mutex_);
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

bool P2PEngine::progressPeer(int q) {
  const bool sent = progressSends(q);
  const bool received = progressRecvs(q);
  return sent || received;
}

bool P2PEngine::progressSends(int q) {
  Peer& p = peers_[q];
  bool moved = false;
  while (!p.sendQueue.empty()) {
    Op& op = *p.sendQueue.front();
    if (!op.headerHanded) {
      if (!transport_->trySend(q, &op.header, sizeof(Header))) break;
      op.headerHanded = true;
      ++p.handed;
      moved = true;
    }
    while (op.handed < op.req.bytes) {
      const size_t n = std::min(segmentBytes_, op.req.bytes - op.handed);
      if (!transport_->trySend(q, static_cast<const char*>(op.req.buf) + op.handed, n)) break;
      op.handed += n;
      ++p.handed;
      moved = true;
    }
    if (op.handed < op.req.bytes) break;  // the peer's mailbox is full
    op.doneAt = p.handed;
    p.inflight.push_back(std::move(p.sendQueue.front()));
    p.sendQueue.pop_front();
  }
  if (!p.inflight.empty()) {
    const uint64_t done = transport_->sendsDone(q);
    while (!p.inflight.empty() && p.inflight.front()->doneAt <= done) {
      OpPtr op = std::move(p.inflight.front());
      p.inflight.pop_front();
      complete(std::move(op));
      moved = true;
    }
  }
  if (moved) p.outMoved = Clock::now();
  return moved;
}

bool P2PEngine::progressRecvs(int q) {
  Peer& p = peers_[q];
  bool moved = false;
  for (;;) {
    if (!p.inMessage) {
      if (!p.headerPosted) {
        if (!transport_->tryPostRecv(q, p.headerBuf.get(), sizeof(Header))) break;
        p.headerPosted = true;
      }
      const void* view = transport_->recvView(q);
      if (view == nullptr) break;
      Header h;
      std::memcpy(&h, view, sizeof(h));
      transport_->releaseRecv(q);
      p.headerPosted = false;
      moved = true;
      onHeader(q, h);  // matched by the lateness of before it came (recvLate)
      p.inMoved = Clock::now();
      continue;
    }
    // The payload, segment by segment, into p.dst (or dropped).
    while (p.posted < p.in.bytes &&
           p.posted - p.received < kWindowSegments * segmentBytes_) {
      const size_t n = std::min<uint64_t>(segmentBytes_, p.in.bytes - p.posted);
      if (!transport_->tryPostRecv(q, p.dst ? p.dst + p.posted : nullptr, n)) break;
      p.posted += n;
    }
    const void* view = transport_->recvView(q);
    if (view == nullptr) break;
    const size_t n = std::min<uint64_t>(segmentBytes_, p.in.bytes - p.received);
    if (p.dst != nullptr && view != p.dst + p.received) {
      std::memcpy(p.dst + p.received, view, n);
    }
    transport_->releaseRecv(q);
    p.received += n;
    p.inMoved = Clock::now();
    moved = true;
    if (p.received == p.in.bytes) messageDone(q);
  }
  return moved;
}

void P2PEngine::onHeader(int q, const Header& h) {
  Peer& p = peers_[q];
  if (h.magic != kMagic) {
    throw PeerError(q, RC_STR("rank ", q, " sent a malformed point-to-point header (message ",
                              p.in.number + 1, "); its stream is lost"));
  }
  p.in = h;
  p.posted = p.received = 0;
  p.dst = nullptr;
  p.inMessage = true;
  if (OpPtr op = takeRecv(q, h.channel, h.tag)) {
    op->result.source = q;
    if (op->req.anySize) {
      op->result.data.resize(h.bytes);
      p.dst = op->result.data.data();
      p.op = std::move(op);
    } else if (op->req.bytes != h.bytes) {
      const std::string why = mismatchText(q, h.bytes, h.tag, op->req.bytes);
      complete(std::move(op), why);  // its payload is read and dropped
    } else {
      p.dst = static_cast<char*>(op->req.buf);
      p.op = std::move(op);
    }
  } else {
    auto s = std::make_shared<Stashed>();
    s->source = q;
    s->channel = h.channel;
    s->tag = h.tag;
    s->bytes = h.bytes;
    s->arrival = ++arrivals_;
    s->arrived = Clock::now();
    s->data.reset(new char[h.bytes]);
    p.dst = s->data.get();
    p.filling = s;
    p.stashed.push_back(std::move(s));
  }
  if (h.bytes == 0) messageDone(q);
}

void P2PEngine::messageDone(int q) {
  Peer& p = peers_[q];
  p.inMessage = false;
  p.dst = nullptr;
  if (p.op) complete(std::move(p.op));
  if (p.filling) {
    std::shared_ptr<Stashed> s = std::move(p.filling);
    p.filling.reset();
    s->complete = true;
    if (s->waiter) deliverStashed(std::move(s->waiter), *s);
  }
}

// ---------------------------------------------------------------------------------
// Timeouts and failures

bool P2PEngine::expire(Clock::time_point now) {
  bool moved = false;
  auto late = [](const Op& op, Clock::time_point since, Clock::time_point now) {
    return now - std::max(op.posted, since) >= op.req.timeout;
  };
  for (auto it = recvs_.begin(); it != recvs_.end();) {
    if (recvLate(**it, now)) {
      OpPtr o = std::move(*it);
      it = recvs_.erase(it);
      const std::string why = RC_STR("Timed out after ", o->req.timeout.count(), " ms ",
                                     o->describe());
      complete(std::move(o), why, /*timedOut=*/true);
      moved = true;
    } else {
      ++it;
    }
  }
  for (int q = 0; q < size_; ++q) {
    Peer& p = peers_[q];
    if (q == rank_) continue;
    if (p.op && late(*p.op, p.inMoved, now)) {
      const std::string why = RC_STR("Timed out after ", p.op->req.timeout.count(),
                                     " ms receiving message ", p.in.number, " from rank ", q,
                                     " (tag ", p.in.tag, "): ", p.received, " of ", p.in.bytes,
                                     " bytes arrived");
      p.dst = nullptr;  // the rest is dropped; what gloo has in flight lands in kept memory
      complete(std::move(p.op), why, true, /*memoryInUse=*/true);
      moved = true;
    }
    if (p.filling && p.filling->waiter && late(*p.filling->waiter, p.inMoved, now)) {
      const std::string why = RC_STR("Timed out after ", p.filling->waiter->req.timeout.count(),
                                     " ms receiving message ", p.in.number, " from rank ", q,
                                     " (tag ", p.in.tag, "): ", p.received, " of ", p.in.bytes,
                                     " bytes arrived");
      complete(std::move(p.filling->waiter), why, true);
      moved = true;
    }
    for (auto* queue : {&p.inflight, &p.sendQueue}) {
      for (auto it = queue->begin(); it != queue->end();) {
        if (!late(**it, p.outMoved, now)) {
          ++it;
          continue;
        }
        OpPtr o = std::move(*it);
        it = queue->erase(it);
        const bool cut = queue == &p.sendQueue && o->headerHanded;
        const bool inUse = queue == &p.inflight || o->headerHanded;
        const std::string why = RC_STR("Timed out after ", o->req.timeout.count(), " ms ",
                                       o->describe(), ": ", o->handed, " of ", o->req.bytes,
                                       " bytes handed over (message ", o->header.number, ")");
        complete(std::move(o), why, true, inUse);
        moved = true;
        if (cut) {
          // The peer was promised bytes that will never come: nothing after this
          // can be sent to it in step.
          p.outBroken = RC_STR("an earlier send to rank ", q, " was cut mid-message (", why, ")");
          while (!p.sendQueue.empty()) {
            OpPtr rest = std::move(p.sendQueue.front());
            p.sendQueue.pop_front();
            complete(std::move(rest), p.outBroken);
          }
          break;
        }
      }
    }
  }
  return moved;
}

P2PEngine::Clock::time_point P2PEngine::nextDeadline() const {
  auto until = Clock::time_point::max();
  auto consider = [&](const Op& op, Clock::time_point since) {
    until = std::min(until, std::max(op.posted, since) + op.req.timeout);
  };
  for (const auto& op : recvs_) {
    const int q = op->req.peer;
    // As recvLate().
    consider(*op, (q >= 0 && q != rank_) ? peers_[q].inMoved : op->posted);
  }
  for (int q = 0; q < size_; ++q) {
    const Peer& p = peers_[q];
    if (p.op) consider(*p.op, p.inMoved);
    if (p.filling && p.filling->waiter) consider(*p.filling->waiter, p.inMoved);
    for (const auto& op : p.sendQueue) consider(*op, p.outMoved);
    for (const auto& op : p.inflight) consider(*op, p.outMoved);
  }
  return until;
}

bool P2PEngine::recvLate(const Op& op, Clock::time_point now) const {
  // Waiting behind a long message from the same peer is progress.
  const int q = op.req.peer;
  const auto since = (q >= 0 && q != rank_) ? std::max(op.posted, peers_[q].inMoved) : op.posted;
  return now - since >= op.req.timeout;
}

bool P2PEngine::pending() const {
  if (!recvs_.empty()) return true;
  for (const auto& p : peers_) {
    if (!p.sendQueue.empty() || !p.inflight.empty() || p.op ||
        (p.filling && p.filling->waiter)) {
      return true;
    }
  }
  return false;
}

bool P2PEngine::anySourceHopeless() const {
  if (size_ < 2) return false;
  for (int q = 0; q < size_; ++q) {
    if (q != rank_ && peers_[q].failed.empty()) return false;
  }
  return true;
}

void P2PEngine::failPeer(int q, const std::string& why, bool timedOut) {
  Peer& p = peers_[q];
  if (!p.failed.empty()) return;
  p.failed = why;
  p.failedTimedOut = timedOut;
  while (!p.sendQueue.empty()) {
    OpPtr op = std::move(p.sendQueue.front());
    p.sendQueue.pop_front();
    const bool inUse = op->headerHanded;
    complete(std::move(op), why, timedOut, inUse);
  }
  while (!p.inflight.empty()) {
    OpPtr op = std::move(p.inflight.front());
    p.inflight.pop_front();
    complete(std::move(op), why, timedOut, /*memoryInUse=*/true);
  }
  if (p.op) complete(std::move(p.op), why, timedOut, /*memoryInUse=*/true);
  if (p.filling) {
    if (p.filling->waiter) complete(std::move(p.filling->waiter), why, timedOut);
    p.filling.reset();
  }
  p.inMessage = false;
  p.dst = nullptr;
  // Messages that arrived whole stay receivable; a partial one is gone.
  p.stashed.erase(std::remove_if(p.stashed.begin(), p.stashed.end(),
                                 [](const auto& s) { return !s->complete; }),
                  p.stashed.end());
  const bool hopeless = anySourceHopeless();
  for (auto it = recvs_.begin(); it != recvs_.end();) {
    const int from = (*it)->req.peer;
    if (from == q || (from == kAnySource && hopeless)) {
      OpPtr op = std::move(*it);
      it = recvs_.erase(it);
      complete(std::move(op), from == q ? why : "every other rank failed: " + why, timedOut);
    } else {
      ++it;
    }
  }
}

void P2PEngine::failAll(const std::string& whilePrefix) {
  auto fail = [&](OpPtr op, bool inUse) {
    const std::string why = whilePrefix + op->describe();
    complete(std::move(op), why, false, inUse);
  };
  while (!recvs_.empty()) {
    OpPtr op = std::move(recvs_.front());
    recvs_.pop_front();
    fail(std::move(op), false);
  }
  for (auto& p : peers_) {
    while (!p.sendQueue.empty()) {
      OpPtr op = std::move(p.sendQueue.front());
      p.sendQueue.pop_front();
      const bool inUse = op->headerHanded;
      fail(std::move(op), inUse);
    }
    while (!p.inflight.empty()) {
      OpPtr op = std::move(p.inflight.front());
      p.inflight.pop_front();
      fail(std::move(op), true);
    }
    if (p.op) fail(std::move(p.op), true);
    if (p.filling && p.filling->waiter) fail(std::move(p.filling->waiter), false);
  }
}

}  // namespace ringcoll
