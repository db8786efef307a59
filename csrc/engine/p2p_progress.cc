// The engine's progress on one peer's link: sends handed to the transport in
// order, headers received and matched, payloads received segment by segment.
#include "engine/p2p.h"

#include <algorithm>
#include <cstring>

#include "engine/p2p_state.h"

namespace ringcoll {

using namespace p2p_detail;

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

}  // namespace ringcoll
