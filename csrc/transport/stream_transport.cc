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
  recvs_[peer].push_back(Recv{dst, staged});
  return true;
}

bool StreamTransport::consumesPending() const {
  for (const auto& q : recvs_) {
    // Flushed receives are at the front of each queue (posts are appended).
    if (!q.empty() && q.front().flushed) return true;
  }
  return false;
}

void StreamTransport::flush() {
  if (batch_.empty()) return;
  awaitRoom();
  const bool onCompute = !consumesPending();
  MarkerPtr done;
  if (onCompute) {
    // Batches run in flush order whichever queue they are on.
    if (last_ && !lastJoined_) joinCompute(last_);
    {
      StreamStats::Timer t(stats_, StreamStats::kBatch);
      enqueueBatch(batch_, /*onCompute=*/true);
    }
    count(StreamStats::kBatchesOnCompute);
  } else {
    {
      StreamStats::Timer t(stats_, StreamStats::kMarker);
      transferWaits(markCompute());
    }
    count(StreamStats::kMarkers);
    count(StreamStats::kStreamWaits);
    {
      StreamStats::Timer t(stats_, StreamStats::kBatch);
      enqueueBatch(batch_, /*onCompute=*/false);
    }
    {
      StreamStats::Timer t(stats_, StreamStats::kMarker);
      done = markTransfer();
    }
    count(StreamStats::kMarkers);
    last_ = done;
    lastJoined_ = false;
  }
  ++flushed_;
  count(StreamStats::kBatches);
  count(StreamStats::kPosts, batch_.size());
  if (done && maxBatches_ > 0) {  // probes are read only under the bound (awaitRoom)
    probes_.push_back(Probe{flushed_, done});
    lastProbe_ = flushed_;
  } else if (maxBatches_ > 0 && flushed_ - lastProbe_ >= kProbeEvery) {
    {
      StreamStats::Timer t(stats_, StreamStats::kMarker);
      probes_.push_back(Probe{flushed_, markCompute()});
    }
    count(StreamStats::kMarkers);
    lastProbe_ = flushed_;
  }
  for (auto& q : recvs_) {
    for (auto& r : q) {
      if (r.flushed) continue;
      r.flushed = true;
      r.done = done;
      // On `compute`, work enqueued after the batch is ordered after it already;
      // the reducer's large kernels re-read the stop word behind it (join hook).
      r.waited = onCompute;
    }
  }
  if (onCompute && joinHook_) joinHook_();
  for (int peer = 0; peer < size_; ++peer) flushedSends_[peer] = postedSends_[peer];
  batch_.clear();
}

void StreamTransport::noteCompleted() {
  while (!probes_.empty() && reached(probes_.front().marker)) {
    completed_ = probes_.front().batches;
    probes_.pop_front();
  }
}

void StreamTransport::awaitRoom() {
  if (maxBatches_ == 0 || flushed_ - completed_ < maxBatches_) return;
  noteCompleted();
  if (flushed_ - completed_ < maxBatches_) return;
  count(StreamStats::kHostWaits);
  // The newest batches may have no marker yet (on `compute`, between probes).
  if (lastProbe_ < flushed_) {
    probes_.push_back(Probe{flushed_, markCompute()});
    count(StreamStats::kMarkers);
    lastProbe_ = flushed_;
  }
  for (;;) {
    const std::string why = aborted();
    if (!why.empty()) {
      throw PeerError(-1, RC_STR(why, " while this rank waited for room to enqueue (",
                                 flushed_ - completed_, " batches in flight)"));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    noteCompleted();
    if (flushed_ - completed_ < maxBatches_) return;
  }
}

const void* StreamTransport::recvView(int peer) {
  auto& q = recvs_[peer];
  if (q.empty() || !q.front().flushed) return nullptr;
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
  if (last_ && !lastJoined_) joinCompute(last_);
}

void StreamTransport::joinCompute(const MarkerPtr& m) {
  {
    StreamStats::Timer t(stats_, StreamStats::kMarker);
    computeWaits(m);
  }
  count(StreamStats::kStreamWaits);
  // Markers of `transfer` complete in order: waiting for the last one covers all.
  if (m == last_) lastJoined_ = true;
  if (joinHook_) joinHook_();
}

void StreamTransport::idle(uint32_t, Clock::time_point until) {
  // The executor only idles here if a plan cannot progress, which is a bug; sleep
  // a little so that it reaches its timeout without spinning a core.
  std::this_thread::sleep_until(std::min(until, Clock::now() + std::chrono::milliseconds(1)));
}

}  // namespace ringcoll
