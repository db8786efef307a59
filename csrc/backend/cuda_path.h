// The CUDA half of RingcollBackend (built only with RINGCOLL_WITH_CUDA): one NCCL
// communicator, comm stream, reducer and executor per backend, bound to the device
// of the first CUDA collective.
//
// Stream semantics, as ProcessGroupNCCL gives them:
//  * the comm stream waits for the caller's current stream before reading inputs;
//  * the collective is enqueued there (and on the transport's transfer stream),
//    with no host synchronisation;
//  * every user tensor is recorded on the comm stream so the caching allocator
//    does not hand its memory out before the collective is done;
//  * the future is completed for the device (DDP comm hooks chain on it).
//
// Failures surface in the collective that failed (ProcessGroupNCCL's contract):
//  * a watchdog thread polls each collective's end event, the communicator's async
//    error, the device's fingerprint check (reduce/cuda_reducer.h) and, for work
//    waiting long, the failure other ranks left in the group's store. On an NCCL
//    error, a mismatch, a peer's report, or a Work past its timeout, it
//    (1) fails every outstanding Work with a DistBackendError naming op, sequence
//    number, rank and peer, (2) sets the reducer's stop word, so no reduction or
//    copy queued behind the failed transfers writes stale staging data into a
//    user tensor, (3) aborts the communicator under its lock (stuck NCCL kernels
//    exit), and (4) leaves the error in the store for the other ranks;
//  * RINGCOLL_BLOCKING_WAIT=1: Work.wait() blocks the host until the collective
//    finished and raises the failure (or its own timeout);
//  * otherwise Work.wait() orders the caller's stream and returns, and the
//    watchdog then, with RINGCOLL_ASYNC_ERROR_HANDLING=teardown (the default),
//    prints the error to stderr and ends the process, since a result the device
//    may already be using is wrong; with =raise the next call on the group, or
//    wait() on the failed Work, raises it.
// Init has the group's timeout (non-blocking communicator, transport/nccl_comm.h);
// destruction and shutdown() abort the communicator instead of waiting on a peer.
#pragma once

#include <atomic>
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
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "common/failure.h"
#include "common/knobs.h"
#include "engine/call.h"
#include "engine/executor.h"
#include "engine/fingerprint.h"
#include "reduce/cuda_reducer.h"
#include "transport/nccl_comm.h"
#include "transport/nccl_transport.h"

namespace ringcoll {

class CudaWork;

class CudaPath {
 public:
  // `tracer`: RINGCOLL_TRACE's (null when off); it records host times only
  // (engine/trace.h). Creating the communicator waits at most `timeout` for the
  // other ranks.
  CudaPath(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
           std::chrono::milliseconds timeout, const Knobs& knobs, c10::DeviceIndex device,
           algo::Tracer* tracer = nullptr);
  // Lets outstanding work finish for up to kShutdownGrace; then, without a failure,
  // finalizes the communicator (its last sends reach their peers) for at most
  // kShutdownGrace, and otherwise (or past that) aborts it: never waits on a dead
  // peer.
  ~CudaPath();

  c10::DeviceIndex device() const { return device_; }

  // `fp`: the call's fingerprint (checked on the device when RINGCOLL_FINGERPRINT
  // is on); `timeout`: the op's, the watchdog's limit for it.
  c10::intrusive_ptr<c10d::Work> launch(c10d::OpType type, const algo::TraceTag& tag,
                                        const std::string& label, uint64_t seq,
                                        const algo::Fingerprint& fp,
                                        std::chrono::milliseconds timeout,
                                        const std::vector<at::Tensor>& inputs,
                                        std::vector<at::Tensor> outputs, const Body& body);

  // ProcessGroup abort(): fails outstanding work at once and aborts the
  // communicator.
  void abort(const std::string& why);

 private:
  void watchdog();
  // Under mutex_: marks succeeded the oldest works whose end event completed while
  // no kernel was stopped (the comm stream runs in order: they are a prefix).
  void retireFinished();
  // Under mutex_: the failure path above, steps (0)-(4); `teardown`: then end the
  // process (the async default).
  void failAll(const std::string& why, bool report, bool teardown);
  std::string peerReport();
  std::string mismatchText();

  const int rank_;
  const int size_;
  const std::chrono::milliseconds timeout_;
  const c10::DeviceIndex device_;
  const Knobs knobs_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::vector<int> neighbours_;  // the ring neighbours, for the fingerprint
  std::unique_ptr<NcclComm> comm_;
  c10::cuda::CUDAStream stream_;
  std::unique_ptr<NcclTransport> transport_;
  std::shared_ptr<CudaReducer> reducer_;  // works keep it: they read its stop word
  std::unique_ptr<algo::Executor> executor_;

  std::mutex launchMutex_;  // one launch at a time: the executor is single-threaded
  std::mutex mutex_;        // pending_, broken_, stopping_
  std::condition_variable cv_;
  std::deque<c10::intrusive_ptr<CudaWork>> pending_;
  std::string broken_;
  bool stopping_ = false;
  std::thread watchdog_;
};

}  // namespace ringcoll
