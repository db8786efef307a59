// Capture: collectives recorded once and run again many times, as a CUDA graph
// replays what torch.cuda.graph(...) captured (vLLM's and SGLang's decode steps).
//
// On CUDA the device captures natively: the caller's stream is capturing
// (StreamDevice::capturing()), the stream path enqueues the collective as always,
// joined to that stream, and CUDA replays the device work. The CPU emulation has no
// graph, so it records the launches themselves (EmulatedCapture below) and replays
// them through the same stream path, in the same order, on the same tensors; which
// is how CI runs the capture rules of the stream path (stream_path.h):
//  * what cannot be captured raises at capture time, naming the call and why: a
//    barrier (it blocks the host until every rank arrived), RINGCOLL_BLOCKING_WAIT=1
//    (wait() would block the host), anything on a host transport;
//  * a captured collective is not watched: no watchdog entry, no timeout, no
//    in-flight bound (it waits on the host); its Work is complete for the host (its
//    wait() only orders the caller's stream) and its future completed at capture;
//  * the flight recorder records it once, at capture, and never completes it
//    (ProcessGroupNCCL's treatment of captured work);
//  * its sequence number and fingerprint are the capture's: every replay carries
//    them, so ranks that replay different graphs fail the device's check (on the
//    emulation a point-to-point call's pair count is the replay's: its body runs
//    again);
//  * a failure while capturing on CUDA breaks the group, as a failed launch does:
//    the transport's host state has moved on with the calls that were captured.
// An emulated capture is the capturing thread's, as a CUDA capture is the
// capturing stream's: a launch from another thread (a future's callback) runs at
// once. An emulated replay is host work (the host is the device): each recorded
// launch runs as an ordinary stream collective, watched, in order (a launch on
// another path than the one before it waits for that one: on CUDA the caller's
// stream orders them), and replay() waits for all of them, raising the first
// failure with the launch's place in the graph. A CUDA graph that outlives its
// group must not be replayed (its communicator is gone), as with ProcessGroupNCCL.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "backend/work.h"
#include "common/locks.h"
#include "engine/call.h"
#include "engine/fingerprint.h"
#include "engine/trace.h"

namespace ringcoll {

class StreamPath;

// One recorded launch: StreamPath::launch's arguments, to call it again.
struct CapturedLaunch {
  std::weak_ptr<StreamPath> path;  // the backend owns it; a destroyed group's is gone
  c10d::OpType type;
  algo::TraceTag tag;
  CallLabel label;
  uint64_t seq;
  algo::Fingerprint fp;
  std::chrono::milliseconds timeout;
  std::vector<at::Tensor> inputs;
  std::vector<at::Tensor> outputs;
  Body body;
  std::string peers;
};

struct CapturedGraph {
  const void* owner = nullptr;           // the backend that captured it
  std::vector<CapturedLaunch> launches;  // in launch order, over the group's paths
};

// The emulation's capture state, one per backend, shared by its stream paths (the
// collectives' and the point-to-point one), so that one graph holds both in order.
class EmulatedCapture {
 public:
  // Whether a capture is under way (by any thread).
  bool active() const {
    std::lock_guard<Mutex> lock(mutex_);
    return graph_ != nullptr;
  }
  // Whether the calling thread is capturing: its launches are recorded. Every
  // stream launch asks: without a capture it reads one atomic, no lock.
  bool capturingHere() const {
    if (!any_.load(std::memory_order_acquire)) return false;
    std::lock_guard<Mutex> lock(mutex_);
    return graph_ != nullptr && thread_ == std::this_thread::get_id();
  }
  // Throws if a capture is already under way. `owner`: the backend.
  void begin(const void* owner);
  // The graph recorded since begin(); throws if none is under way.
  std::shared_ptr<CapturedGraph> end();
  // Records `launch` if the calling thread is capturing; false if it is not.
  bool record(CapturedLaunch launch);

 private:
  mutable Mutex mutex_{"EmulatedCapture::mutex_"};
  std::shared_ptr<CapturedGraph> graph_;
  std::thread::id thread_;  // the capturing thread
  std::atomic<bool> any_{false};  // graph_ is set (begin() to end())
};

}  // namespace ringcoll
