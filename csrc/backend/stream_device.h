// StreamDevice: what the stream path (stream_path.h) needs from a device whose
// work runs later, in order, on streams: the CUDA glue (cuda_device.h: a comm
// stream, CUDA events, an NCCL communicator) or its CPU emulation
// (cpu_stream_device.h: host threads, shared memory), which CI runs. Everything
// that decides when a collective is complete, failed or torn down lives in the
// stream path, once; a device only answers these questions.
//
// Contract, as CUDA gives it: work enqueued on the compute stream runs in enqueue
// order; an event recorded there completes once everything enqueued before it has
// run; the executor's transport and reducer enqueue on that stream (and on their
// own transfer stream, joined at each job's end: engine/executor.h).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "common/stream_stats.h"
#include "engine/executor.h"
#include "reduce/reducer.h"

namespace ringcoll {

class StreamDevice {
 public:
  struct Event {
    virtual ~Event() = default;
  };
  using EventPtr = std::shared_ptr<Event>;

  virtual ~StreamDevice() = default;

  virtual c10::Device device() const = 0;
  virtual algo::Executor& executor() = 0;
  // What the user's tensors of this device are checked against ("cuda:0", "cpu").
  virtual std::string name() const = 0;

  // --- enqueuing a collective (the launching thread, one at a time) ---
  // Runs `fn` (the collective's body, the executor, the finish) with the compute
  // stream as the current one, after ordering the compute stream behind the
  // caller's work (CUDA: the caller's current stream; the emulation: the host,
  // whose copies run at once).
  virtual void enqueue(const std::function<void()>& fn) = 0;
  // `fn` runs on the compute stream after what is enqueued so far (CUDA: it is
  // called now and enqueues its copies there; the emulation: a task).
  virtual void enqueueFinish(std::function<void()> fn) = 0;
  // The caching allocator keeps these tensors' memory until the compute stream
  // passed this point (CUDA: recordStream; host memory needs nothing).
  virtual void protect(const std::vector<at::Tensor>& tensors) = 0;
  virtual EventPtr recordEnd() = 0;
  // Whether the Work's future is completed at launch for the device (CUDA: its
  // users chain on the stream) or by the path once the end is reached (host).
  virtual bool futureOnDevice() const = 0;
  // Whether a caller has a stream to order after the collective (CUDA); else
  // Work.wait() blocks the host until the end.
  virtual bool hasCallerStream() const = 0;
  virtual void callerWaits(const EventPtr& end) = 0;

  // --- capture (backend/capture.h) ---
  // Whether the caller's current stream is being captured into a graph (CUDA:
  // torch.cuda.graph). A device without native capture (the emulation) says no: its
  // capture is the stream path's record and replay.
  virtual bool capturing() { return false; }
  // enqueue(fn) while capturing: nothing may wait on the host, so the transport's
  // in-flight bound is off while `fn` runs (its waits are host waits on events).
  virtual void enqueueCapturing(const std::function<void()>& fn) { enqueue(fn); }

  // --- completion and failure (any thread) ---
  // Whether the end was reached. A device fault is thrown (std::runtime_error),
  // never read as "not yet".
  virtual bool reached(const EventPtr& end) = 0;
  // The transfers' asynchronous error ("" if none): a peer exited, a connection
  // failed.
  virtual std::string transferError() = 0;
  // The reducer's stop word and fingerprint check (reduce/reducer.h).
  virtual StreamOrderedReducer& reducer() = 0;
  // Nothing failed: no kernel was stopped and the transfers have no error. An end
  // reached on a device that is not intact means work was skipped or received
  // nothing: not a success.
  bool intact() { return !reducer().kernelsStopped() && transferError().empty(); }
  // Transfers stuck on a peer give up (ncclCommAbort); idempotent. The caller sets
  // the reducer's stop word first: the work queued behind those transfers then runs
  // and skips (on CUDA later, on the device; the emulation drains its compute
  // stream before it returns).
  virtual void abortTransfers() = 0;
  // Whether the memory of work that did not reach its end may be freed now. CUDA:
  // always (the caching allocator keeps what a stream uses: protect(), and the
  // job's own memory is allocated on the comm stream). The emulation: once
  // abortTransfers() drained its streams. The stream path frees a failed Work's
  // memory only then; RINGCOLL_CHECKS checks it.
  virtual bool mayFreeUnfinished() = 0;
  // The orderly end after a clean shutdown: what was enqueued reaches the peers,
  // at most `limit` (then abort). Called once, with nothing left to launch.
  virtual void finalize(std::chrono::milliseconds limit) = 0;
  // The watchdog thread calls this first (CUDA: set the device, so that no
  // context is created on GPU 0).
  virtual void bindThread() {}

  // What this device's collectives enqueued, counted and (when on) timed
  // (common/stream_stats.h); its transport and reducer write into it.
  StreamStats& stats() { return stats_; }

 protected:
  StreamStats stats_;
};

}  // namespace ringcoll
