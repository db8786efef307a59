// GPU transport: ncclSend/ncclRecv between the ranks of one communicator.
//
// Two streams: `compute` (the backend's comm stream, where the reducer's kernels
// run) and an internal transfer stream. start() makes the transfer stream wait for
// everything already on `compute` (the block being sent was produced there, and the
// staging slot being received into was last read there), then enqueues one
// ncclGroupStart / ncclSend / ncclRecv / ncclGroupEnd. Pending::wait() makes
// `compute` wait for that transfer; it never blocks the host. So the executor's
// "start segment k+1, then reduce segment k" overlaps the transfer of k+1 with the
// reduction of k on the GPU, with no host synchronisation inside a collective.
//
// No torch here: the communicator is created by the backend (unique id through
// the c10d store) and handed over.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "transport/transport.h"

namespace ringcoll {

class NcclTransport final : public Transport {
 public:
  NcclTransport(ncclComm_t comm, int rank, int size, cudaStream_t compute);
  ~NcclTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "nccl"; }
  cudaStream_t transferStream() const { return transfer_; }

  std::unique_ptr<Pending> start(int toRank, const void* sendBuf, size_t sendBytes,
                                 int fromRank, void* recvBuf, size_t recvBytes) override;

 private:
  class NcclPending;
  ncclComm_t comm_;
  int rank_;
  int size_;
  cudaStream_t compute_;
  cudaStream_t transfer_ = nullptr;
};

}  // namespace ringcoll
