#include "transport/stream_transport.h"

#include <algorithm>
#include <thread>

#include "common/errors.h"

namespace ringcoll {

StreamTransport::StreamTransport(int rank, int size, size_t slotBytes)
    : rank_(rank), size_(size), slotBytes_(slotBytes), postedSends_(size, 0),
      flushedSends_(size, 0), recvs_(size), freeStaging_(size) {}

void StreamTransport::releaseStaging() {
  for (void* p : staging_) freeStaging(p);
  staging_.clear();
  for (auto& pool : freeStaging_) pool.clear();
}

bool StreamTransport::trySend(int peer, const void* src, size_t bytes) {
  batch_.push_back(Post{true, peer, const_cast<void*>(src), bytes});
  ++postedSends_[peer];
  return true;
}

bool StreamTransport::tryPostRecv(int peer, void* dst, size_t bytes) {
  RC_ASSERT(bytes <= slotBytes_, "message of ", bytes, " bytes > slot ", slotBytes_);
  bool staged = false;
  if (dst == nullptr) {
    auto& pool = freeStaging_[peer];
    if (pool.empty()) {
      void* buf = allocStaging(slotBytes_);
      staging_.push_back(buf);
      pool.push_back(buf);
    }
    dst = pool.back();
    pool.pop_back();
    staged = true;
  }
  batch_.push_back(Post{false, peer, dst, bytes});
  recvs_[peer].push_back(Recv{dst, staged, nullptr});
  return true;
}

void StreamTransport::flush() {
  if (batch_.empty()) return;
  transferWaits(markCompute());
  enqueueBatch(batch_);
  MarkerPtr done = markTransfer();
  for (auto& q : recvs_) {
    for (auto& r : q) {
      if (!r.done) r.done = done;
    }
  }
  for (int peer = 0; peer < size_; ++peer) flushedSends_[peer] = postedSends_[peer];
  last_ = done;
  batch_.clear();
}

const void* StreamTransport::recvView(int peer) {
  auto& q = recvs_[peer];
  if (q.empty() || !q.front().done) return nullptr;
  Recv& r = q.front();
  if (!r.waited) {
    joinCompute(r.done);
    r.waited = true;
  }
  return r.ptr;
}

void StreamTransport::releaseRecv(int peer) {
  auto& q = recvs_[peer];
  RC_ASSERT(!q.empty(), "release without a receive from rank ", peer);
  // The next receive into a staging buffer is enqueued by a later flush, which
  // waits for compute, where this one was read.
  if (q.front().staged) freeStaging_[peer].push_back(q.front().ptr);
  q.pop_front();
}

void StreamTransport::fence() {
  if (last_) joinCompute(last_);
}

void StreamTransport::joinCompute(const MarkerPtr& m) {
  computeWaits(m);
  if (joinHook_) joinHook_();
}

void StreamTransport::idle(uint32_t, Clock::time_point until) {
  // The executor only idles here if a plan cannot progress, which is a bug; sleep
  // a little so that it reaches its timeout without spinning a core.
  std::this_thread::sleep_until(std::min(until, Clock::now() + std::chrono::milliseconds(1)));
}

}  // namespace ringcoll
