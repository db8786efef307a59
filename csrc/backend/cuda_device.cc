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

// The communicator's unique id, from rank 0 to all through the group's store
// (comm_init.h: the wait polls, ends at `timeout` and when the group stops).
ncclUniqueId exchangeUniqueId(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                              std::chrono::milliseconds timeout, const Stopping& stopping) {
  ncclUniqueId id;
  const std::vector<uint8_t> bytes = shareCommId(
      *store, kUniqueIdKey, rank,
      [] {
        ncclUniqueId made;
        RC_NCCL_CHECK(ncclGetUniqueId(&made), -1);
        const auto* p = reinterpret_cast<const uint8_t*>(&made);
        return std::vector<uint8_t>(p, p + sizeof(made));
      },
      timeout, stopping, "creating the NCCL communicator (rank 0's unique id)");
  TORCH_CHECK(bytes.size() == sizeof(id), "ringcoll: NCCL unique id from the store has ",
              bytes.size(), " bytes, expected ", sizeof(id));
  std::memcpy(&id, bytes.data(), sizeof(id));
  return id;
}
}  // namespace

struct CudaDevice::Event : StreamDevice::Event {
  Event(std::shared_ptr<CudaEventPool> pool, cudaStream_t stream) : e(std::move(pool), stream) {}
  PooledEvent e;
};

CudaDevice::CudaDevice(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout, size_t chunkBytes,
                       c10::DeviceIndex device, algo::Tracer* tracer,
                       Knobs::NcclBlocking ncclBlocking,
                       bool connectAll, size_t stopLatchBytes, size_t maxBatches,
                       const Stopping& stopping)
    : device_(device),
      events_(std::make_shared<CudaEventPool>()),
      stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device)) {
  c10::cuda::CUDAGuard guard(device_);
  RC_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
  ncclUniqueId id;
  try {
    id = exchangeUniqueId(store, rank, timeout, stopping);
  } catch (const PeerError& e) {
    C10_THROW_ERROR(DistBackendError, c10::str("ringcoll (cuda:", static_cast<int>(device_),
                                               "): ", e.what()));
  }
  // Staging from torch's caching allocator, on the comm stream (where the buffers
  // are read); an out-of-memory is torch's error, naming the sizes.
  cudaStream_t comm = stream_.stream();
  DeviceAllocator alloc{
      [comm](size_t bytes) {
        return c10::cuda::CUDACachingAllocator::raw_alloc_with_stream(bytes, comm);
      },
      [](void* p) { c10::cuda::CUDACachingAllocator::raw_delete(p); }};
  DeviceAllocator scratch = alloc;  // a schedule's scratch: the same pool, the same stream
  try {
    comm_ = std::make_unique<NcclComm>(id, rank, size, timeout,
                                       ncclBlocking == Knobs::NcclBlocking::kAlways, stopping);
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
    auto lk = comm_->lock();
    comm_->creationDone();
  } catch (const PeerError& e) {
    C10_THROW_ERROR(DistBackendError, c10::str("ringcoll (cuda:", static_cast<int>(device_),
                                               "): ", e.what()));
  }
  // Header slots (engine/executor_waves.cc): this rank's, one per peer received, one
  // per peer sent when a job's headers differ per peer.
  reducer_ = std::make_unique<CudaReducer>(stream_.stream(), 2 * static_cast<size_t>(size) + 1,
                                           stopLatchBytes, std::move(scratch));
  transport_->setJoinHook([r = reducer_.get()] { r->transfersJoined(); });
  transport_->setStats(&stats_);
  transport_->setInFlightBound(maxBatches);
  reducer_->setStats(&stats_);
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
  if (ready_) cudaEventDestroy(ready_);
}

std::string CudaDevice::name() const { return c10::str("cuda:", static_cast<int>(device_)); }

void CudaDevice::enqueue(const std::function<void()>& fn) {
  c10::cuda::CUDAGuard guard(device_);
  // The comm stream waits for the caller's stream: inputs are ready.
  auto caller = c10::cuda::getCurrentCUDAStream(device_);
  {
    // One event, recorded again at every call: the wait reads it when enqueued.
    StreamStats::Timer t(&stats_, StreamStats::kReady);
    RC_CUDA_CHECK(cudaEventRecord(ready_, caller.stream()));
    RC_CUDA_CHECK(cudaStreamWaitEvent(stream_.stream(), ready_, 0));
  }
  stats_.add(StreamStats::kMarkers);
  stats_.add(StreamStats::kStreamWaits);
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
  stats_.add(StreamStats::kMarkers);
  return std::make_shared<Event>(events_, stream_.stream());
}

void CudaDevice::callerWaits(const EventPtr& end) {
  c10::cuda::CUDAGuard guard(device_);
  RC_CUDA_CHECK(cudaStreamWaitEvent(c10::cuda::getCurrentCUDAStream(device_).stream(),
                                    static_cast<Event&>(*end).e.ev, 0));
}

bool CudaDevice::capturing() {
  c10::cuda::CUDAGuard guard(device_);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  RC_CUDA_CHECK(cudaStreamIsCapturing(c10::cuda::getCurrentCUDAStream(device_).stream(),
                                      &status));
  return status != cudaStreamCaptureStatusNone;
}

void CudaDevice::enqueueCapturing(const std::function<void()>& fn) {
  // The bound waits for earlier batches' events from the host, which a capture
  // forbids (and a replay would not repeat); restored however `fn` ends.
  const size_t bound = transport_->inFlightBound();
  transport_->setInFlightBound(0);
  try {
    enqueue(fn);
  } catch (...) {
    transport_->setInFlightBound(bound);
    throw;
  }
  transport_->setInFlightBound(bound);
}

bool CudaDevice::reached(const EventPtr& end) {
  // A fault is not "not finished": it surfaces now, not at the timeout.
  return static_cast<Event&>(*end).e.reached();
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
  // The watchdog queries events of eager work while another thread may be
  // capturing a graph; under torch's global capture mode that query would
  // invalidate the capture. Relaxed for this thread only (ProcessGroupNCCL's
  // watchdog does the same).
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  RC_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
}

}  // namespace ringcoll
