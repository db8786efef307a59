// GPU transport: ncclSend/ncclRecv between the ranks of one communicator, the CUDA
// glue of a stream-ordered transport (stream_transport.h, where the batching,
// ordering and staging logic lives and is tested on the CPU). Nothing here blocks
// the host beyond enqueuing. Staging buffers come from the allocator the backend
// gives (torch's caching allocator), not from raw cudaMalloc.
//
// `compute` is the backend's comm stream (where the reducer's kernels run); the
// transfer stream is this transport's own. Markers are CUDA events from a pool
// (common/cuda_events.h: made once, recorded again); a batch is one
// ncclGroupStart ... ncclGroupEnd on the stream StreamTransport chose; staging
// buffers are device memory.
//
// With `connectAll` (collectives), connections are made when the transport is
// created, to every peer at once (one byte each way in one group), so no
// collective's batch waits for a connection; the price is NCCL's per-peer buffers
// for all p - 1 peers, as NCCL's own all-to-all needs. Without it (point-to-point,
// whose peers are few), the first batch to a peer connects to it; either way
// abort() never waits behind a connection (nccl_comm.h's waitReady).
//
// No torch here: the communicator is created by the backend (unique id through
// the c10d store) and handed over; every NCCL call is made under its lock
// (transport/nccl_comm.h), and a batch that cannot be enqueued within the
// communicator's limit (a dead peer) aborts it and throws PeerError.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <functional>
#include <string>
#include <vector>

#include "common/cuda_events.h"
#include "common/device_allocator.h"
#include "transport/nccl_comm.h"
#include "transport/stream_transport.h"

namespace ringcoll {

class NcclTransport final : public StreamTransport {
 public:
  // Where staging buffers come from (common/device_allocator.h).
  using Allocator = DeviceAllocator;
  NcclTransport(NcclComm& comm, int rank, int size, cudaStream_t compute, size_t slotBytes,
                Allocator allocator, bool connectAll);
  ~NcclTransport() override;

  std::string name() const override { return "nccl"; }
  cudaStream_t transferStream() const { return transfer_; }

 private:
  struct Event;  // a marker: a pooled CUDA event (common/cuda_events.h)
  MarkerPtr record(cudaStream_t stream);
  MarkerPtr markCompute() override { return record(compute_); }
  MarkerPtr markTransfer() override { return record(transfer_); }
  void transferWaits(const MarkerPtr& m) override;
  void computeWaits(const MarkerPtr& m) override;
  void enqueueBatch(const std::vector<Post>& batch, bool onCompute) override;
  bool reached(const MarkerPtr& m) override;
  std::string aborted() override;
  void* allocStaging(size_t bytes) override;
  void freeStaging(void* p) override;
  // Every peer connected (see above); the bytes land in connectBuf_.
  void connectAll();

  NcclComm& comm_;
  cudaStream_t compute_;
  std::shared_ptr<CudaEventPool> events_;
  Allocator allocator_;
  cudaStream_t transfer_ = nullptr;
  void* connectBuf_ = nullptr;  // 2 * size bytes: what connectAll() sends and receives
};

}  // namespace ringcoll
