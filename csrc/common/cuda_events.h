// CUDA events made once and recorded again (CUDA builds only): creating and
// destroying an event costs the host about what recording it does, and the stream
// path records several per collective (the NCCL transport's markers, each Work's
// end). A PooledEvent gives its event back to the pool when it goes. That is safe
// because a stream wait (cudaStreamWaitEvent) and a query read the event's state
// when they are made: by the time the last holder lets go, every wait on it was
// enqueued, so recording it again cannot change what they wait for.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/cuda_check.h"

namespace ringcoll {

class CudaEventPool {
 public:
  ~CudaEventPool() {
    // Destroying an event still recorded is allowed: its resources go once it completes.
    for (cudaEvent_t e : free_) cudaEventDestroy(e);
  }
  cudaEvent_t take() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!free_.empty()) {
        cudaEvent_t e = free_.back();
        free_.pop_back();
        return e;
      }
    }
    cudaEvent_t e = nullptr;
    RC_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }
  void give(cudaEvent_t e) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(e);
  }

 private:
  std::mutex mutex_;
  std::vector<cudaEvent_t> free_;
};

// One event of a pool, recorded on `stream` at construction; the pool lives as
// long as any of its events.
struct PooledEvent {
  PooledEvent(std::shared_ptr<CudaEventPool> pool, cudaStream_t stream)
      : pool_(std::move(pool)), ev(pool_->take()) {
    const cudaError_t rc = cudaEventRecord(ev, stream);
    if (rc != cudaSuccess) {
      pool_->give(ev);
      throw std::runtime_error(RC_STR("ringcoll: CUDA call cudaEventRecord failed: ",
                                      cudaGetErrorString(rc)));
    }
  }
  ~PooledEvent() { pool_->give(ev); }
  PooledEvent(const PooledEvent&) = delete;
  PooledEvent& operator=(const PooledEvent&) = delete;

  // Whether everything before the record ran; a device fault throws, never reads
  // as "not yet".
  bool reached() const {
    const cudaError_t rc = cudaEventQuery(ev);
    if (rc == cudaSuccess) return true;
    if (rc == cudaErrorNotReady) return false;
    cudaGetLastError();
    throw std::runtime_error(std::string("cudaEventQuery: ") + cudaGetErrorString(rc));
  }

 private:
  std::shared_ptr<CudaEventPool> pool_;

 public:
  const cudaEvent_t ev;
};

}  // namespace ringcoll
