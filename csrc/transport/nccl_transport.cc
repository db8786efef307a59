#include "transport/nccl_transport.h"

#include <thread>

#include "common/cuda_check.h"

namespace ringcoll {

struct NcclTransport::Event {
  cudaEvent_t ev = nullptr;
  // Destroying a recorded event is allowed: its resources go once it completes.
  ~Event() {
    if (ev) cudaEventDestroy(ev);
  }
};

NcclTransport::NcclTransport(NcclComm& comm, int rank, int size, cudaStream_t compute,
                             size_t slotBytes)
    : comm_(comm), rank_(rank), size_(size), compute_(compute), slotBytes_(slotBytes),
      postedSends_(size, 0), flushedSends_(size, 0), recvs_(size), freeStaging_(size) {
  RC_CUDA_CHECK(cudaStreamCreateWithFlags(&transfer_, cudaStreamNonBlocking));
}

NcclTransport::~NcclTransport() {
  // No throw in a destructor. Device memory is freed synchronously (cudaFree
  // waits for the device), so no transfer into it is still running.
  for (void* p : staging_) cudaFree(p);
  if (transfer_) cudaStreamDestroy(transfer_);
}

bool NcclTransport::trySend(int peer, const void* src, size_t bytes) {
  batch_.push_back(Post{true, peer, const_cast<void*>(src), bytes});
  ++postedSends_[peer];
  return true;
}

bool NcclTransport::tryPostRecv(int peer, void* dst, size_t bytes) {
  RC_ASSERT(bytes <= slotBytes_, "message of ", bytes, " bytes > slot ", slotBytes_);
  bool staged = false;
  if (dst == nullptr) {
    auto& pool = freeStaging_[peer];
    if (pool.empty()) {
      void* buf = nullptr;
      RC_CUDA_CHECK(cudaMalloc(&buf, slotBytes_));
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

void NcclTransport::flush() {
  if (batch_.empty()) return;
  // The transfer stream waits for everything on compute so far.
  auto ready = std::make_shared<Event>();
  RC_CUDA_CHECK(cudaEventCreateWithFlags(&ready->ev, cudaEventDisableTiming));
  RC_CUDA_CHECK(cudaEventRecord(ready->ev, compute_));
  RC_CUDA_CHECK(cudaStreamWaitEvent(transfer_, ready->ev, 0));
  const int first = batch_.front().peer;
  {
    // Under the communicator's lock: the watchdog cannot abort it half-way through
    // a batch, and an aborted communicator is never called.
    auto lk = comm_.lock();
    ncclComm_t comm = comm_.get("enqueuing transfers");
    RC_NCCL_CHECK(ncclGroupStart(), first);
    for (const Post& p : batch_) {
      if (p.send) {
        RC_NCCL_CHECK(ncclSend(p.ptr, p.bytes, ncclUint8, p.peer, comm, transfer_), p.peer);
      } else {
        RC_NCCL_CHECK(ncclRecv(p.ptr, p.bytes, ncclUint8, p.peer, comm, transfer_), p.peer);
      }
    }
    RC_NCCL_CHECK(ncclGroupEnd(), first);
    // Non-blocking: the batch is on the stream once the communicator is ready (the
    // first batch to a peer also connects to it).
    comm_.waitReady(RC_STR("enqueuing transfers with rank ", first), first);
  }
  auto done = std::make_shared<Event>();
  RC_CUDA_CHECK(cudaEventCreateWithFlags(&done->ev, cudaEventDisableTiming));
  RC_CUDA_CHECK(cudaEventRecord(done->ev, transfer_));
  for (auto& q : recvs_) {
    for (auto& r : q) {
      if (!r.done) r.done = done;
    }
  }
  for (int peer = 0; peer < size_; ++peer) flushedSends_[peer] = postedSends_[peer];
  last_ = done;
  batch_.clear();
}

const void* NcclTransport::recvView(int peer) {
  auto& q = recvs_[peer];
  if (q.empty() || !q.front().done) return nullptr;
  Recv& r = q.front();
  if (!r.waited) {
    RC_CUDA_CHECK(cudaStreamWaitEvent(compute_, r.done->ev, 0));
    r.waited = true;
  }
  return r.ptr;
}

void NcclTransport::releaseRecv(int peer) {
  auto& q = recvs_[peer];
  RC_ASSERT(!q.empty(), "release without a receive from rank ", peer);
  // The next receive into a staging buffer is enqueued by a later flush, which
  // waits for compute, where this one was read.
  if (q.front().staged) freeStaging_[peer].push_back(q.front().ptr);
  q.pop_front();
}

void NcclTransport::fence() {
  if (last_) RC_CUDA_CHECK(cudaStreamWaitEvent(compute_, last_->ev, 0));
}

void NcclTransport::idle(uint32_t, Clock::time_point until) {
  // The executor only idles here if a plan cannot progress, which is a bug; sleep
  // a little so that it reaches its timeout without spinning a core.
  std::this_thread::sleep_until(std::min(until, Clock::now() + std::chrono::milliseconds(1)));
}

}  // namespace ringcoll
