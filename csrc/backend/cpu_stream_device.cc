#include "backend/cpu_stream_device.h"

#include <stdexcept>

#include "common/errors.h"

namespace ringcoll {

struct CpuStreamDevice::End : StreamDevice::Event {
  explicit End(CpuStream::MarkerPtr m) : m(std::move(m)) {}
  CpuStream::MarkerPtr m;
};

CpuStreamDevice::CpuStreamDevice(Transport& host, size_t chunkBytes, uint32_t maxDelayUs,
                                 size_t failAfter, size_t latchBytes, size_t maxBatches)
    : compute_("compute", maxDelayUs) {
  // Header slots (engine/executor_waves.cc): this rank's, one per peer received, one
  // per peer sent when a job's headers differ per peer.
  reducer_ = std::make_unique<StreamReducer>(compute_, 2 * static_cast<size_t>(host.size()) + 1,
                                             latchBytes);
  transport_ = std::make_unique<CpuStreamTransport>(host, compute_, chunkBytes, maxDelayUs,
                                                    failAfter);
  transport_->setJoinHook([r = reducer_.get()] { r->transfersJoined(); });
  transport_->setStats(&stats_);
  transport_->setInFlightBound(maxBatches);
  reducer_->setStats(&stats_);
  executor_ = std::make_unique<algo::Executor>(*transport_, *reducer_, chunkBytes);
}

CpuStreamDevice::~CpuStreamDevice() {
  // The path finalized or aborted us: nothing is left to run. A Work may keep this
  // device past the backend, and so past the host transport: touch only our own.
  compute_.abort();
  transport_->transferStream().abort();
  executor_.reset();
  transport_.reset();  // joins the transfer thread
  compute_.sync();
}

void CpuStreamDevice::enqueue(const std::function<void()>& fn) {
  compute_.sync();
  fn();
}

void CpuStreamDevice::enqueueFinish(std::function<void()> fn) {
  // Gated by the stop word like every kernel: a collective whose check failed
  // writes nothing into the user's tensors.
  compute_.enqueue([this, fn = std::move(fn)] {
    if (!reducer_->kernelsStopped()) fn();
  });
}

StreamDevice::EventPtr CpuStreamDevice::recordEnd() {
  stats_.add(StreamStats::kMarkers);
  return std::make_shared<End>(compute_.mark());
}

bool CpuStreamDevice::reached(const EventPtr& end) {
  if (std::exception_ptr e = compute_.error()) {
    throw std::runtime_error("a task of the compute stream failed: " + describe(e));
  }
  return static_cast<End&>(*end).m->done();
}

std::string CpuStreamDevice::transferError() {
  // A batch's failure on either queue (cpu_stream_transport.h).
  std::string why = transport_->failure();
  if (!why.empty()) return why;
  std::exception_ptr e = transport_->transferStream().error();
  return e ? describe(e) : std::string();
}

void CpuStreamDevice::abortTransfers() {
  // Queued transfers are skipped and waiting ones return. The compute stream is not
  // aborted (a GPU's is not): it runs what is queued, behind the stop word the
  // backend set first, and is drained before this returns, so nothing reads a
  // job's memory after the caller frees it.
  transport_->abort();
  transport_->transferStream().sync();
  compute_.sync();
  drained_.store(true, std::memory_order_release);
}

void CpuStreamDevice::finalize(std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  if (!compute_.sync(until) || !transport_->transferStream().sync(until)) {
    // Not reached in practice (a clean shutdown has no Work left to end); if it is,
    // what is queued behind the aborted transfers must not run.
    reducer_->stopKernels();
    abortTransfers();
  }
}

}  // namespace ringcoll
