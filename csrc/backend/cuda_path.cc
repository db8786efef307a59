#include "backend/cuda_path.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>

#include "backend/work.h"
#include "common/cuda_check.h"

namespace ringcoll {

// The Work of a CUDA collective. Completion is the end event on the comm stream.
class CudaWork final : public c10d::Work {
 public:
  CudaWork(int rank, c10d::OpType type, std::string label, uint64_t seq,
           c10::DeviceIndex device, std::vector<at::Tensor> outputs)
      : c10d::Work(rank, type),
        label_(std::move(label)),
        seq_(seq),
        device_(device),
        outputs_(std::move(outputs)),
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

  bool isCompleted() override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (exception_) return true;
    return cudaEventQuery(end_) == cudaSuccess;
  }
  bool isSuccess() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return !exception_ && cudaEventQuery(end_) == cudaSuccess;
  }
  std::vector<at::Tensor> result() override { return outputs_; }
  uint64_t getSequencenumber() const override { return seq_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  // Orders the caller's current stream after the collective; the host does not
  // block. A failure the watchdog has already seen is raised here.
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (exception_) std::rethrow_exception(exception_);
    }
    c10::cuda::CUDAGuard guard(device_);
    RC_CUDA_CHECK(cudaStreamWaitEvent(c10::cuda::getCurrentCUDAStream(device_).stream(), end_,
                                      0));
    if (timeout != kNoTimeout) {
      // An explicit timeout asks for a host wait bounded by it.
      const auto deadline = std::chrono::steady_clock::now() + timeout;
      while (!isCompleted()) {
        if (std::chrono::steady_clock::now() > deadline) {
          C10_THROW_ERROR(DistBackendError,
                          c10::str(label_, ": Timed out after ", timeout.count(),
                                   " ms in wait(), waiting for its ring neighbours"));
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      std::lock_guard<std::mutex> lock(mutex_);
      if (exception_) std::rethrow_exception(exception_);
    }
    return true;
  }
  void synchronize() override { wait(); }

  void fail(const std::string& msg) {
    std::exception_ptr ep;
    try {
      C10_THROW_ERROR(DistBackendError, msg);
    } catch (...) {
      ep = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (!exception_) exception_ = ep;
  }

 private:
  const std::string label_;
  const uint64_t seq_;
  const c10::DeviceIndex device_;
  std::vector<at::Tensor> outputs_;
  const std::chrono::steady_clock::time_point start_;
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
      stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device)) {
  c10::cuda::CUDAGuard guard(device_);
  const ncclUniqueId id = exchangeUniqueId(store, rank);
  RC_NCCL_CHECK(ncclCommInitRank(&comm_, size, id, rank), -1);
  transport_ = std::make_unique<NcclTransport>(comm_, rank, size, stream_.stream(),
                                               knobs.chunkBytes);
  reducer_ = std::make_unique<CudaReducer>(stream_.stream());
  executor_ = std::make_unique<algo::Executor>(*transport_, *reducer_, knobs.chunkBytes);
  executor_->setTracer(tracer);
  watchdog_ = std::thread([this] { watchdog(); });
}

CudaPath::~CudaPath() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  watchdog_.join();
  executor_.reset();
  transport_.reset();
  if (comm_) ncclCommDestroy(comm_);
}

c10::intrusive_ptr<c10d::Work> CudaPath::launch(
    c10d::OpType type, const algo::TraceTag& tag, const std::string& label, uint64_t seq,
    const std::vector<at::Tensor>& inputs, std::vector<at::Tensor> outputs, const Body& body) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!broken_.empty()) {
      C10_THROW_ERROR(DistBackendError,
                      c10::str(label, ": the group is unusable after an earlier failure: ",
                               broken_));
    }
  }
  c10::cuda::CUDAGuard guard(device_);
  // The comm stream waits for the caller's stream: inputs are ready.
  auto caller = c10::cuda::getCurrentCUDAStream(device_);
  cudaEvent_t ready;
  RC_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  RC_CUDA_CHECK(cudaEventRecord(ready, caller.stream()));
  RC_CUDA_CHECK(cudaStreamWaitEvent(stream_.stream(), ready, 0));
  RC_CUDA_CHECK(cudaEventDestroy(ready));

  auto work = c10::make_intrusive<CudaWork>(rank_, type, label, seq, device_, outputs);
  {
    // Everything the body enqueues (copies, kernels, temporaries' allocations) goes
    // on the comm stream.
    c10::cuda::CUDAStreamGuard streamGuard(stream_);
    try {
      // Enqueues everything on the streams; the host never waits for the device.
      Staged staged = body(*executor_);
      staged.job.tag = tag;
      executor_->run(std::move(staged.job), timeout_);
      if (staged.finish) staged.finish();
    } catch (const PeerError& e) {
      std::lock_guard<std::mutex> lock(mutex_);
      broken_ = c10::str(label, ": ", e.what());
      C10_THROW_ERROR(DistBackendError, broken_);
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

void CudaPath::watchdog() {
  const int prev = (rank_ - 1 + size_) % size_;
  const int next = (rank_ + 1) % size_;
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    cv_.wait_for(lock, std::chrono::milliseconds(50));
    while (!pending_.empty() && cudaEventQuery(pending_.front()->endEvent()) == cudaSuccess) {
      pending_.pop_front();
    }
    if (pending_.empty()) continue;
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm_, &async);
    const auto& oldest = pending_.front();
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - oldest->started());
    std::string why;
    if (async != ncclSuccess && async != ncclInProgress) {
      why = c10::str("NCCL error ", ncclGetErrorString(async));
    } else if (waited > timeout_) {
      why = c10::str("Timed out after ", timeout_.count(), " ms");
    }
    if (why.empty()) continue;
    broken_ = c10::str(oldest->label(), ": ", why, " waiting for rank ", prev,
                       " (receive) / rank ", next, " (send); communicator aborted");
    ncclCommAbort(comm_);
    comm_ = nullptr;
    for (auto& w : pending_) w->fail(c10::str(w->label(), ": ", broken_));
    pending_.clear();
    return;  // the communicator is gone; nothing more to watch
  }
}

}  // namespace ringcoll
