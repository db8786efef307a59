// The engine's timeouts and failures: which requests are late, which failed
// with their peer, and what is left to fail when the engine stops.
#include "engine/p2p.h"

#include <algorithm>
#include <cstring>

#include "engine/p2p_state.h"

namespace ringcoll {

using namespace p2p_detail;

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
