// Capture on the CPU emulation (backend/capture.h): what the backend adds to its
// stream paths' recording, the refusals of calls on the host transports, and the
// replay.
#include <c10/util/Exception.h>

#include "backend/backend.h"
#include "common/errors.h"

namespace ringcoll {

void RingcollBackend::refuseUnderCapture(const CallLabel& label, const char* what) const {
  if (!capture_->capturingHere()) return;
  C10_THROW_ERROR(DistBackendError,
                  c10::str(label, ": cannot be captured: ", what,
                           ", where nothing is recorded (only the stream path's "
                           "collectives and point-to-point calls are)"));
}

bool RingcollBackend::cudaCapturing() {
  std::shared_ptr<StreamPath> path;
  {
    std::lock_guard<Mutex> lock(pathMutex_);
    path = cuda_;  // none before the group's first CUDA collective: nothing captured
  }
  return path && path->capturing();
}

void RingcollBackend::captureBegin() {
  TORCH_CHECK(knobs_.transport == "stream",
              "ringcoll: capturing CPU collectives needs the stream emulation "
              "(RINGCOLL_TRANSPORT=stream; this group's transport is '", knobs_.transport,
              "'); CUDA tensors are captured with torch.cuda.graph");
  const CallLabel label{"capture", seq_.load(), getRank(), getSize()};
  throwIfStopped(label);
  capture_->begin(this);
}

std::shared_ptr<CapturedGraph> RingcollBackend::captureEnd() { return capture_->end(); }

void RingcollBackend::replay(const CapturedGraph& graph) {
  const size_t n = graph.launches.size();
  auto where = [n](size_t i) {
    return c10::str("replay of a captured graph (launch ", i + 1, " of ", n, "): ");
  };
  TORCH_CHECK(graph.owner == this,
              "ringcoll: this graph was captured on another process group; replay it "
              "with the group that captured it");
  // Launched in the recorded order, then waited for: each is an ordinary stream
  // collective, watched (timeouts, a peer's failure) and failed by its path's rules.
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  works.reserve(n);
  size_t waited = 0;  // works[0, waited) have ended
  auto waitUpTo = [&](size_t end) {
    for (; waited < end; ++waited) {
      try {
        works[waited]->wait();
      } catch (const c10::DistBackendError& e) {
        C10_THROW_ERROR(DistBackendError, where(waited) + e.what_without_backtrace());
      }
    }
  };
  try {
    for (size_t i = 0; i < n; ++i) {
      const CapturedLaunch& l = graph.launches[i];
      throwIfStopped(l.label);
      TORCH_CHECK(!capture_->capturingHere(),
                  "ringcoll: a captured graph cannot be replayed inside a capture");
      std::shared_ptr<StreamPath> path = l.path.lock();
      if (!path) {
        C10_THROW_ERROR(DistBackendError,
                        c10::str(where(i), l.label, ": its group was destroyed"));
      }
      // Each path runs its launches in order; a launch on another path than the one
      // before it reads what that one wrote (a receive, then an all-reduce of it):
      // it waits, as the caller's stream orders captured calls on CUDA.
      if (i > 0 && graph.launches[i - 1].path.lock() != path) waitUpTo(i);
      try {
        works.push_back(path->launch(l.type, l.tag, l.label, l.seq, l.fp, l.timeout, l.inputs,
                                     l.outputs, l.body, l.peers));
      } catch (const c10::DistBackendError& e) {
        C10_THROW_ERROR(DistBackendError, where(i) + e.what_without_backtrace());
      }
    }
    waitUpTo(n);
  } catch (...) {
    works.clear();  // no lock is held here
    throw;
  }
}

}  // namespace ringcoll
