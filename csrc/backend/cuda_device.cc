#include "backend/cuda_device.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <stdexcept>

#include "common/cuda_check.h"

namespace ringcoll {

namespace {
const char* const kUniqueIdKey = "ringcoll/nccl/unique_id";

// The communicator's unique id, from rank 0 to all through the group's store.
ncclUniqueId exchangeUniqueId(const c10::intrusive_ptr<c10d::Store>& store, int rank) {
  ncclUniqueId id;
  if (rank == 0) {
    RC_NCCL_CHECK(ncclGetUniqueId(&id), -1);
    const auto* p = reinterpret_cast<const uint8_t*>(&id);
    store->set(kUniqueIdKey, std::vector<uint8_t>(p, p + sizeof(id)));
  } else {
    const std::vector<uint8_t> bytes = store->get(kUniqueIdKey);
    TORCH_CHECK(bytes.size() == sizeof(id), "ringcoll: NCCL unique id from the store has ",
                bytes.size(), " bytes, expected ", sizeof(id));
    std::memcpy(&id, bytes.data(), sizeof(id));
  }
  return id;
}
}  // namespace

struct CudaDevice::Event : StreamDevice::Event {
  cudaEvent_t ev = nullptr;
  ~Event() override {
    if (ev) cudaEventDestroy(ev);
  }
};

CudaDevice::CudaDevice(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout, size_t chunkBytes,
                       c10::DeviceIndex device, algo::Tracer* tracer,
                       Knobs::NcclBlocking ncclBlocking,
                       bool connectAll, size_t stopLatchBytes)
    : device_(device), stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device)) {
  c10::cuda::CUDAGuard guard(device_);
  const ncclUniqueId id = exchangeUniqueId(store, rank);
  // Staging from torch's caching allocator, on the comm stream (where the buffers
  // are read); an out-of-memory is torch's error, naming the sizes.
  cudaStream_t comm = stream_.stream();
  NcclTransport::Allocator alloc{
      [comm](size_t bytes) {
        return c10::cuda::CUDACachingAllocator::raw_alloc_with_stream(bytes, comm);
      },
      [](void* p) { c10::cuda::CUDACachingAllocator::raw_delete(p); }};
  try {
    comm_ = std::make_unique<NcclComm>(id, rank, size, timeout,
                                       ncclBlocking == Knobs::NcclBlocking::kAlways);
    // Every rank's init returned, so every rank read the id.
    if (rank == 0) store->deleteKey(kUniqueIdKey);
    transport_ = std::make_unique<NcclTransport>(*comm_, rank, size, comm, chunkBytes,
                                                 std::move(alloc), connectAll);
    // Connected to every peer: nothing left for an ncclGroupEnd to wait for, so the
    // collectives can run blocking (no NCCL thread per batch). Point-to-point's
    // communicator connects at first use, so it stays non-blocking.
    if (connectAll && size > 1 && ncclBlocking == Knobs::NcclBlocking::kOnceConnected) {
      auto lk = comm_->lock();
      comm_->blockFromNowOn(lk);
    }
  } catch (const PeerError& e) {
    C10_THROW_ERROR(DistBackendError, c10::str("ringcoll (cuda:", static_cast<int>(device_),
                                               "): ", e.what()));
  }
  // Header slots (engine/executor_waves.cc): this rank's, one per peer received, one
  // per peer sent when a job's headers differ per peer.
  reducer_ = std::make_unique<CudaReducer>(stream_.stream(), 2 * static_cast<size_t>(size) + 1,
                                           stopLatchBytes);
  transport_->setJoinHook([r = reducer_.get()] { r->transfersJoined(); });
  executor_ = std::make_unique<algo::Executor>(*transport_, *reducer_, chunkBytes);
  executor_->setTracer(tracer);
}

CudaDevice::~CudaDevice() {
  // End the communicator before freeing device memory: cudaFree waits for the
  // device, and an NCCL kernel waiting for a dead peer only exits once aborted.
  {
    auto lk = comm_->lock();
    comm_->abort();
  }
  comm_.reset();
  executor_.reset();
  transport_.reset();
}

std::string CudaDevice::name() const { return c10::str("cuda:", static_cast<int>(device_)); }

void CudaDevice::enqueue(const std::function<void()>& fn) {
  c10::cuda::CUDAGuard guard(device_);
  // The comm stream waits for the caller's stream: inputs are ready.
  auto caller = c10::cuda::getCurrentCUDAStream(device_);
  cudaEvent_t ready;
  RC_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  RC_CUDA_CHECK(cudaEventRecord(ready, caller.stream()));
  RC_CUDA_CHECK(cudaStreamWaitEvent(stream_.stream(), ready, 0));
  RC_CUDA_CHECK(cudaEventDestroy(ready));
  // Everything the body enqueues (copies, kernels, temporaries' allocations) goes
  // on the comm stream.
  c10::cuda::CUDAStreamGuard streamGuard(stream_);
  fn();
}

void CudaDevice::protect(const std::vector<at::Tensor>& tensors) {
  for (const auto& t : tensors) {
    if (t.defined() && t.is_cuda() && t.storage().data_ptr().get()) {
      c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream_);
    }
  }
}

StreamDevice::EventPtr CudaDevice::recordEnd() {
  auto e = std::make_shared<Event>();
  RC_CUDA_CHECK(cudaEventCreateWithFlags(&e->ev, cudaEventDisableTiming));
  RC_CUDA_CHECK(cudaEventRecord(e->ev, stream_.stream()));
  return e;
}

void CudaDevice::callerWaits(const EventPtr& end) {
  c10::cuda::CUDAGuard guard(device_);
  RC_CUDA_CHECK(cudaStreamWaitEvent(c10::cuda::getCurrentCUDAStream(device_).stream(),
                                    static_cast<Event&>(*end).ev, 0));
}

bool CudaDevice::reached(const EventPtr& end) {
  const cudaError_t rc = cudaEventQuery(static_cast<Event&>(*end).ev);
  if (rc == cudaSuccess) return true;
  if (rc == cudaErrorNotReady) return false;
  // A fault is not "not finished": it surfaces now, not at the timeout.
  cudaGetLastError();
  throw std::runtime_error(std::string("cudaEventQuery: ") + cudaGetErrorString(rc));
}

std::string CudaDevice::transferError() {
  ncclResult_t async;
  {
    auto lk = comm_->lock();
    async = comm_->asyncError();
  }
  if (async == ncclSuccess || async == ncclInProgress) return "";
  return std::string("NCCL error: ") + ncclGetErrorString(async);
}

void CudaDevice::abortTransfers() {
  auto lk = comm_->lock();
  comm_->abort();
}

void CudaDevice::finalize(std::chrono::milliseconds limit) {
  auto lk = comm_->lock();
  comm_->finalize(lk, limit);
}

void CudaDevice::bindThread() {
  // Without it the watchdog's first CUDA call creates a context on GPU 0.
  cudaSetDevice(device_);
}

}  // namespace ringcoll
