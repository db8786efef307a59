// The stream path of RingcollBackend: collectives enqueued on a device's streams
// (stream_device.h) and completed, failed and torn down by one set of rules, for
// CUDA tensors (the CUDA glue, cuda_device.h) and for the CPU emulation of it
// (RINGCOLL_TRANSPORT=stream, cpu_stream_device.h), so that CI runs these rules.
//
// Stream semantics, as ProcessGroupNCCL gives them:
//  * the compute stream waits for the caller's work before reading inputs;
//  * the collective is enqueued there (and on the transport's transfer stream,
//    joined at the job's end), with no host synchronisation;
//  * every user tensor is protected until the compute stream passed the job's end
//    (the caching allocator does not hand its memory out before);
//  * the future is completed for the device (DDP comm hooks chain on it), or, on a
//    device without caller streams, by the watchdog once the end is reached.
//
// Failures surface in the collective that failed (ProcessGroupNCCL's contract):
//  * a watchdog thread polls each collective's end, the transfers' asynchronous
//    error, the device's fingerprint check (reduce/cuda_reducer.h) and, for work
//    waiting longer than kReportPoll, the failure other ranks left in the group's
//    store (common/failure.h). On a device fault, a transfer error, a mismatch, a
//    peer's report, or a Work past its timeout, it (1) fails every outstanding Work
//    with a DistBackendError naming op, sequence number, rank and peer, (2) sets the
//    stop word, so no reduction or copy queued behind the failed transfers writes
//    stale staging data into a user tensor, (3) aborts the transfers (stuck NCCL
//    kernels exit), and (4) leaves the error in the store for the other ranks;
//  * an exception while a collective is being enqueued (a failed allocation, a
//    broken invariant, an error from a copy) does the same: some of its transfers
//    may be posted, so the peers are out of step with this rank;
//  * RINGCOLL_BLOCKING_WAIT=1 (and always on a device without caller streams):
//    Work.wait() blocks the host until the collective finished and raises the
//    failure (or its own timeout);
//  * otherwise Work.wait() orders the caller's stream and returns, and the
//    watchdog then, with RINGCOLL_ASYNC_ERROR_HANDLING=teardown (the default),
//    prints the error to stderr and ends the process, since a result the device
//    may already be using is wrong; with =raise the next call on the group, or
//    wait() on the failed Work, raises it.
// Destruction lets outstanding work finish while it moves (kShutdownGrace from the
// last work retired), then finalizes the device (bounded) or, after a failure, aborts
// it: it never waits on a dead peer.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "backend/capture.h"
#include "backend/stream_device.h"
#include "backend/work.h"
#include "common/callbacks.h"
#include "common/knobs.h"
#include "common/locks.h"
#include "engine/call.h"
#include "engine/fingerprint.h"

namespace ringcoll {

class StreamWork;

class StreamPath : public std::enable_shared_from_this<StreamPath> {
 public:
  // `neighbours`: this rank's ring neighbours (the fingerprint's); `fingerprint`:
  // whether collectives carry the device-checked header.
  StreamPath(std::shared_ptr<StreamDevice> device, const c10::intrusive_ptr<c10d::Store>& store,
             int rank, int size, const Knobs& knobs, std::vector<int> neighbours,
             bool fingerprint);
  ~StreamPath();

  StreamDevice& device() { return *device_; }
  // The emulation's capture (backend/capture.h), shared by the backend's emulated
  // paths; set once, right after construction. CUDA paths have none: they capture
  // natively.
  void setEmulatedCapture(std::shared_ptr<EmulatedCapture> capture) {
    capture_ = std::move(capture);
  }
  // Whether a launch now would be captured (natively or by the emulation).
  bool capturing() { return device_->capturing() || (capture_ && capture_->capturingHere()); }

  // `fp`: the call's fingerprint; `timeout`: the op's, the watchdog's limit for it.
  // `peers`: whom the call waits for, as its errors say it ("rank 1 (receive, tag
  // 4)"), on a path without ring neighbours (point-to-point's); else they are named.
  c10::intrusive_ptr<c10d::Work> launch(c10d::OpType type, const algo::TraceTag& tag,
                                        const CallLabel& label, uint64_t seq,
                                        const algo::Fingerprint& fp,
                                        std::chrono::milliseconds timeout,
                                        const std::vector<at::Tensor>& inputs,
                                        std::vector<at::Tensor> outputs, const Body& body,
                                        std::string peers = "", bool* captured = nullptr);

  // Under a capture the same call is captured instead (backend/capture.h): it raises
  // at once if the call cannot be captured, and its Work is complete for the host.
  // `captured`, when given: set to whether it was (one look at the capture state).

  // ProcessGroup abort(): fails outstanding work at once and aborts the transfers.
  // Safe from any thread, also while another thread launches; the failed futures'
  // callbacks run on the calling thread, which must hold no ringcoll lock.
  void abort(const std::string& why);

 private:
  // launch() under a capture; `native`: the device captures (CUDA), else the
  // emulation records the launch.
  c10::intrusive_ptr<c10d::Work> launchCaptured(bool native, c10d::OpType type,
                                                const algo::TraceTag& tag,
                                                const CallLabel& label, uint64_t seq,
                                                const algo::Fingerprint& fp,
                                                std::chrono::milliseconds timeout,
                                                const std::vector<at::Tensor>& inputs,
                                                std::vector<at::Tensor> outputs,
                                                const Body& body, std::string peers);
  // Under launchMutex_, inside device_->enqueue: the body, the executor's job and
  // the end, for `work` (`staged` keeps the job's buffer; `keep`: whether the work
  // keeps the tensors and the job's memory until its end, which a captured one,
  // whose graph or recording holds them, does not).
  void enqueueJob(StreamWork& work, const algo::TraceTag& tag, const algo::Fingerprint& fp,
                  std::chrono::milliseconds timeout, const std::vector<at::Tensor>& inputs,
                  const std::vector<at::Tensor>& outputs, const Body& body,
                  std::optional<Staged>& staged, bool keep);
  void watchdog();
  // Under mutex_: moves to retired_ the oldest works whose end was reached while no
  // kernel was stopped (the compute stream runs in order: they are a prefix).
  void retireFinished();
  // Under mutex_: the failure path above, steps (0)-(4); `teardown`: then end the
  // process (the async default). The failed works go to failed_, still referenced
  // (their memory stays alive) until the device's work on them has stopped.
  void failAll(const std::string& why, bool report, bool teardown);
  // failAll for a reason that is not any one collective's (abort(), shutdown()):
  // each Work's error names it, and the peers it was waiting for.
  void failEach(const std::string& why);
  std::string mismatchText();
  // "rank 3 (receive) / rank 1 (send)": whom `w` waits for (its peers on a path
  // without ring neighbours).
  std::string waitedFor(const StreamWork& w) const;
  // With `lock` (on mutex_) held on entry and on return: takes retired_ and
  // failed_, and with the lock released completes their futures (callbacks run
  // here: a callback may launch a collective), releases what the succeeded ones
  // kept, and drops the references, which may free the user's tensors
  // (common/locks.h).
  void settle(std::unique_lock<Mutex>& lock);
  // The watchdog's settle(): the same, on callbacks_'s threads, so that a callback
  // that waits for a later collective of this path (which this watchdog must
  // retire or time out) does not block the watchdog (common/callbacks.h).
  void settleOnCallbacks(std::unique_lock<Mutex>& lock);
  // Under mutex_: retired_ and failed_ moved out, oldest first (what settle() and
  // settleOnCallbacks() complete once they have unlocked).
  std::vector<c10::intrusive_ptr<StreamWork>> takeSettled();
  const std::shared_ptr<StreamDevice> device_;
  const int rank_;
  const int size_;
  const Knobs knobs_;
  const c10::intrusive_ptr<c10d::Store> store_;
  const std::vector<int> neighbours_;
  const bool fingerprint_;
  const bool blocking_;  // Work.wait() blocks the host
  const bool teardown_;  // a failure seen by the watchdog ends the process

  // The locks of the path (the rule of common/locks.h: neither is held while a
  // tensor may be freed or a future's callbacks run; settle() does both unlocked).
  Mutex launchMutex_{"StreamPath::launchMutex_"};  // one launch at a time: the executor is single-threaded
  Mutex mutex_{"StreamPath::mutex_"};  // pending_, launching_, retired_, failed_, broken_, stopping_
  std::condition_variable_any cv_;
  std::deque<c10::intrusive_ptr<StreamWork>> pending_;
  // The work whose launch is enqueuing (null if none). Not yet in pending_, but
  // its enqueue may wait for the device (the in-flight bound), so the watchdog
  // watches it too: a transfer error, a peer's report or its timeout aborts the
  // transfers, and the launch throws the watchdog's reason (broken_).
  c10::intrusive_ptr<StreamWork> launching_;
  // Ended, their futures not yet completed and their references not yet dropped
  // (settle()): succeeded, and failed (after the device stopped using them).
  std::vector<c10::intrusive_ptr<StreamWork>> retired_;
  std::vector<c10::intrusive_ptr<StreamWork>> failed_;
  std::string broken_;
  bool stopping_ = false;
  std::thread watchdog_;
  CallbackRunner callbacks_;  // settleOnCallbacks'; joined after the watchdog
  std::shared_ptr<EmulatedCapture> capture_;  // null on CUDA (setEmulatedCapture)
};

}  // namespace ringcoll
