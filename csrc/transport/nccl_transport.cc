#include "transport/nccl_transport.h"

#include "common/cuda_check.h"

namespace ringcoll {

namespace {
// An event recorded on `from` that `to` waits for. Destroying a recorded event is
// allowed: its resources are released once the event completes.
void streamWaitsFor(cudaStream_t to, cudaStream_t from) {
  cudaEvent_t ev;
  RC_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  RC_CUDA_CHECK(cudaEventRecord(ev, from));
  RC_CUDA_CHECK(cudaStreamWaitEvent(to, ev, 0));
  RC_CUDA_CHECK(cudaEventDestroy(ev));
}
}  // namespace

// Holds the event recorded right after this exchange's NCCL group, so wait()
// orders `compute` after this exchange only, not after later ones already started.
class NcclTransport::NcclPending final : public Transport::Pending {
 public:
  NcclPending(cudaStream_t compute, cudaEvent_t done) : compute_(compute), done_(done) {}
  ~NcclPending() override {
    if (done_) cudaEventDestroy(done_);
  }
  void wait() override {
    if (!done_) return;
    RC_CUDA_CHECK(cudaStreamWaitEvent(compute_, done_, 0));
  }

 private:
  cudaStream_t compute_;
  cudaEvent_t done_;
};

NcclTransport::NcclTransport(ncclComm_t comm, int rank, int size, cudaStream_t compute)
    : comm_(comm), rank_(rank), size_(size), compute_(compute) {
  RC_CUDA_CHECK(cudaStreamCreateWithFlags(&transfer_, cudaStreamNonBlocking));
}

NcclTransport::~NcclTransport() {
  if (transfer_) cudaStreamDestroy(transfer_);  // no throw in a destructor
}

std::unique_ptr<Transport::Pending> NcclTransport::start(int toRank, const void* sendBuf,
                                                         size_t sendBytes, int fromRank,
                                                         void* recvBuf, size_t recvBytes) {
  const bool send = toRank >= 0 && sendBytes > 0;
  const bool recv = fromRank >= 0 && recvBytes > 0;
  if (!send && !recv) return std::make_unique<NcclPending>(compute_, nullptr);
  streamWaitsFor(transfer_, compute_);
  const int peer = recv ? fromRank : toRank;
  RC_NCCL_CHECK(ncclGroupStart(), peer);
  if (send) {
    RC_NCCL_CHECK(ncclSend(sendBuf, sendBytes, ncclUint8, toRank, comm_, transfer_), toRank);
  }
  if (recv) {
    RC_NCCL_CHECK(ncclRecv(recvBuf, recvBytes, ncclUint8, fromRank, comm_, transfer_),
                  fromRank);
  }
  RC_NCCL_CHECK(ncclGroupEnd(), peer);
  cudaEvent_t done;
  RC_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  RC_CUDA_CHECK(cudaEventRecord(done, transfer_));
  return std::make_unique<NcclPending>(compute_, done);
}

}  // namespace ringcoll
