// The CUDA half of RingcollBackend (built only with RINGCOLL_WITH_CUDA): one NCCL
// communicator, comm stream, reducer and executor per backend, bound to the device
// of the first CUDA collective.
//
// Stream semantics, as ProcessGroupNCCL gives them:
//  * the comm stream waits for the caller's current stream before reading inputs;
//  * the collective is enqueued there (and on the transport's transfer stream),
//    with no host synchronisation;
//  * Work::wait() makes the caller's current stream wait for the comm stream and
//    returns without blocking the host; the future is completed for the device
//    (DDP comm hooks chain on it);
//  * every user tensor is recorded on the comm stream so the caching allocator
//    does not hand its memory out before the collective is done;
//  * a watchdog thread polls each collective's end event and
//    ncclCommGetAsyncError; a NCCL error or the group's timeout aborts the
//    communicator and fails the outstanding Work with a DistBackendError naming
//    op, sequence number, rank and the ring neighbours, instead of hanging.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "algo/executor.h"
#include "backend/call.h"
#include "common/knobs.h"
#include "reduce/cuda_reducer.h"
#include "transport/nccl_transport.h"

namespace ringcoll {

class CudaWork;

class CudaPath {
 public:
  // `tracer`: RINGCOLL_TRACE's (null when off); it records host times only
  // (algo/trace.h).
  CudaPath(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
           std::chrono::milliseconds timeout, const Knobs& knobs, c10::DeviceIndex device,
           algo::Tracer* tracer = nullptr);
  ~CudaPath();

  c10::DeviceIndex device() const { return device_; }

  c10::intrusive_ptr<c10d::Work> launch(c10d::OpType type, const algo::TraceTag& tag,
                                        const std::string& label,
                                        uint64_t seq, const std::vector<at::Tensor>& inputs,
                                        std::vector<at::Tensor> outputs, const Body& body);

 private:
  void watchdog();

  const int rank_;
  const int size_;
  const std::chrono::milliseconds timeout_;
  const c10::DeviceIndex device_;
  ncclComm_t comm_ = nullptr;
  c10::cuda::CUDAStream stream_;
  std::unique_ptr<NcclTransport> transport_;
  std::unique_ptr<CudaReducer> reducer_;
  std::unique_ptr<algo::Executor> executor_;

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<c10::intrusive_ptr<CudaWork>> pending_;
  std::string broken_;
  bool stopping_ = false;
  std::thread watchdog_;
};

}  // namespace ringcoll
