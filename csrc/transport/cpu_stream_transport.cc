#include "transport/cpu_stream_transport.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <new>
#include <stdexcept>
#include <thread>

#include "common/errors.h"

namespace ringcoll {

struct CpuStreamTransport::HostMarker : StreamTransport::Marker {
  explicit HostMarker(CpuStream::MarkerPtr m) : m(std::move(m)) {}
  CpuStream::MarkerPtr m;
};

CpuStreamTransport::CpuStreamTransport(Transport& inner, CpuStream& compute,
                                       size_t slotBytes, uint32_t maxDelayUs, size_t failAfter)
    : StreamTransport(inner.rank(), inner.size(), slotBytes),
      inner_(inner),
      compute_(compute),
      failAfter_(failAfter),
      transfer_("transfer", maxDelayUs) {}

CpuStreamTransport::~CpuStreamTransport() {
  // The owner drained or aborted both streams; nothing reads the staging any more
  // once the transfer stream stopped.
  transfer_.abort();
  transfer_.sync();
  releaseStaging();
}

StreamTransport::MarkerPtr CpuStreamTransport::wrap(CpuStream::MarkerPtr m) {
  return std::make_shared<HostMarker>(std::move(m));
}

void CpuStreamTransport::transferWaits(const MarkerPtr& m) {
  transfer_.waitFor(static_cast<HostMarker&>(*m).m);
}

void CpuStreamTransport::computeWaits(const MarkerPtr& m) {
  // As CpuStream::waitFor. Behind a batch that failed, as behind an NCCL kernel
  // stuck on a dead peer, the compute stream goes on only once the transfers are
  // aborted, and then runs what is queued: the backend set the stop word before it
  // aborted them, so the reducer's work skips (reduce/reducer.h), exactly as on a
  // GPU, where nothing else stops those kernels.
  compute_.enqueue([this, m = static_cast<HostMarker&>(*m).m] {
    while (!m->done() || (m->failed() && !transfer_.aborted())) {
      if (compute_.aborted()) return;
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  });
}

void CpuStreamTransport::enqueueBatch(const std::vector<Post>& batch, bool onCompute) {
  if (++batches_ == failAfter_) {
    throw std::runtime_error(RC_STR("RINGCOLL_STREAM_FAIL_AFTER=", failAfter_,
                                    ": the injected failure of this rank's batch ", batches_));
  }
  if (onCompute) {
    compute_.enqueue([this, batch] { runBatchOnCompute(batch); });
    return;
  }
  transfer_.enqueue([this, batch] {
    try {
      runBatch(batch);
    } catch (...) {
      fail(std::current_exception());
      throw;  // fails the transfer stream: its later batches are skipped
    }
  });
}

bool CpuStreamTransport::reached(const MarkerPtr& m) {
  return static_cast<HostMarker&>(*m).m->done();
}

void CpuStreamTransport::fail(std::exception_ptr e) {
  std::lock_guard<std::mutex> lock(failureMutex_);
  if (failure_.empty()) failure_ = describe(e);
}

std::string CpuStreamTransport::failure() const {
  std::lock_guard<std::mutex> lock(failureMutex_);
  return failure_;
}

void CpuStreamTransport::runBatchOnCompute(const std::vector<Post>& batch) {
  // After a failure it is skipped, as an NCCL kernel on a communicator in error;
  // either way what is queued behind it waits for the abort. After an abort,
  // runBatch throws before it touches the host transport.
  if (failure().empty() && !transfer_.error()) {
    try {
      runBatch(batch);
      return;
    } catch (...) {
      fail(std::current_exception());
    }
  }
  while (!transfer_.aborted() && !compute_.aborted()) {
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

void* CpuStreamTransport::allocStaging(size_t bytes) {
  return ::operator new(bytes ? bytes : 1, std::align_val_t{64});
}

void CpuStreamTransport::freeStaging(void* p) { ::operator delete(p, std::align_val_t{64}); }

void CpuStreamTransport::runBatch(const std::vector<Post>& batch) {
  // Aborted: the host transport may be gone already (abort() says why); nothing
  // below may touch it (a batch on `compute`, which is not aborted, comes here
  // after the backend freed it).
  if (transfer_.aborted()) {
    throw PeerError(-1, "the transfer stream was aborted before this batch ran");
  }
  {
    // After a failure on `compute`, as on an NCCL communicator in error.
    const std::string earlier = failure();
    if (!earlier.empty()) throw PeerError(-1, earlier);
  }
  // Posts to one peer go to the host transport in batch order (its messages pair
  // in post order); posts to different peers do not wait for each other.
  const int p = size();
  std::vector<uint8_t> posted(batch.size(), 0);
  std::vector<std::deque<size_t>> arriving(p);  // per peer: posted receives, oldest first
  size_t recvs = 0, recvsDone = 0;
  std::vector<uint64_t> sendTarget(p, 0);
  for (int peer = 0; peer < p; ++peer) {
    if (peer != rank()) sendTarget[peer] = inner_.sendsDone(peer);
  }
  for (const Post& q : batch) {
    if (q.send) ++sendTarget[q.peer]; else ++recvs;
  }
  for (;;) {
    // Aborted: the host transport may be gone already (abort() says why).
    if (transfer_.aborted()) {
      throw PeerError(-1, "the transfer stream was aborted before this batch ran");
    }
    const uint32_t token = inner_.idleToken();
    bool moved = false;
    std::vector<uint8_t> blocked(p, 0);  // a post to this peer is still unposted
    for (size_t i = 0; i < batch.size(); ++i) {
      const Post& q = batch[i];
      if (posted[i] || blocked[q.peer]) continue;
      const bool ok = q.send ? inner_.trySend(q.peer, q.ptr, q.bytes)
                             : inner_.tryPostRecv(q.peer, nullptr, q.bytes);
      if (!ok) {
        blocked[q.peer] = 1;
        continue;
      }
      posted[i] = 1;
      moved = true;
      if (!q.send) arriving[q.peer].push_back(i);
    }
    // Arrived receives, oldest first per peer, copied into place.
    for (int peer = 0; peer < p; ++peer) {
      while (!arriving[peer].empty()) {
        const Post& q = batch[arriving[peer].front()];
        const void* view = inner_.recvView(peer);
        if (!view) break;
        std::memcpy(q.ptr, view, q.bytes);
        inner_.releaseRecv(peer);
        arriving[peer].pop_front();
        ++recvsDone;
        moved = true;
      }
    }
    bool sendsLeft = false;
    int waiting = -1;
    for (int peer = 0; peer < p; ++peer) {
      if (peer != rank() && inner_.sendsDone(peer) < sendTarget[peer]) {
        sendsLeft = true;
        waiting = peer;
      }
    }
    const bool allPosted = std::all_of(posted.begin(), posted.end(), [](uint8_t b) { return b; });
    if (allPosted && !sendsLeft && recvsDone == recvs) break;
    for (int peer = 0; peer < p; ++peer) {
      if (!arriving[peer].empty()) waiting = peer;
    }
    waitPeer_.store(waiting, std::memory_order_relaxed);
    if (transfer_.aborted()) {
      throw PeerError(waiting, "the transfer stream was aborted while a batch waited");
    }
    // The host transport returns at once when something moves and checks its
    // peers' liveness between slices; abort() is seen at the next slice.
    if (!moved) inner_.idle(token, Clock::now() + kAbortPoll);
  }
  waitPeer_.store(-1, std::memory_order_relaxed);
}

}  // namespace ringcoll
