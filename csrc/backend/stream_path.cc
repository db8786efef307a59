#include "backend/stream_path.h"

#include <c10/util/Exception.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <utility>

#include "backend/work.h"
#include "common/errors.h"
#include "common/failure.h"

namespace ringcoll {

namespace {
// How often the watchdog looks at the device (the store: kReportPoll).
constexpr auto kWatchdogPoll = std::chrono::milliseconds(10);

std::exception_ptr backendError(const std::string& msg) {
  try {
    C10_THROW_ERROR(DistBackendError, msg);
  } catch (...) {
    return std::current_exception();
  }
}
}  // namespace

// The Work of a collective on a stream device. Completion is its end event; the
// watchdog marks it succeeded (the end was reached and no kernel was stopped) or
// failed (stream_path.h), and the path settles it (completes its future, lets its
// memory go) with no lock held. It keeps the device alive, so it may outlive the
// path.
class StreamWork final : public c10d::Work {
 public:
  StreamWork(int rank, c10d::OpType type, CallLabel label, uint64_t seq,
             std::shared_ptr<StreamDevice> device, std::vector<at::Tensor> outputs,
             std::chrono::milliseconds timeout, bool blocking, std::string peers)
      : c10d::Work(rank, type),
        label_(std::move(label)),
        peers_(std::move(peers)),
        seq_(seq),
        device_(std::move(device)),
        outputs_(std::move(outputs)),
        timeout_(timeout),
        blocking_(blocking),
        start_(std::chrono::steady_clock::now()) {
    auto type_ = c10::ListType::create(c10::TensorType::get());
    future_ = device_->futureOnDevice()
        ? c10::make_intrusive<c10::ivalue::Future>(type_,
                                                   std::vector<c10::Device>{device_->device()})
        : c10::make_intrusive<c10::ivalue::Future>(type_);
  }
  // Its last reference may be dropped by the path (settle) or by Python (a Work the
  // caller let go): either way with no ringcoll lock held, since the outputs and
  // what it kept may be the last references to Python-owned tensors.
  ~StreamWork() override {
    checkNoLockHeld("destroying a stream Work (its tensors)");
    // What it kept (the user's inputs, a schedule's scratch) is freed now: the
    // device must be done with it (the path keeps failed works until it drained).
    if (checksOn() && (!keep_.empty() || owned_) && end_ && !succeeded_) {
      bool done = false;
      try {
        done = device_->reached(end_);
      } catch (...) {
      }
      if (!done && !device_->mayFreeUnfinished()) {
        checkFailed(c10::str(label_, ": its Work's memory is freed while the device may "
                                     "still use it (not finished, transfers not drained)"));
      }
    }
  }

  void setEnd(StreamDevice::EventPtr end) { end_ = std::move(end); }
  const StreamDevice::EventPtr& end() const { return end_; }
  // Before anyone else holds it: a captured collective's Work (backend/capture.h).
  // Complete for the host (the collective runs at each replay, not now); wait()
  // does nothing (the caller's stream was ordered after it at capture).
  void markCaptured() {
    std::lock_guard<Mutex> lock(mutex_);
    captured_ = true;
    succeeded_ = true;
  }
  // Memory the device may read or write until the end: the user's tensors (on a
  // host device nothing else keeps them; CUDA also records them on the stream) and
  // the job's own (a schedule's scratch). Let go once the work succeeded (settle);
  // a failed work keeps it until it is destroyed, which the path allows only once
  // the device's work on it was stopped (failAll).
  void keepUntilEnd(const std::vector<at::Tensor>& tensors, std::shared_ptr<void> owned) {
    std::lock_guard<Mutex> lock(mutex_);
    keep_.insert(keep_.end(), tensors.begin(), tensors.end());
    if (owned) owned_ = std::move(owned);
  }
  const CallLabel& label() const { return label_; }
  const std::string& peers() const { return peers_; }
  std::chrono::steady_clock::time_point started() const { return start_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  // The end was reached (a device fault throws).
  bool reached() const { return device_->reached(end_); }

  // What a program polls, with the GIL held, as fast as it can: the lock it takes
  // is never held by a thread that may wait for the GIL (common/locks.h).
  bool isCompleted() override {
    std::lock_guard<Mutex> lock(mutex_);
    if (error_ || succeeded_) return true;
    try {
      return device_->reached(end_);
    } catch (...) {
      return true;  // a fault: the watchdog fails it
    }
  }
  bool isSuccess() const override {
    std::lock_guard<Mutex> lock(mutex_);
    if (error_) return false;
    if (succeeded_) return true;
    try {
      return device_->reached(end_) && device_->intact();
    } catch (...) {
      return false;
    }
  }
  std::exception_ptr exception() const override {
    std::lock_guard<Mutex> lock(mutex_);
    return error_;
  }
  std::vector<at::Tensor> result() override { return outputs_; }
  uint64_t getSequencenumber() const override { return seq_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  // Blocking (RINGCOLL_BLOCKING_WAIT=1, an explicit timeout, or a device without
  // caller streams): the host waits until the collective finished, and a failure
  // raises here. Otherwise only a failure the watchdog has already seen raises, and
  // the caller's current stream is ordered after the collective.
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override {
    // The caller's stream was joined to it at capture (launchCaptured); waiting on
    // its end, an event recorded inside the capture, from outside it is not allowed.
    if (captured_) return true;
    if (blocking_ || timeout != kNoTimeout || !device_->hasCallerStream()) hostWait(timeout);
    rethrowIfFailed();
    if (device_->hasCallerStream()) {
      device_->callerWaits(end_);
    } else {
      // A host device (the emulation): once wait() returns the future is done and
      // value() has the outputs, as the CPU path's Work and torch's gloo give them;
      // the watchdog's settle may not have come yet.
      completeFuture();
    }
    return true;
  }
  void synchronize() override { wait(); }

  // Under the path's lock: the state only. Its future is failed by settle().
  void fail(const std::string& msg) {
    std::lock_guard<Mutex> lock(mutex_);
    if (error_ || succeeded_) return;
    error_ = backendError(msg);
  }
  // Under the path's lock: the state only (settle() does the rest).
  void markSucceeded() {
    std::lock_guard<Mutex> lock(mutex_);
    if (!error_) succeeded_ = true;
  }
  // With no lock held (the path's settle(), or a launch that raises): a succeeded
  // work lets its memory go and completes its future with the outputs written (on a
  // host device; on CUDA it was completed for the device at launch); a failed one
  // fails its future. The callbacks (DDP's comm hooks, then()s) run on this thread.
  void settle() {
    checkNoLockHeld("settling a stream Work (future callbacks, kept tensors)");
    std::vector<at::Tensor> keep;
    std::shared_ptr<void> owned;
    std::exception_ptr error;
    {
      std::lock_guard<Mutex> lock(mutex_);
      error = error_;
      if (succeeded_) {
        keep.swap(keep_);
        owned.swap(owned_);
      }
    }
    keep.clear();  // here, unlocked: these may be the last references
    owned.reset();
    completeFuture();
  }

 private:
  void rethrowIfFailed() {
    std::lock_guard<Mutex> lock(mutex_);
    if (error_) std::rethrow_exception(error_);
  }

  // Completes the future once, whoever comes first (settle() or a host wait()); a
  // caller that comes second returns once the first has completed it. With no lock
  // held: the callbacks run in the completing thread.
  void completeFuture() {
    checkNoLockHeld("completing a stream Work's future (its callbacks)");
    std::exception_ptr error;
    bool mine = false;
    {
      std::lock_guard<Mutex> lock(mutex_);
      error = error_;
      mine = !futureClaimed_;
      futureClaimed_ = true;
    }
    if (!mine) {
      future_->wait();
      return;
    }
    if (future_->completed()) return;  // CUDA: completed for the device at launch
    if (error) {
      future_->setError(error);
    } else {
      future_->markCompleted(c10::IValue(outputs_));
    }
  }

  void hostWait(std::chrono::milliseconds timeout) {
    using Clock = std::chrono::steady_clock;
    const auto deadline =
        timeout == kNoTimeout ? Clock::time_point::max() : Clock::now() + timeout;
    Clock::time_point stoppedSince{};
    for (;;) {
      {
        std::lock_guard<Mutex> lock(mutex_);
        if (error_) std::rethrow_exception(error_);
        if (succeeded_) return;
      }
      const auto now = Clock::now();
      bool done = false;
      try {
        done = device_->reached(end_);
      } catch (const std::exception&) {
        // A device fault: the watchdog fails this work with it; wait for that.
      }
      if (done) {
        // Finished, unless kernels were stopped: then some of it was skipped, and
        // the watchdog is about to fail this work with the reason; wait for it.
        if (device_->intact()) return;
        if (stoppedSince == Clock::time_point{}) stoppedSince = now;
        if (now - stoppedSince > std::chrono::seconds(5)) {
          C10_THROW_ERROR(DistBackendError,
                          c10::str(label_, ": stopped after a failure of this group"));
        }
      }
      if (now > deadline) {
        C10_THROW_ERROR(DistBackendError,
                        c10::str(label_, ": Timed out after ", timeout.count(),
                                 " ms in wait(), waiting for its ring neighbours"));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  const CallLabel label_;
  const std::string peers_;  // StreamPath::launch's `peers`
  const uint64_t seq_;
  const std::shared_ptr<StreamDevice> device_;
  std::vector<at::Tensor> outputs_;
  const std::chrono::milliseconds timeout_;
  const bool blocking_;
  const std::chrono::steady_clock::time_point start_;
  StreamDevice::EventPtr end_;
  bool captured_ = false;  // markCaptured(): set before the Work is shared
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  // Guards the state below (c10d::Work's own mutex_ is not used: it is not a
  // ringcoll::Mutex, and a Work's lock is what a polling program takes).
  mutable Mutex mutex_{"StreamWork::mutex_"};
  std::exception_ptr error_;
  bool succeeded_ = false;
  bool futureClaimed_ = false;  // completeFuture() ran or runs
  std::vector<at::Tensor> keep_;
  std::shared_ptr<void> owned_;
};

StreamPath::StreamPath(std::shared_ptr<StreamDevice> device,
                       const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       const Knobs& knobs, std::vector<int> neighbours, bool fingerprint)
    : device_(std::move(device)),
      rank_(rank),
      size_(size),
      knobs_(knobs),
      store_(store),
      neighbours_(std::move(neighbours)),
      fingerprint_(fingerprint),
      blocking_(knobs.blockingWait || !device_->hasCallerStream()),
      teardown_(!blocking_ && knobs.asyncErrorHandling == "teardown") {
  watchdog_ = std::thread([this] { watchdog(); });
}

StreamPath::~StreamPath() {
  std::unique_lock<Mutex> lock(mutex_);
  // shutdown: outstanding work finishes (the watchdog retires it) while it moves,
  // as on the CPU path and as ProcessGroupNCCL's shutdown flushes what was issued:
  // the grace counts from the last work retired, not from the start, so a long queue
  // of large collectives is not failed for being long.
  size_t left = pending_.size();
  auto lastMove = std::chrono::steady_clock::now();
  while (!pending_.empty() && broken_.empty() &&
         std::chrono::steady_clock::now() - lastMove < kShutdownGrace) {
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    lock.lock();
    if (pending_.size() < left) {
      left = pending_.size();
      lastMove = std::chrono::steady_clock::now();
    }
  }
  stopping_ = true;
  if (!pending_.empty() && broken_.empty()) {
    failEach("the process group was shut down (destroy_process_group)");
  }
  const bool clean = broken_.empty();
  lock.unlock();
  cv_.notify_all();
  watchdog_.join();
  lock.lock();
  settle(lock);
  lock.unlock();
  // Without a failure, in order (a peer still receiving this rank's last sends gets
  // them, instead of "remote process exited"), bounded by kShutdownGrace; after a
  // failure abort: a transfer waiting for a dead peer only ends once aborted.
  if (clean) {
    device_->finalize(kShutdownGrace);
  } else {
    device_->abortTransfers();
  }
}

void StreamPath::failEach(const std::string& why) {
  try {
    retireFinished();
  } catch (const std::exception&) {
  }
  for (auto& w : pending_) {
    w->fail(c10::str(w->label(), ": ", why, " while it waited for ", waitedFor(*w)));
  }
  failAll(why, /*report=*/false, /*teardown=*/false);
}

void StreamPath::abort(const std::string& why) {
  std::unique_lock<Mutex> lock(mutex_);
  if (broken_.empty()) failEach(why);
  stopping_ = true;
  cv_.notify_all();
  settle(lock);
}

void StreamPath::enqueueJob(StreamWork& work, const algo::TraceTag& tag,
                            const algo::Fingerprint& fp, std::chrono::milliseconds timeout,
                            const std::vector<at::Tensor>& inputs,
                            const std::vector<at::Tensor>& outputs, const Body& body,
                            std::optional<Staged>& staged, bool keep) {
  staged = body(device_->executor());
  // Small collectives are the host transports' (backend: small() says no here).
  RC_ASSERT(!staged->small, "a small collective on the stream path");
  staged->job.tag = tag;
  if (fingerprint_) {
    staged->job.checked = true;
    staged->job.fingerprint = fp;
    staged->job.fingerprint.setAlgorithm(staged->job.schedule.name,
                                         staged->job.schedule.digest);
    // Besides the job's own (a point-to-point job names its peers).
    staged->job.neighbours.insert(staged->job.neighbours.end(), neighbours_.begin(),
                                  neighbours_.end());
  }
  if (keep) work.keepUntilEnd(inputs, staged->job.owned);
  device_->executor().run(std::move(staged->job), timeout);
  if (staged->finish) device_->enqueueFinish(std::move(staged->finish));
  StreamStats::Timer end(&device_->stats(), StreamStats::kEnd);
  device_->protect(inputs);
  device_->protect(outputs);
  work.setEnd(device_->recordEnd());
  // Completed for the device: the future records an event on the current
  // (compute) stream, and whoever waits on it waits on that stream. Nobody
  // else holds the future yet, so no callback runs here, under the locks.
  if (device_->futureOnDevice()) work.getFuture()->markCompleted(c10::IValue(outputs));
}

c10::intrusive_ptr<c10d::Work> StreamPath::launchCaptured(
    bool native, c10d::OpType type, const algo::TraceTag& tag, const CallLabel& label,
    uint64_t seq, const algo::Fingerprint& fp, std::chrono::milliseconds timeout,
    const std::vector<at::Tensor>& inputs, std::vector<at::Tensor> outputs, const Body& body,
    std::string peers) {
  // What cannot be captured raises now, on every rank that captures it (each makes
  // the same call), never a graph that replays something else.
  if (type == c10d::OpType::BARRIER) {
    C10_THROW_ERROR(DistBackendError,
                    c10::str(label, ": a barrier cannot be captured: it blocks the host "
                                    "until every rank arrived, which a replay does not "
                                    "repeat; call it outside the capture"));
  }
  if (knobs_.blockingWait) {
    C10_THROW_ERROR(DistBackendError,
                    c10::str(label, ": cannot be captured with RINGCOLL_BLOCKING_WAIT=1: "
                                    "its wait() would block the host; unset it for a group "
                                    "whose collectives are captured"));
  }
  auto work = c10::make_intrusive<StreamWork>(rank_, type, label, seq, device_, outputs,
                                              timeout, /*blocking=*/false, peers);
  work->markCaptured();
  if (native) {
    // Declared before the lock: released after it (it may hold the user's tensors).
    std::optional<Staged> staged;
    std::string failed;
    {
      std::lock_guard<Mutex> launching(launchMutex_);
      device_->stats().add(StreamStats::kCollectives);
      try {
        device_->enqueueCapturing([&] {
          enqueueJob(*work, tag, fp, timeout, inputs, outputs, body, staged, /*keep=*/false);
        });
        device_->callerWaits(work->end());  // joins the capture back
      } catch (const std::exception& e) {
        // Nothing ran, but the transport's host state (posted messages, staging,
        // pair counts) moved on with what was captured: as after any failed
        // launch, the group is broken, here and (through the store) there.
        failed = c10::str(label, ": capturing it failed: ", e.what());
        std::lock_guard<Mutex> lock(mutex_);
        if (broken_.empty()) failAll(failed, /*report=*/true, /*teardown=*/false);
      }
    }
    if (!failed.empty()) {
      {
        std::unique_lock<Mutex> lock(mutex_);
        settle(lock);  // what failAll failed
      }
      C10_THROW_ERROR(DistBackendError, failed);
    }
    return work;
  }
  // The emulation: the launch is recorded and runs at each replay (the backend's).
  CapturedLaunch launch{weak_from_this(), type, tag, label, seq, fp, timeout, inputs,
                        outputs, body, std::move(peers)};
  // Only this thread ends its capture, and it is here: the record cannot miss.
  const bool recorded = capture_->record(std::move(launch));
  RC_ASSERT(recorded, "a capturing thread's launch was not recorded");
  // Its results are written at each replay; the future is complete for the host
  // now (nobody else holds it yet: no callback runs here).
  work->getFuture()->markCompleted(c10::IValue(std::move(outputs)));
  return work;
}

c10::intrusive_ptr<c10d::Work> StreamPath::launch(
    c10d::OpType type, const algo::TraceTag& tag, const CallLabel& label, uint64_t seq,
    const algo::Fingerprint& fp, std::chrono::milliseconds timeout,
    const std::vector<at::Tensor>& inputs, std::vector<at::Tensor> outputs, const Body& body,
    std::string peers, bool* captured) {
  auto unusable = [this, &label] {
    std::lock_guard<Mutex> lock(mutex_);
    if (!broken_.empty()) {
      C10_THROW_ERROR(DistBackendError,
                      c10::str(label, ": the group is unusable after an earlier failure: ",
                               broken_));
    }
  };
  unusable();
  {
    const bool native = device_->capturing();
    const bool capturing = native || (capture_ && capture_->capturingHere());
    if (captured) *captured = capturing;
    if (capturing) {
      return launchCaptured(native, type, tag, label, seq, fp, timeout, inputs,
                            std::move(outputs), body, std::move(peers));
    }
  }
  // Declared before the launch lock is taken, so that they are let go after it is
  // released (common/locks.h): both hold the user's tensors. `staged` lives until
  // after a failure stopped the device's work: the device may still be reading the
  // job's buffer.
  c10::intrusive_ptr<StreamWork> work;
  std::optional<Staged> staged;
  std::string failed;  // the launch failed: raised once no lock is held
  {
    std::lock_guard<Mutex> launching(launchMutex_);
    unusable();  // an abort() or a failure while this call waited for the launch lock
    StreamStats& stats = device_->stats();
    StreamStats::Timer whole(&stats, StreamStats::kLaunch);
    stats.add(StreamStats::kCollectives);
    work = c10::make_intrusive<StreamWork>(rank_, type, label, seq, device_, outputs, timeout,
                                           blocking_, std::move(peers));
    // Under mutex_, once the watchdog failed the group while this launch enqueued (it
    // stopped watching then): the watchdog's reason is the cause, named by this call.
    auto failedMeanwhile = [this, &label](const std::string& then) {
      std::string why = broken_.rfind(label.str(), 0) == 0
                            ? broken_
                            : c10::str(label, ": the group failed meanwhile: ", broken_);
      if (!then.empty()) why = c10::str(why, " (then: ", then, ")");
      return why;
    };
    {
      std::lock_guard<Mutex> lock(mutex_);
      launching_ = work;
    }
    try {
      device_->enqueue([&] {
        enqueueJob(*work, tag, fp, timeout, inputs, outputs, body, staged, /*keep=*/true);
      });
    } catch (const std::exception& e) {
      // Some of this collective's transfers may be posted: the peers are out of step
      // with this rank, so the group is broken, here and (through the store) there.
      const auto* peer = dynamic_cast<const PeerError*>(&e);
      failed = c10::str(label, ": ", e.what(),
                        peer && peer->peer() >= 0 ? c10::str(" (rank ", peer->peer(), ")")
                                                  : std::string());
      std::lock_guard<Mutex> lock(mutex_);
      launching_.reset();
      if (broken_.empty()) {
        failAll(failed, /*report=*/true, /*teardown=*/false);
      } else {
        failed = failedMeanwhile(e.what());  // e.g. the wait for room, ended by the abort
      }
    }
    if (failed.empty()) {
      std::lock_guard<Mutex> lock(mutex_);
      launching_.reset();
      if (!broken_.empty()) {
        // Nobody would fail or retire the work: the call raises instead.
        failed = failedMeanwhile("");
      } else {
        pending_.push_back(work);
      }
    }
    if (!failed.empty()) {
      work->fail(failed);
      // What this launch enqueued after the watchdog's failAll drained the device
      // is stopped too, before the work's memory goes (idempotent).
      device_->abortTransfers();
    }
  }
  if (!failed.empty()) {
    {
      std::unique_lock<Mutex> lock(mutex_);
      settle(lock);  // what failAll failed
    }
    work->settle();
    C10_THROW_ERROR(DistBackendError, failed);
  }
  cv_.notify_all();
  return work;
}

std::string StreamPath::mismatchText() {
  const int peer = device_->reducer().mismatchPeer();
  algo::Fingerprint mine;
  uint8_t want[sizeof(algo::Fingerprint)], got[sizeof(algo::Fingerprint)];
  device_->reducer().mismatchBytes(want, got);
  std::memcpy(&mine, want, sizeof(mine));
  mine.rank = rank_;  // not in the device's bytes (engine/fingerprint.h's canonical)
  // The device holds what this rank expected from the peer (expectedFrom): a
  // pairwise header has its two counts the other way round from this rank's call.
  if (mine.pairwise) std::swap(mine.count, mine.countBack);
  std::string text = algo::mismatch(mine, got, peer);
  if (text.empty()) text = c10::str("rank ", peer, "'s header differed");
  return text;
}

void StreamPath::retireFinished() {
  // intact() is read after the end: a check that set the stop word, or a transfer
  // that failed, did so before the end was reached, so a work whose kernels were
  // skipped or whose bytes never came is never retired as a success.
  while (!pending_.empty() && pending_.front()->reached() && device_->intact()) {
    pending_.front()->markSucceeded();
    retired_.push_back(std::move(pending_.front()));
    pending_.pop_front();
  }
}

void StreamPath::failAll(const std::string& why, bool report, bool teardown) {
  // (0) work the device finished before anything was stopped succeeded: a failure
  // seen by a later launch (or between two watchdog looks) is not its failure.
  try {
    retireFinished();
  } catch (const std::exception&) {
    // a device fault: nothing more is retired
  }
  // (1) every outstanding Work fails, before (2)-(3) can let its end be reached. The
  // path keeps referencing them (failed_) until the device stopped using their
  // memory: their caller may have dropped them, and then these references keep
  // their tensors, outputs and scratch alive.
  for (auto& w : pending_) {
    w->fail(why);
    failed_.push_back(std::move(w));
  }
  pending_.clear();
  broken_ = why;
  // (2) nothing queued behind the failure reduces or copies stale data.
  device_->reducer().stopKernels();
  // (3) stuck transfers exit; nobody enqueues on the device any more. On the
  // emulation this returns once nothing reads or writes a job's memory any more
  // (on CUDA the caching allocator holds the user's memory for the stream).
  device_->abortTransfers();
  // (4) the other ranks learn why.
  if (report) postFailureReport(store_, kFailureKey, c10::str("rank ", rank_, " reported: ", why));
  if (teardown) {
    std::fprintf(stderr,
                 "[ringcoll rank %d] %s\n[ringcoll rank %d] RINGCOLL_ASYNC_ERROR_HANDLING="
                 "teardown: ending this process, since results of the failed collective may "
                 "already be in use on the device (RINGCOLL_ASYNC_ERROR_HANDLING=raise raises "
                 "at the next call instead; RINGCOLL_BLOCKING_WAIT=1 raises from wait())\n",
                 rank_, why.c_str(), rank_);
    std::fflush(stderr);
    std::abort();
  }
}

std::string StreamPath::waitedFor(const StreamWork& w) const {
  if (neighbours_.empty()) return w.peers().empty() ? std::string("its peers") : w.peers();
  return c10::str("rank ", neighbours_.front(), " (receive) / rank ", neighbours_.back(),
                  " (send)");
}

void StreamPath::watchdog() {
  markOwnThread();
  device_->bindThread();
  auto lastStoreLook = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point transferSeen{};
  std::unique_lock<Mutex> lock(mutex_);
  while (!stopping_ && broken_.empty()) {
    cv_.wait_for(lock, kWatchdogPoll);
    if (stopping_ || !broken_.empty()) break;
    std::string why, fault;
    bool report = true;
    try {
      retireFinished();
    } catch (const std::exception& e) {
      fault = c10::str(
          pending_.empty() ? std::string("a collective") : pending_.front()->label().str(),
          ": the device failed: ", e.what());
    }
    settleOnCallbacks(lock);
    if (stopping_ || !broken_.empty()) break;
    const bool stopped = device_->reducer().kernelsStopped();
    // What is watched: the outstanding works, oldest first, then the one enqueuing.
    std::vector<StreamWork*> watched;
    for (const auto& w : pending_) watched.push_back(w.get());
    if (launching_) watched.push_back(launching_.get());
    if (watched.empty() && !stopped) continue;
    const auto now = std::chrono::steady_clock::now();
    // In order of what explains the most: a disagreement, a transfer that failed
    // (the faults after it are its symptoms), a device fault, a timeout, another
    // rank's report.
    if (device_->reducer().mismatchPeer() >= 0) {
      why = mismatchText();
      if (!watched.empty()) why = c10::str(watched.front()->label(), ": ", why);
    } else if (!watched.empty()) {
      const StreamWork* oldest = watched.front();
      const std::string transfer = device_->transferError();
      // Ranks that disagree also post transfers of other sizes, which fail; the
      // fingerprint check queued before their payload says why, so it gets
      // kReportPoll to do so before the transfer error is reported.
      if (!transfer.empty() && transferSeen == std::chrono::steady_clock::time_point{}) {
        transferSeen = now;
      }
      if (!transfer.empty() && now - transferSeen >= kReportPoll) {
        // A peer that failed first said why in the store before it left: its exit
        // (or its group's teardown) is the symptom, the report the cause.
        const std::string other = readFailureReport(store_, kFailureKey);
        if (!other.empty()) {
          why = c10::str(oldest->label(), ": failed because ", other, " (then: ", transfer, ")");
          report = false;
        } else {
          why = c10::str(oldest->label(), ": ", transfer,
                         " (a peer exited or its connection failed), waiting for ",
                         waitedFor(*oldest), "; transfers aborted");
        }
      }
      if (why.empty() && !transfer.empty()) continue;  // the check may still speak
      if (why.empty()) why = fault;
      for (const StreamWork* w : watched) {
        if (!why.empty()) break;
        if (now - w->started() > w->timeout()) {
          why = c10::str(w->label(), ": Timed out after ", w->timeout().count(),
                         " ms waiting for ", waitedFor(*w), "; transfers aborted");
        }
      }
      if (why.empty() && now - oldest->started() > kReportPoll &&
          now - lastStoreLook > reportPollFor(size_)) {
        lastStoreLook = now;
        const std::string other = readFailureReport(store_, kFailureKey);
        if (!other.empty()) {
          why = c10::str(oldest->label(), ": failed because ", other);
          report = false;
        }
      }
    }
    if (why.empty()) continue;
    // Only a launch in progress failed: its caller gets the error, as from any
    // launch that throws, so the process goes on even under teardown.
    failAll(why, report, teardown_ && !pending_.empty());
    break;
  }
  settleOnCallbacks(lock);
}

std::vector<c10::intrusive_ptr<StreamWork>> StreamPath::takeSettled() {
  std::vector<c10::intrusive_ptr<StreamWork>> done;
  done.swap(retired_);
  done.insert(done.end(), std::make_move_iterator(failed_.begin()),
              std::make_move_iterator(failed_.end()));
  failed_.clear();
  return done;
}

void StreamPath::settleOnCallbacks(std::unique_lock<Mutex>& lock) {
  if (retired_.empty() && failed_.empty()) return;
  auto done = takeSettled();
  lock.unlock();
  callbacks_.post([done = std::move(done)]() mutable {
    for (auto& w : done) w->settle();
    done.clear();
  });
  lock.lock();
}

void StreamPath::settle(std::unique_lock<Mutex>& lock) {
  while (!retired_.empty() || !failed_.empty()) {
    auto done = takeSettled();
    lock.unlock();
    for (auto& w : done) w->settle();
    done.clear();  // the last references may be these: unlocked (common/locks.h)
    lock.lock();
  }
}

}  // namespace ringcoll
