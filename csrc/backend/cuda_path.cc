#include "backend/cuda_path.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backend/work.h"
#include "common/cuda_check.h"

namespace ringcoll {

namespace {
// Where a rank that detected a failure leaves it for the others (one per group).
const char* const kCudaFailureKey = "ringcoll/cuda/failure";
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

// The Work of a CUDA collective. Completion is the end event on the comm stream;
// the watchdog marks it succeeded (the event completed and no kernel was stopped)
// or failed (cuda_path.h).
class CudaWork final : public c10d::Work {
 public:
  CudaWork(int rank, c10d::OpType type, std::string label, uint64_t seq,
           c10::DeviceIndex device, std::vector<at::Tensor> outputs,
           std::chrono::milliseconds timeout, bool blocking,
           std::shared_ptr<CudaReducer> reducer)
      : c10d::Work(rank, type),
        label_(std::move(label)),
        seq_(seq),
        device_(device),
        outputs_(std::move(outputs)),
        timeout_(timeout),
        blocking_(blocking),
        reducer_(std::move(reducer)),
        start_(std::chrono::steady_clock::now()) {
    RC_CUDA_CHECK(cudaEventCreateWithFlags(&end_, cudaEventDisableTiming));
    future_ = c10::make_intrusive<c10::ivalue::Future>(
        c10::ListType::create(c10::TensorType::get()),
        std::vector<c10::Device>{c10::Device(c10::kCUDA, device)});
  }
  ~CudaWork() override { cudaEventDestroy(end_); }

  cudaEvent_t endEvent() const { return end_; }
  const std::string& label() const { return label_; }
  std::chrono::steady_clock::time_point started() const { return start_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  bool isCompleted() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return exception_ || succeeded_ || cudaEventQuery(end_) == cudaSuccess;
  }
  bool isSuccess() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return !exception_ &&
           (succeeded_ || (cudaEventQuery(end_) == cudaSuccess && !reducer_->kernelsStopped()));
  }
  std::vector<at::Tensor> result() override { return outputs_; }
  uint64_t getSequencenumber() const override { return seq_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  // Blocking (RINGCOLL_BLOCKING_WAIT=1, or an explicit timeout): the host waits
  // until the collective finished, and a failure raises here. Otherwise only a
  // failure the watchdog has already seen raises. Either way the caller's current
  // stream is then ordered after the collective.
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override {
    if (blocking_ || timeout != kNoTimeout) hostWait(timeout);
    rethrowIfFailed();
    c10::cuda::CUDAGuard guard(device_);
    RC_CUDA_CHECK(cudaStreamWaitEvent(c10::cuda::getCurrentCUDAStream(device_).stream(), end_,
                                      0));
    return true;
  }
  void synchronize() override { wait(); }

  void fail(const std::string& msg) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!exception_ && !succeeded_) exception_ = backendError(msg);
  }
  void markSucceeded() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!exception_) succeeded_ = true;
  }

 private:
  void rethrowIfFailed() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (exception_) std::rethrow_exception(exception_);
  }

  void hostWait(std::chrono::milliseconds timeout) {
    using Clock = std::chrono::steady_clock;
    const auto deadline =
        timeout == kNoTimeout ? Clock::time_point::max() : Clock::now() + timeout;
    Clock::time_point stoppedSince{};
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (exception_) std::rethrow_exception(exception_);
        if (succeeded_) return;
      }
      const auto now = Clock::now();
      if (cudaEventQuery(end_) == cudaSuccess) {
        // Finished, unless kernels were stopped: then some of it was skipped, and
        // the watchdog is about to fail this work with the reason; wait for it.
        if (!reducer_->kernelsStopped()) return;
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
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  const std::string label_;
  const uint64_t seq_;
  const c10::DeviceIndex device_;
  std::vector<at::Tensor> outputs_;
  const std::chrono::milliseconds timeout_;
  const bool blocking_;
  const std::shared_ptr<CudaReducer> reducer_;
  const std::chrono::steady_clock::time_point start_;
  bool succeeded_ = false;
  cudaEvent_t end_ = nullptr;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

namespace {
// The communicator's unique id, from rank 0 to all through the group's store.
ncclUniqueId exchangeUniqueId(const c10::intrusive_ptr<c10d::Store>& store, int rank) {
  const std::string key = "ringcoll/nccl/unique_id";
  ncclUniqueId id;
  if (rank == 0) {
    RC_NCCL_CHECK(ncclGetUniqueId(&id), -1);
    const auto* p = reinterpret_cast<const uint8_t*>(&id);
    store->set(key, std::vector<uint8_t>(p, p + sizeof(id)));
  } else {
    const std::vector<uint8_t> bytes = store->get(key);
    TORCH_CHECK(bytes.size() == sizeof(id), "ringcoll: NCCL unique id from the store has ",
                bytes.size(), " bytes, expected ", sizeof(id));
    std::memcpy(&id, bytes.data(), sizeof(id));
  }
  return id;
}
}  // namespace

CudaPath::CudaPath(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                   std::chrono::milliseconds timeout, const Knobs& knobs,
                   c10::DeviceIndex device, algo::Tracer* tracer)
    : rank_(rank),
      size_(size),
      timeout_(timeout),
      device_(device),
      knobs_(knobs),
      store_(store),
      stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device)) {
  c10::cuda::CUDAGuard guard(device_);
  if (size_ > 1) neighbours_ = {(rank_ + size_ - 1) % size_, (rank_ + 1) % size_};
  const ncclUniqueId id = exchangeUniqueId(store, rank);
  try {
    comm_ = std::make_unique<NcclComm>(id, rank, size, timeout_);
  } catch (const PeerError& e) {
    C10_THROW_ERROR(DistBackendError, c10::str("ringcoll (cuda:", static_cast<int>(device_),
                                               "): ", e.what()));
  }
  transport_ = std::make_unique<NcclTransport>(*comm_, rank, size, stream_.stream(),
                                               knobs.gpuChunkBytes);
  reducer_ = std::make_shared<CudaReducer>(stream_.stream(), static_cast<size_t>(size) + 1);
  executor_ = std::make_unique<algo::Executor>(*transport_, *reducer_, knobs.gpuChunkBytes);
  executor_->setTracer(tracer);
  watchdog_ = std::thread([this] { watchdog(); });
}

CudaPath::~CudaPath() {
  std::unique_lock<std::mutex> lock(mutex_);
  // shutdown: outstanding work may finish (the watchdog retires it), for a while.
  const auto until = std::chrono::steady_clock::now() + kShutdownGrace;
  while (!pending_.empty() && broken_.empty() && std::chrono::steady_clock::now() < until) {
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    lock.lock();
  }
  stopping_ = true;
  if (!pending_.empty() && broken_.empty()) {
    failAll("the process group was shut down (destroy_process_group) while this collective "
            "was still waiting for its peers",
            /*report=*/false, /*teardown=*/false);
  }
  lock.unlock();
  cv_.notify_all();
  watchdog_.join();
  // End the communicator before freeing device memory: cudaFree waits for the
  // device. Without a failure, in order first (finalize: a peer still receiving this
  // rank's last sends gets them, instead of "remote process exited"), bounded by
  // kShutdownGrace; after a failure, or past that, abort: an NCCL kernel waiting for
  // a dead peer only exits once its communicator is aborted.
  {
    auto lk = comm_->lock();
    if (broken_.empty()) {
      comm_->finalize(kShutdownGrace);
    } else {
      comm_->abort();
    }
  }
  comm_.reset();
  executor_.reset();
  transport_.reset();
}

void CudaPath::abort(const std::string& why) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (broken_.empty()) failAll(why, /*report=*/false, /*teardown=*/false);
  stopping_ = true;
  cv_.notify_all();
}

c10::intrusive_ptr<c10d::Work> CudaPath::launch(
    c10d::OpType type, const algo::TraceTag& tag, const std::string& label, uint64_t seq,
    const algo::Fingerprint& fp, std::chrono::milliseconds timeout,
    const std::vector<at::Tensor>& inputs, std::vector<at::Tensor> outputs, const Body& body) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!broken_.empty()) {
      C10_THROW_ERROR(DistBackendError,
                      c10::str(label, ": the group is unusable after an earlier failure: ",
                               broken_));
    }
  }
  std::lock_guard<std::mutex> launching(launchMutex_);
  c10::cuda::CUDAGuard guard(device_);
  // The comm stream waits for the caller's stream: inputs are ready.
  auto caller = c10::cuda::getCurrentCUDAStream(device_);
  cudaEvent_t ready;
  RC_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  RC_CUDA_CHECK(cudaEventRecord(ready, caller.stream()));
  RC_CUDA_CHECK(cudaStreamWaitEvent(stream_.stream(), ready, 0));
  RC_CUDA_CHECK(cudaEventDestroy(ready));

  auto work = c10::make_intrusive<CudaWork>(rank_, type, label, seq, device_, outputs, timeout,
                                            knobs_.blockingWait, reducer_);
  {
    // Everything the body enqueues (copies, kernels, temporaries' allocations) goes
    // on the comm stream.
    c10::cuda::CUDAStreamGuard streamGuard(stream_);
    try {
      // Enqueues everything on the streams; the host never waits for the device
      // (only for a first connection to a peer, bounded by the timeout).
      Staged staged = body(*executor_);
      staged.job.tag = tag;
      if (knobs_.fingerprint && knobs_.gpuFingerprint) {
        staged.job.checked = true;
        staged.job.fingerprint = fp;
        staged.job.fingerprint.setAlgorithm(staged.job.schedule.name);
        staged.job.neighbours = neighbours_;
      }
      executor_->run(std::move(staged.job), timeout);
      if (staged.finish) staged.finish();
    } catch (const PeerError& e) {
      std::lock_guard<std::mutex> lock(mutex_);
      const std::string why = c10::str(e.what(), e.peer() >= 0 ? c10::str(" (rank ", e.peer(), ")")
                                                                : std::string());
      if (broken_.empty()) failAll(c10::str(label, ": ", why), /*report=*/true, /*teardown=*/false);
      C10_THROW_ERROR(DistBackendError, c10::str(label, ": ", why));
    }
    auto protect = [this](const std::vector<at::Tensor>& list) {
      for (const auto& t : list) {
        if (t.defined() && t.is_cuda() && t.storage().data_ptr().get()) {
          c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream_);
        }
      }
    };
    protect(inputs);
    protect(outputs);
    RC_CUDA_CHECK(cudaEventRecord(work->endEvent(), stream_.stream()));
    // Completed for the device: the future records an event on the current (comm)
    // stream, and whoever waits on it waits on that stream, not the host.
    work->getFuture()->markCompleted(c10::IValue(outputs));
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_.push_back(work);
  }
  cv_.notify_all();
  return work;
}

std::string CudaPath::peerReport() { return readFailureReport(store_, kCudaFailureKey); }

std::string CudaPath::mismatchText() {
  const int peer = reducer_->mismatchPeer();
  algo::Fingerprint mine;
  uint8_t want[kHeaderBytes], got[kHeaderBytes];
  reducer_->mismatchBytes(want, got);
  std::memcpy(&mine, want, sizeof(mine));
  mine.rank = rank_;  // left out of the device's bytes (executor_waves.cc)
  std::string text = algo::mismatch(mine, got, peer);
  if (text.empty()) text = c10::str("rank ", peer, "'s header differed");
  return text;
}

void CudaPath::retireFinished() {
  // The stop word is read after the event: a check kernel that set it ran before the
  // event completed, so a work whose kernels were skipped is never retired as a
  // success.
  while (!pending_.empty() && cudaEventQuery(pending_.front()->endEvent()) == cudaSuccess &&
         !reducer_->kernelsStopped()) {
    pending_.front()->markSucceeded();
    pending_.pop_front();
  }
}

void CudaPath::failAll(const std::string& why, bool report, bool teardown) {
  // (0) work the device finished before anything was stopped succeeded: a failure
  // seen by a later launch (or between two watchdog looks) is not its failure.
  retireFinished();
  // (1) every outstanding Work fails, before (2)-(3) can let its event complete.
  for (auto& w : pending_) w->fail(why);
  pending_.clear();
  broken_ = why;
  // (2) nothing queued behind the failure reduces or copies stale data.
  reducer_->stopKernels();
  // (3) stuck NCCL kernels exit; nobody calls the communicator any more.
  {
    auto lk = comm_->lock();
    comm_->abort();
  }
  // (4) the other ranks learn why.
  if (report) postFailureReport(store_, kCudaFailureKey, c10::str("rank ", rank_, " reported: ", why));
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

void CudaPath::watchdog() {
  const int prev = (rank_ - 1 + size_) % size_;
  const int next = (rank_ + 1) % size_;
  const bool teardown = !knobs_.blockingWait && knobs_.asyncErrorHandling == "teardown";
  auto lastStoreLook = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_ && broken_.empty()) {
    cv_.wait_for(lock, kWatchdogPoll);
    if (stopping_ || !broken_.empty()) break;
    retireFinished();
    const bool stopped = reducer_->kernelsStopped();
    if (pending_.empty() && !stopped) continue;
    const auto now = std::chrono::steady_clock::now();
    std::string why;
    bool report = true;
    if (reducer_->mismatchPeer() >= 0) {
      why = mismatchText();
    } else if (!pending_.empty()) {
      ncclResult_t async;
      {
        auto lk = comm_->lock();
        async = comm_->asyncError();
      }
      const auto& oldest = pending_.front();
      if (async != ncclSuccess && async != ncclInProgress) {
        why = c10::str(oldest->label(), ": NCCL error: ", ncclGetErrorString(async),
                       " (a peer exited or its connection failed), waiting for rank ", prev,
                       " (receive) / rank ", next, " (send); communicator aborted");
      }
      for (const auto& w : pending_) {
        if (!why.empty()) break;
        if (now - w->started() > w->timeout()) {
          why = c10::str(w->label(), ": Timed out after ", w->timeout().count(),
                         " ms waiting for rank ", prev, " (receive) / rank ", next,
                         " (send); communicator aborted");
        }
      }
      if (why.empty() && now - oldest->started() > kReportPoll &&
          now - lastStoreLook > kReportPoll) {
        lastStoreLook = now;
        const std::string other = peerReport();
        if (!other.empty()) {
          why = c10::str(oldest->label(), ": failed because ", other);
          report = false;
        }
      }
    }
    if (why.empty()) continue;
    if (reducer_->mismatchPeer() >= 0 && !pending_.empty()) {
      why = c10::str(pending_.front()->label(), ": ", why);
    }
    failAll(why, report, teardown);
    break;
  }
}

}  // namespace ringcoll
