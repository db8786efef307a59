#include "transport/nccl_transport.h"

#include "common/cuda_check.h"
#include "common/errors.h"

namespace ringcoll {

struct NcclTransport::Event : StreamTransport::Marker {
  Event(std::shared_ptr<CudaEventPool> pool, cudaStream_t stream) : e(std::move(pool), stream) {}
  PooledEvent e;
};

NcclTransport::NcclTransport(NcclComm& comm, int rank, int size, cudaStream_t compute,
                             size_t slotBytes, Allocator allocator, bool connectAll)
    : StreamTransport(rank, size, slotBytes),
      comm_(comm),
      compute_(compute),
      events_(std::make_shared<CudaEventPool>()),
      allocator_(std::move(allocator)) {
  RC_CUDA_CHECK(cudaStreamCreateWithFlags(&transfer_, cudaStreamNonBlocking));
  if (connectAll) this->connectAll();
}

void NcclTransport::connectAll() {
  const int p = size();
  if (p < 2) return;
  connectBuf_ = allocStaging(2 * static_cast<size_t>(p));
  RC_CUDA_CHECK(cudaMemsetAsync(connectBuf_, 0, 2 * static_cast<size_t>(p), transfer_));
  char* out = static_cast<char*>(connectBuf_);
  char* in = out + p;
  auto lk = comm_.lock();
  ncclComm_t comm = comm_.get("connecting to the peers");
  RC_NCCL_CHECK(ncclGroupStart(), -1);
  try {
    for (int q = 0; q < p; ++q) {
      if (q == rank()) continue;
      RC_NCCL_CHECK(ncclSend(out + q, 1, ncclUint8, q, comm, transfer_), q);
      RC_NCCL_CHECK(ncclRecv(in + q, 1, ncclUint8, q, comm, transfer_), q);
    }
  } catch (...) {
    ncclGroupEnd();  // the thread's group depth back to 0 (enqueueBatch)
    throw;
  }
  RC_NCCL_CHECK(ncclGroupEnd(), -1);
  comm_.waitReady(lk, RC_STR("connecting to every peer of the group (rank ", rank(), " of ", p,
                             "; every rank connects at its first CUDA collective)"),
                  -1);
}

NcclTransport::~NcclTransport() {
  // No throw in a destructor. The communicator ended first (the backend's
  // CudaDevice), so no NCCL kernel writes the staging any more; the allocator
  // hands it out again in the comm stream's order, after what reads it there.
  releaseStaging();
  if (connectBuf_) freeStaging(connectBuf_);
  if (transfer_) cudaStreamDestroy(transfer_);
}

StreamTransport::MarkerPtr NcclTransport::record(cudaStream_t stream) {
  return std::make_shared<Event>(events_, stream);
}

bool NcclTransport::reached(const MarkerPtr& m) { return static_cast<Event&>(*m).e.reached(); }

std::string NcclTransport::aborted() {
  return comm_.aborted() ? "the NCCL communicator was aborted" : "";
}

void NcclTransport::transferWaits(const MarkerPtr& m) {
  RC_CUDA_CHECK(cudaStreamWaitEvent(transfer_, static_cast<Event&>(*m).e.ev, 0));
}

void NcclTransport::computeWaits(const MarkerPtr& m) {
  RC_CUDA_CHECK(cudaStreamWaitEvent(compute_, static_cast<Event&>(*m).e.ev, 0));
}

void NcclTransport::enqueueBatch(const std::vector<Post>& batch, bool onCompute) {
  const int first = batch.front().peer;
  cudaStream_t stream = onCompute ? compute_ : transfer_;
  // Under the communicator's lock: the watchdog cannot abort it half-way through
  // a batch, and an aborted communicator is never called.
  auto lk = comm_.lock();
  ncclComm_t comm = comm_.get("enqueuing transfers");
  RC_NCCL_CHECK(ncclGroupStart(), first);
  try {
    for (const Post& p : batch) {
      if (p.send) {
        RC_NCCL_CHECK(ncclSend(p.ptr, p.bytes, ncclUint8, p.peer, comm, stream), p.peer);
      } else {
        RC_NCCL_CHECK(ncclRecv(p.ptr, p.bytes, ncclUint8, p.peer, comm, stream), p.peer);
      }
    }
  } catch (...) {
    // Close the group even so: NCCL's group depth is per thread, and a group left
    // open would swallow every later NCCL call of this thread (ProcessGroupNCCL's
    // too). The caller marks the group broken and aborts the communicator.
    ncclGroupEnd();
    throw;
  }
  RC_NCCL_CHECK(ncclGroupEnd(), first);
  // Non-blocking: the batch is on the stream once the communicator is ready (after
  // connecting to a peer not connected yet: see connectAll). A blocking
  // communicator's ncclGroupEnd returned with it enqueued (or an error, thrown
  // above); a later asynchronous error is the watchdog's to see.
  if (!comm_.blocking()) {
    comm_.waitReady(lk, RC_STR("enqueuing transfers with rank ", first), first);
  }
}

void* NcclTransport::allocStaging(size_t bytes) {
  void* buf = allocator_.alloc(bytes);
  RC_ASSERT(buf != nullptr, "no staging buffer of ", bytes, " bytes");
  return buf;
}

void NcclTransport::freeStaging(void* p) { allocator_.free(p); }

}  // namespace ringcoll
