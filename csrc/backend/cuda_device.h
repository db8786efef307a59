// The CUDA glue of the stream path (stream_device.h), built only with
// RINGCOLL_WITH_CUDA: one NCCL communicator, comm stream, CUDA reducer, NCCL
// transport and executor per backend, bound to the device of the first CUDA
// collective. Thin by design: what decides completion, failure and teardown is the
// stream path's (stream_path.h), which CI runs on the CPU emulation.
//
// The communicator is created with the group's timeout (non-blocking, transport/
// nccl_comm.h) from a unique id rank 0 puts in the group's store; once every rank
// joined (init returned), rank 0 deletes the key, so a group re-created under the
// same prefix never reads a stale id.
#pragma once

#include <memory>
#include <vector>

#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "backend/comm_init.h"
#include "backend/stream_device.h"
#include "common/cuda_events.h"
#include "common/knobs.h"
#include "engine/trace.h"
#include "reduce/cuda_reducer.h"
#include "transport/nccl_comm.h"
#include "transport/nccl_transport.h"

namespace ringcoll {

class CudaDevice final : public StreamDevice {
 public:
  // `tracer`: RINGCOLL_TRACE's (null when off); it records host times only.
  // Creating the communicator and connecting every peer wait at most `timeout` for
  // the other ranks (unless `ncclBlocking` is kAlways: RINGCOLL_NCCL_BLOCKING,
  // common/knobs.h); with kOnceConnected and `connectAll`, the collectives then run
  // on a blocking communicator split off it (NcclComm::blockFromNowOn).
  // `connectAll`: every peer at creation (collectives), else at first use
  // (point-to-point); transport/nccl_transport.h. `maxBatches`: the transport's
  // in-flight bound (RINGCOLL_MAX_BATCHES_IN_FLIGHT; it waits for room at most
  // `timeout`). `store`: the unique id goes
  // through it (a prefix of its own for each communicator).
  // `stopping`: the group's abort or shutdown, which ends the waits for the unique
  // id and for the other ranks' init at once (backend/comm_init.h).
  CudaDevice(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
             std::chrono::milliseconds timeout, size_t chunkBytes, c10::DeviceIndex device,
             algo::Tracer* tracer, Knobs::NcclBlocking ncclBlocking, bool connectAll,
             size_t stopLatchBytes, size_t maxBatches, const Stopping& stopping);
  ~CudaDevice() override;

  c10::Device device() const override { return c10::Device(c10::kCUDA, device_); }
  c10::DeviceIndex index() const { return device_; }
  algo::Executor& executor() override { return *executor_; }
  std::string name() const override;

  void enqueue(const std::function<void()>& fn) override;
  // Under enqueue's guard: the finish's torch copies go on the comm stream. Unlike
  // the reducer's kernels they do not read the stop word, so on CUDA a collective
  // whose device fingerprint check failed may still copy its (unreduced) working
  // buffer into the outputs; the emulation skips them (cpu_stream_device.cc).
  void enqueueFinish(std::function<void()> fn) override { fn(); }
  void protect(const std::vector<at::Tensor>& tensors) override;
  EventPtr recordEnd() override;
  bool futureOnDevice() const override { return true; }
  bool hasCallerStream() const override { return true; }
  void callerWaits(const EventPtr& end) override;
  // cudaStreamIsCapturing on the caller's current stream (torch.cuda.graph).
  bool capturing() override;
  // enqueue() joins the comm stream to the capture (an event recorded on the
  // capturing stream, waited on by the comm stream); the stream path then joins it
  // back (callerWaits on the end) before the capture may end.
  void enqueueCapturing(const std::function<void()>& fn) override;

  bool reached(const EventPtr& end) override;
  std::string transferError() override;
  StreamOrderedReducer& reducer() override { return *reducer_; }
  void abortTransfers() override;
  bool mayFreeUnfinished() override { return true; }
  void finalize(std::chrono::milliseconds limit) override;
  void bindThread() override;

 private:
  struct Event;  // a Work's end: a pooled event (common/cuda_events.h)
  const c10::DeviceIndex device_;
  std::shared_ptr<CudaEventPool> events_;
  cudaEvent_t ready_ = nullptr;  // enqueue(): the caller's stream, recorded again each call
  std::unique_ptr<NcclComm> comm_;
  c10::cuda::CUDAStream stream_;
  std::unique_ptr<NcclTransport> transport_;
  std::unique_ptr<CudaReducer> reducer_;
  std::unique_ptr<algo::Executor> executor_;
};

}  // namespace ringcoll
