// The CPU path of the backend's collectives (backend.h): launchCpu and the tasks it
// runs, on the calling thread or the backend's worker, and how each ends (its Work,
// c10d's hooks, the group marked broken on a failure).
//
// Three ways a CPU collective runs, cheapest first:
//   - runSmallNow: a blocking small collective (engine/small.h; the op, and
//     dist.* with async_op=False) whose group has nothing queued runs start to end
//     on the calling thread, its task on the stack, with no Work unless c10d wants
//     one (then made completed) and with the GIL held until it has to wait;
//   - launchCpu, inline: nothing queued, small enough (RINGCOLL_INLINE_BYTES): it
//     runs on the calling thread, and is handed to the worker if a peer is late;
//   - launchCpu, queued: the worker runs it after what is queued.
// Every way runs the same runCpu (the fingerprint, the timeout, interrupts, the
// errors and the flight recorder), so a call's outcome does not depend on the way.
#include "backend/backend.h"

#include <Python.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>

#include <c10/util/Exception.h>

#include "backend/flight_recorder.h"
#include "backend/work.h"
#include "common/errors.h"
#include "common/failure.h"

namespace ringcoll {

namespace {
using Clock = std::chrono::steady_clock;

// How long a collective run on the calling thread may wait for its peers before it
// is handed to the worker, so that async_op=True returns promptly when a peer is
// late; an on-time small collective finishes well within it.
constexpr auto kInlineBudget = std::chrono::milliseconds(2);
// The most an async_op=True CPU collective runs on the calling thread (launchCpu): up
// to here a hand-off to the worker and the wake-up back cost about what the call does.
constexpr size_t kAsyncInlineBytes = size_t{256} << 10;

// A failure another rank reported through the store.
class ReportedError : public PeerError {
 public:
  explicit ReportedError(const std::string& what) : PeerError(-1, what) {}
};
}  // namespace

// A CPU collective, started on one thread and possibly finished on another.
struct RingcollBackend::CpuTask {
  c10::intrusive_ptr<RingcollWork> work;
  Body body;
  CallLabel label;
  int64_t fr = -1;  // its flight-recorder entry
  algo::Fingerprint fp;  // seq and rank set; the algorithm once the body ran
  std::chrono::milliseconds timeout;
  std::optional<Staged> staged;
  algo::RunHandle exec;
  Clock::time_point started;  // RINGCOLL_DEBUG only
  algo::TraceTag tag;  // set only when tracing
  Clock::time_point lastReportLook{};  // checkInterrupts' last read of the store
  // Set by runCpu when the collective ended: its error (null: success), and whether
  // it was a timeout (then the failure hooks run). endCpu acts on them.
  std::exception_ptr error;
  bool timedOut = false;
  // The body and staged job hold the user's tensors: freed with no lock held.
  ~CpuTask() { checkNoLockHeld("destroying a CPU collective (its tensors)"); }
};

void RingcollBackend::keepAfterFailure(CpuTask& t) {
  if (!t.exec) return;  // nothing was started, so nothing was posted
  struct Kept {
    Body body;
    std::optional<Staged> staged;
    algo::RunHandle exec;
  };
  auto kept = std::make_shared<Kept>(
      Kept{std::move(t.body), std::move(t.staged), std::move(t.exec)});
  std::lock_guard<Mutex> lock(keptMutex_);
  kept_.push_back(std::move(kept));
}

void RingcollBackend::checkInterrupts(CpuTask& t) {
  const int how = stop_.load();
  if (how == static_cast<int>(Stop::kAbort)) {
    throw PeerError(-1, "aborted (ProcessGroup abort() was called) while it waited for " +
                            t.exec->waitingWhat());
  }
  if (how == static_cast<int>(Stop::kShutdown) &&
      Clock::now() - t.exec->lastMove() >= kShutdownGrace) {
    throw PeerError(-1, "the process group was shut down (destroy_process_group) while it "
                        "waited for " + t.exec->waitingWhat());
  }
  const auto now = Clock::now();
  if (now - t.lastReportLook < reportPollFor(getSize())) return;
  t.lastReportLook = now;
  const std::string report = peerReport();
  if (!report.empty()) throw ReportedError(report);
}

std::string RingcollBackend::peerReport() { return readFailureReport(store_, kFailureKey); }

c10::intrusive_ptr<c10d::Work> RingcollBackend::launchCpu(c10d::OpType type, const char* op,
                                                          const CallLabel& label,
                                                          uint64_t seq, algo::Fingerprint fp,
                                                          std::vector<at::Tensor> outputs,
                                                          size_t bytes,
                                                          std::chrono::milliseconds timeout,
                                                          Body body, int64_t fr, bool async) {
  refuseUnderCapture(label, "it runs on a host transport");
  // Declared before the lock, so that it goes after the lock is released: it holds
  // the user's tensors (common/locks.h).
  std::shared_ptr<CpuTask> task;
  bool endHere = false;  // it ended on this thread: endCpu once unlocked
  {
    // stop() frees the worker and the executor only once no launch holds this.
    std::shared_lock<SharedMutex> lock(cpuMutex_);
    throwIfStopped(label);
    // The Work may outlive abort(), which drops the backend's executor: it keeps
    // its own reference, and only reads the executor's waitingFor().
    std::shared_ptr<algo::Executor> executor = executor_;
    task = std::make_shared<CpuTask>();
    task->work = c10::make_intrusive<RingcollWork>(
        getRank(), type, label, seq, timeout, std::move(outputs), [executor]() -> std::string {
          const int peer = executor->waitingFor();
          return peer >= 0 ? c10::str("it was waiting for rank ", peer)
                           : std::string("it was queued behind an earlier collective");
        });
    task->body = std::move(body);
    task->label = label;
    task->fr = fr;
    task->fp = fp;
    task->timeout = timeout;
    task->tag = traceTag(op, seq);
    // Small and nothing ahead of it: run here, no hand-off to the worker and back. A
    // blocking call gains nothing from the worker up to RINGCOLL_INLINE_BYTES; an
    // async_op=True one runs here only up to kAsyncInlineBytes, so that a larger one
    // returns at once and overlaps the caller's work (DDP's buckets, prefetches).
    const size_t inlineLimit =
        async ? std::min(knobs_.inlineBytes, kAsyncInlineBytes) : knobs_.inlineBytes;
    if (broken_.load(std::memory_order_acquire)) {
      // A broken group fails every call at once, here: nothing queued could run, and
      // the worker may still be writing a hang's diagnostics (runFailureHooks).
      endHere = runCpu(*task, std::chrono::nanoseconds(0));
    } else if (bytes <= inlineLimit && worker_->tryClaim()) {
      if (runCpu(*task, kInlineBudget)) {
        worker_->release();
        endHere = true;
      } else {
        worker_->handOff([this, task] { runOnWorker(task); });
      }
    } else {
      worker_->enqueue([this, task] { runOnWorker(task); });
    }
  }
  // Its future's callbacks, the hooks and the release of its memory, unlocked.
  if (endHere) endCpu(*task);
  return task->work;
}

std::optional<uint64_t> RingcollBackend::runSmallNow(const char* op, algo::Fingerprint fp,
                                                   const algo::SmallJob& job,
                                                   std::chrono::milliseconds timeout,
                                                   const at::Tensor& tensor, bool gilHeld) {
  // What the general path does that this one does not: a Work and its future
  // (c10d's completion hooks are keyed by the Work), joining a coalesced block.
  if (!smallOn_ || coalescingNow_.load(std::memory_order_relaxed)) return std::nullopt;
#ifdef RINGCOLL_COMPLETION_HOOKS
  if (!completionHooks_.empty()) return std::nullopt;
#endif
  CpuTask t;  // before the lock: it goes after it (it may hold the user's tensors)
  {
    std::shared_lock<SharedMutex> lock(cpuMutex_);
    // Stopped or broken: the general path says so, as every other call does. Work
    // queued or running on the worker (async calls, from any thread): this call goes
    // behind it, the general way, so that calls never reorder.
    if (stop_.load() != 0 || broken_.load(std::memory_order_acquire) || !worker_->tryClaim()) {
      return std::nullopt;
    }
    const uint64_t seq = ++seq_;
    t.label = CallLabel{op, seq, getRank(), getSize()};
    t.fp = fp;
    t.fp.seq = seq;
    t.fp.rank = getRank();
    t.timeout = timeout;
    t.tag = traceTag(op, seq);
    FlightRecorder& recorder = FlightRecorder::get();
    if (recorder.enabled()) {
      recorder.setGroupDesc(frGroup_, getGroupDesc());
      t.fr = recorder.record(frGroup_, seq, op, {tensor}, {tensor}, timeout);
    }
    t.staged.emplace();
    t.staged->small = job;
    // The first pass with the GIL still held: a call whose peers' messages are
    // here already (and any call of a world of one) ends in it, and the GIL is not
    // given up and taken back for nothing. A call that has to wait lets it go.
    bool ended = runCpu(t, std::chrono::nanoseconds(0));
    if (!ended) {
      if (gilHeld) {
        Py_BEGIN_ALLOW_THREADS
        ended = runCpu(t, kForever);
        Py_END_ALLOW_THREADS
      } else {
        ended = runCpu(t, kForever);
      }
    }
    worker_->release();
    RC_ASSERT(ended, "a blocking small collective returned unfinished");
  }
  endCpu(t);
  if (t.error) {
    // The backend keeps a failed call's memory until it is stopped, as the general
    // path's (keepAfterFailure: its body holds the tensor), whatever the caller does.
    auto held = std::make_shared<at::Tensor>(tensor);
    {
      std::lock_guard<Mutex> lock(keptMutex_);
      kept_.push_back(std::move(held));
    }
    std::rethrow_exception(t.error);
  }
  return t.fp.seq;
}

void RingcollBackend::runOnWorker(const std::shared_ptr<CpuTask>& task) {
  runCpu(*task, kForever);
  // The Work's future's callbacks may wait for the next collective of this group,
  // which this thread must be free to run: they go to the callback threads.
  endCpu(*task, callbacks_.get());
}

void RingcollBackend::endCpu(CpuTask& t, CallbackRunner* callbacks) {
  checkNoLockHeld("ending a CPU collective (future callbacks, hooks)");
  t.staged.reset();  // its finish closure holds the user's tensors
  if (!t.error) {
    if (t.work) {  // runSmallNow's has none (and then no hook is registered)
      runCompletionHooks(completionKey(*t.work));
      t.work->finish(callbacks);
    }
    afterCollective();
    return;
  }
  if (t.work) t.work->finishWithError(t.error, callbacks);
  // After the error is out and the group marked broken: the dump may take a
  // second, and later calls fail at once meanwhile (launchCpu) rather than queue
  // behind it.
  if (t.timedOut) runFailureHooks();
}

bool RingcollBackend::runCpu(CpuTask& t, std::chrono::nanoseconds budget) {
  try {
    if (!t.exec) {
      const std::string why = brokenReason();
      if (!why.empty()) {
        C10_THROW_ERROR(DistBackendError,
                        c10::str(t.label, ": the group is unusable after an earlier "
                                          "failure: ", why));
      }
      // Queued before abort(): it fails now. Queued before shutdown()
      // (destroy_process_group) it runs, as gloo's does: destroy completes what was
      // issued before it (checkInterrupts fails it only if its peers stop moving).
      if (stop_.load() == static_cast<int>(Stop::kAbort)) throwIfStopped(t.label);
      if (knobs_.debug) t.started = Clock::now();  // for the log line only
      FlightRecorder::get().started(t.fr);
      try {
        if (!t.staged) t.staged = t.body(*executor_);  // runSmallNow's comes staged
      } catch (const std::exception& e) {
        // Nothing was sent, but the peers entered this collective and wait for this
        // rank: the group is out of step (StreamPath::launch's rule), and they learn
        // why through the store instead of at their timeout.
        const std::string msg = c10::str(t.label, ": ", e.what());
        markBroken(msg);
        postFailureReport(store_, kFailureKey,
                          c10::str("rank ", getRank(), " failed before sending anything: ", msg));
        FlightRecorder::get().failed(t.fr, -1);
        try {
          C10_THROW_ERROR(DistBackendError, msg);
        } catch (...) {
          t.error = std::current_exception();
        }
        return true;
      }
      if (t.staged->small) {
        algo::SmallJob& small = *t.staged->small;
        small.checked = knobs_.fingerprint;
        small.fingerprint = t.fp;
        small.fingerprint.setAlgorithm(algo::SmallCollective::name(small.kind));
        t.exec = executor_->startSmall(small);
      } else {
        algo::Job& job = t.staged->job;
        if (knobs_.fingerprint) {
          job.checked = true;
          job.fingerprint = t.fp;
          job.fingerprint.setAlgorithm(job.schedule.name, job.schedule.digest);
          // Besides the job's own (a pairwise job names every rank).
          job.neighbours.insert(job.neighbours.end(), ringNeighbours_.begin(),
                                ringNeighbours_.end());
        }
        job.tag = t.tag;
        t.exec = algo::RunHandle(executor_->start(std::move(job)).release());
      }
    }
    // A collective that ends on its first pass (a small one whose peers' messages
    // are all here) reads no clock. Else in slices, so that one that waits sees a
    // peer's report, abort() and shutdown() (checkInterrupts) within kReportPoll.
    const bool first = t.exec->progress() && t.exec->done();
    const auto until = first || budget == kForever ? Clock::time_point::max()
                                                   : Clock::now() + budget;
    while (!first) {
      const auto slice = std::min(until, Clock::now() + kReportPoll);
      if (executor_->drive(*t.exec, slice, t.timeout)) break;
      if (Clock::now() >= until) return false;
      checkInterrupts(t);
    }
    if (t.staged->finish) t.staged->finish();
    if (knobs_.debug) {
      const double ms =
          std::chrono::duration<double, std::milli>(Clock::now() - t.started).count();
      std::fprintf(stderr, "[ringcoll] %s %s done in %.3f ms\n", t.label.str().c_str(),
                   t.exec->name().c_str(), ms);
    }
    t.exec.reset();
    FlightRecorder::get().completed(t.fr);
  } catch (const PeerError& e) {
    // A timeout is a hang: the flight recorder's dump (once per process) and c10d's
    // abort hooks (torch's recorder dumps from one, 2.15+) say what every rank was
    // doing, for torchfrtrace. Not for the failures that explain themselves (ranks
    // that disagree, a peer that exited): they are reported at once, and a dump
    // with stack traces costs about a second.
    FlightRecorder::get().failed(t.fr, e.peer());
    std::string msg = c10::str(t.label, ": ", e.what());
    const bool mismatch = dynamic_cast<const MismatchError*>(&e) != nullptr;
    bool reported = dynamic_cast<const ReportedError*>(&e) != nullptr;
    if (!mismatch && !reported) {
      // A peer that found a disagreement raised and may have exited already: its
      // closed connection is a symptom, its report the cause (which stays in the
      // store as it was for the ranks that have not looked yet).
      const std::string report = peerReport();
      if (!report.empty()) {
        msg = c10::str(t.label, ": ", report, " (then: ", e.what(), ")");
        reported = true;
      }
    }
    markBroken(msg);
    keepAfterFailure(t);
    if (mismatch || (!reported && !e.timedOut() && e.peer() >= 0)) {
      // Tell the other ranks (checkInterrupts): those that exchanged no header with
      // the disagreeing ones, and those that wait on a rank that waited on a peer
      // that exited (a transport reports an exit only to the ranks that still need
      // something from it). Best effort: they time out otherwise.
      postFailureReport(store_, kFailureKey,
                        c10::str("rank ", getRank(), " found that ", e.what()));
    }
    try {
      C10_THROW_ERROR(DistBackendError, msg);
    } catch (...) {
      t.error = std::current_exception();
    }
    t.timedOut = e.timedOut();
  } catch (...) {
    FlightRecorder::get().failed(t.fr, -1);
    keepAfterFailure(t);
    t.error = std::current_exception();
  }
  return true;
}

void RingcollBackend::runFailureHooks() {
  FlightRecorder::get().write(globalRank_, /*once=*/true);
  for (const auto& h : abortHooks_.snapshot()) {
    try {
      (*h)();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[ringcoll rank %d] an abort hook failed: %s\n", getRank(), e.what());
    }
  }
}

uint64_t RingcollBackend::completionKey(const c10d::Work& work) {
#ifdef RINGCOLL_COMPLETION_HOOKS
  return work.getCompletionKey();
#else
  return reinterpret_cast<uintptr_t>(&work);
#endif
}

void RingcollBackend::runCompletionHooks(uint64_t key) {
#ifdef RINGCOLL_COMPLETION_HOOKS
  if (completionHooks_.empty()) return;
  c10d::CompletionHookArgs args;
  args.completionKey = key;
  for (const auto& h : completionHooks_.snapshot()) (*h)(args);
#else
  (void)key;
#endif
}

}  // namespace ringcoll
