#include "backend/backend.h"

#include <Python.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "backend/cpu_stream_device.h"
#include "backend/flight_recorder.h"
#include "backend/gloo_port.h"
#include "backend/op_names.h"
#include "backend/work.h"
#include "common/errors.h"
#include "common/failure.h"
#ifdef RINGCOLL_WITH_CUDA
#include "backend/cuda_device.h"
#endif
#include "engine/topology.h"

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

// Point-to-point's gloo lanes wait this long for one message: a peer may send
// nothing for hours, and a lane that timed out would close the gloo pair the
// collectives use too. The engine times out each request itself.
constexpr auto kPointToPointLaneWait = std::chrono::hours(24 * 30);

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
  std::unique_ptr<algo::Run> exec;
  Clock::time_point started;  // RINGCOLL_DEBUG only
  algo::TraceTag tag;  // set only when tracing
  Clock::time_point lastReportLook{};  // checkInterrupts' last read of the store
};

RingcollBackend::RingcollBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                 int size, std::chrono::milliseconds timeout,
                                 c10::intrusive_ptr<c10d::Backend> p2p, Knobs knobs,
                                 const std::string& group, std::vector<int64_t> globalRanks)
    : c10d::Backend(rank, size),
      store_(store),
      knobs_(std::move(knobs)),
      selector_(knobs_.algo),
      gpuSelector_(!knobs_.gpuAlgo.empty() ? knobs_.gpuAlgo
                   : knobs_.algoSet       ? knobs_.algo
                                          : algo::gpuDefault(size)),
      timeout_(timeout),
      p2p_(std::move(p2p)) {
  TORCH_CHECK(p2p_, "ringcoll: backend created without its point-to-point group");
  {
    std::vector<uint64_t> ranks;
    for (int r = 0; r < size; ++r) {
      ranks.push_back(globalRanks.empty() ? static_cast<uint64_t>(r)
                                          : static_cast<uint64_t>(globalRanks.at(r)));
    }
    globalRank_ = static_cast<int>(ranks.at(rank));
    frGroup_ = FlightRecorder::get().addGroup(group.empty() ? "0" : group, std::move(ranks));
  }
  TORCH_CHECK(p2p_->getRank() == rank && p2p_->getSize() == size,
              "ringcoll: point-to-point group is rank ", p2p_->getRank(), " of ",
              p2p_->getSize(), " but the backend is rank ", rank, " of ", size);
  // A group re-created under the same store prefix must not read the failure an
  // earlier one reported: rank 0 clears it before the topology exchange, which no
  // rank leaves before every rank entered it.
  if (rank == 0) {
    try {
      store_->deleteKey(kFailureKey);
    } catch (const std::exception&) {
      // a store without deleteKey: reports are then only as fresh as the prefix
    }
  }
  StoreRendezvous rv(store_);
  Topology topo;
  try {
    topo = exchangeTopology(rv, rank, size, knobs_.host.empty() ? thisHost() : knobs_.host,
                            knobs_.shared(), /*probe=*/knobs_.host.empty());
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK(false, "ringcoll: ", e.what());
  }
  ringOrder_ = topo.order;
  // Hosts numbered in ring order (schedules/schedule.h), left empty on one host.
  std::vector<std::string> seen;
  for (int r : ringOrder_) {
    if (std::find(seen.begin(), seen.end(), topo.hostOf[r]) == seen.end()) {
      seen.push_back(topo.hostOf[r]);
    }
  }
  if (seen.size() > 1) {
    for (int r = 0; r < size; ++r) {
      ringHosts_.push_back(static_cast<int>(
          std::find(seen.begin(), seen.end(), topo.hostOf[r]) - seen.begin()));
    }
  }
  if (size > 1) {
    const auto me = std::find(ringOrder_.begin(), ringOrder_.end(), rank) - ringOrder_.begin();
    ringNeighbours_ = {ringOrder_[(me + size - 1) % size], ringOrder_[(me + 1) % size]};
  }
  try {
    transport_ = makeCpuTransport(topo, knobs_.transport, rv, makeGlooPort(p2p_, kInternalTag),
                                  rank, size, knobs_.chunkBytes, timeout_);
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK(false, "ringcoll: ", e.what());
  } catch (const std::runtime_error& e) {
    C10_THROW_ERROR(DistBackendError, c10::str("ringcoll: setting up the transport: ", e.what()));
  }
  try {
    // Transports of its own, set up under a store prefix of their own, their gloo
    // messages under a tag of their own.
    StoreRendezvous prv(c10::make_intrusive<c10d::PrefixStore>("ringcoll/user-p2p", store_));
    pointToPoint_ = std::make_unique<P2PEngine>(
        makeCpuTransport(topo, knobs_.transport, prv, makeGlooPort(p2p_, kPointToPointTag),
                         rank, size, knobs_.chunkBytes, kPointToPointLaneWait),
        knobs_.chunkBytes);
  } catch (const std::runtime_error& e) {
    C10_THROW_ERROR(DistBackendError,
                    c10::str("ringcoll: setting up the point-to-point transport: ", e.what()));
  }
  executor_ = std::make_shared<algo::Executor>(*transport_, reducer_, knobs_.chunkBytes);
  // The same on every rank: the knobs are shared (topology exchange), and either
  // every rank has a link other than shared memory or none has.
  if (knobs_.transport != "stream" && knobs_.smallLimit() > 0 &&
      algo::SmallCollective::runsOn(*transport_)) {
    smallOn_ = true;
    smallBytes_ = std::min(knobs_.smallLimit(), knobs_.chunkBytes - sizeof(algo::Fingerprint));
  }
  if (!knobs_.trace.empty()) {
    tracer_ = std::make_unique<algo::Tracer>();
    try {
      traceWriter_ = std::make_unique<TraceWriter>(*tracer_, knobs_.trace, group, rank, size,
                                                   syncClocks(*store_, rank, size),
                                                   transport_->name(), knobs_.chunkBytes);
    } catch (const std::runtime_error& e) {
      TORCH_CHECK(false, "ringcoll: RINGCOLL_TRACE='", knobs_.trace, "': ", e.what());
    }
    executor_->setTracer(tracer_.get());
  }
  if (knobs_.transport == "stream") {
    auto device = std::make_shared<CpuStreamDevice>(*transport_, knobs_.chunkBytes,
                                                    knobs_.streamDelayUs, knobs_.streamFailAfter,
                                                    knobs_.stopLatchBytes,
                                                    knobs_.maxBatchesInFlight);
    device->executor().setTracer(tracer_.get());
    streamPath_ = std::make_shared<StreamPath>(std::move(device), store_, rank, size, knobs_,
                                               ringNeighbours_, knobs_.fingerprint);
    // Point-to-point's emulated stream path, over a host transport of its own.
    try {
      auto pstore = c10::make_intrusive<c10d::PrefixStore>("ringcoll/user-p2p-stream", store_);
      StoreRendezvous srv(pstore);
      p2pStreamHost_ = makeCpuTransport(topo, knobs_.transport, srv,
                                        makeGlooPort(p2p_, kStreamPointToPointTag), rank, size,
                                        knobs_.chunkBytes, kPointToPointLaneWait);
      auto pdevice = std::make_shared<CpuStreamDevice>(*p2pStreamHost_, knobs_.chunkBytes,
                                                       knobs_.streamDelayUs, 0,
                                                       knobs_.stopLatchBytes,
                                                       knobs_.maxBatchesInFlight);
      p2pStream_ = std::make_shared<StreamPath>(std::move(pdevice), pstore, rank, size, knobs_,
                                                std::vector<int>{}, knobs_.fingerprint);
    } catch (const std::runtime_error& e) {
      C10_THROW_ERROR(DistBackendError,
                      c10::str("ringcoll: setting up the point-to-point stream path: ", e.what()));
    }
  }
  pairSeq_[0].assign(static_cast<size_t>(size), 0);
  pairSeq_[1].assign(static_cast<size_t>(size), 0);
  worker_ = std::make_unique<Worker>();
  if (knobs_.debug) {
    std::string links, hosts;
    for (const auto& l : this->links()) links += (links.empty() ? "" : ",") + (l.empty() ? "-" : l);
    for (int h : ringHosts_) hosts += (hosts.empty() ? "" : ",") + std::to_string(h);
    std::fprintf(stderr,
                 "[ringcoll rank %d/%d] %s transport=%s links=%s hosts=%s timeout=%lld ms\n",
                 rank, size, knobs_.describe().c_str(), transport_->name().c_str(),
                 links.c_str(), hosts.empty() ? "one" : hosts.c_str(),
                 static_cast<long long>(timeout_.count()));
  }
}

RingcollBackend::~RingcollBackend() { stop(Stop::kShutdown); }

void RingcollBackend::stop(Stop how) {
  int prev = stop_.load();
  while (prev < static_cast<int>(how) &&
         !stop_.compare_exchange_weak(prev, static_cast<int>(how))) {
  }
  // Joining the worker (and the CUDA watchdog) can wait on the GIL: their last
  // references to user tensors may be Python-owned, and dropping those needs the
  // GIL. destroy_process_group frees the backend with the GIL held, so release it
  // while joining, or the two threads deadlock. The worker's tasks see stop_ within
  // kReportPoll and fail (queued ones at once), so the join is prompt.
  auto join = [this, how] {
    // One stop at a time: abort() from another thread may still be aborting a path
    // (waiting for its running batch) when destroy_process_group's shutdown() comes;
    // the second must not free the transport under the first.
    std::lock_guard<std::mutex> stopping(stopMutex_);
    if (pointToPoint_) {
      pointToPoint_->stop(how == Stop::kAbort ? P2PEngine::Stop::kAbort
                                              : P2PEngine::Stop::kShutdown);
    }
    std::shared_ptr<StreamPath> cuda, stream, p2pCuda, p2pStream;
    {
      std::lock_guard<std::mutex> lock(pathMutex_);
      cuda = std::move(cuda_);
      stream = std::move(streamPath_);
      p2pCuda = std::move(p2pCuda_);
      p2pStream = std::move(p2pStream_);
    }
    for (auto* path : {&cuda, &stream, &p2pCuda, &p2pStream}) {
      if (*path && how == Stop::kAbort) (*path)->abort("the process group was aborted (abort())");
    }
    // No CPU launch runs past this point (cpuMutex_); later ones see stop_.
    std::unique_lock<std::shared_mutex> cpu(cpuMutex_);
    worker_.reset();
    // The paths end before the host transport the emulated ones ride on. A launch
    // still running in another thread holds its own reference to its path: on
    // shutdown such a path is aborted here (abort() did it above), so that its
    // device stops using the host transport (transfers aborted and drained; later
    // batches throw before they touch it) before that goes.
    const std::weak_ptr<StreamPath> onHost[] = {stream, p2pStream};
    cuda.reset();
    stream.reset();
    p2pCuda.reset();
    p2pStream.reset();
    for (const auto& held : onHost) {
      auto path = held.lock();
      if (path && how == Stop::kShutdown) {
        path->abort("the process group was shut down (destroy_process_group) while a "
                    "call was launching");
      }
    }
    p2pStreamHost_.reset();
    // Nothing runs on them any more: unmap the shared memory, close the lanes. The
    // transport goes first: a send still pending in gloo (the peer has not posted
    // its receive yet) reads the executor's header memory until its lane drops it,
    // and a peer that received freed bytes would report a garbled header.
    transport_.reset();
    {
      std::lock_guard<std::mutex> lock(keptMutex_);
      kept_.clear();  // no transport operation refers to it any more
    }
    executor_.reset();
    // The gloo group under the transports goes too, here and not as a member after
    // the destructor's body: ~ProcessGroupGloo joins its threads, which must not
    // happen with the GIL held (a thread that needs it would never finish).
    p2p_.reset();
    // Every execution is gone: write the rest of the trace and close the file.
    traceWriter_.reset();
  };
  if (Py_IsInitialized() && PyGILState_Check()) {
    Py_BEGIN_ALLOW_THREADS
    join();
    Py_END_ALLOW_THREADS
  } else {
    join();
  }
}

void RingcollBackend::throwIfStopped(const CallLabel& label) const {
  if (const int how = stop_.load()) {
    C10_THROW_ERROR(DistBackendError,
                    c10::str(label, ": the process group was ",
                             how == static_cast<int>(Stop::kAbort) ? "aborted" : "shut down"));
  }
}

std::string RingcollBackend::brokenReason() {
  if (!broken_.load(std::memory_order_acquire)) return std::string();
  std::lock_guard<std::mutex> lock(brokenMutex_);
  return brokenWhy_;
}

void RingcollBackend::markBroken(const std::string& why) {
  std::lock_guard<std::mutex> lock(brokenMutex_);
  if (brokenWhy_.empty()) brokenWhy_ = why;
  broken_.store(true, std::memory_order_release);
}

void RingcollBackend::keepAfterFailure(CpuTask& t) {
  if (!t.exec) return;  // nothing was started, so nothing was posted
  struct Kept {
    Body body;
    std::optional<Staged> staged;
    std::unique_ptr<algo::Run> exec;
  };
  auto kept = std::make_shared<Kept>(
      Kept{std::move(t.body), std::move(t.staged), std::move(t.exec)});
  std::lock_guard<std::mutex> lock(keptMutex_);
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

std::vector<std::string> RingcollBackend::links() const {
  std::shared_lock<std::shared_mutex> lock(cpuMutex_);
  std::vector<std::string> out;
  if (!transport_) return out;  // aborted or shut down
  for (int r = 0; r < getSize(); ++r) out.push_back(r == getRank() ? "" : transport_->linkName(r));
  return out;
}

std::map<std::string, uint64_t> RingcollBackend::streamStats(bool cuda, bool reset,
                                                             int timing) {
  std::shared_ptr<StreamPath> path;
  {
    std::lock_guard<std::mutex> lock(pathMutex_);
    path = cuda ? cuda_ : streamPath_;
  }
  std::map<std::string, uint64_t> out;
  if (!path) return out;
  StreamStats& s = path->device().stats();
  for (int c = 0; c < StreamStats::kNumCounts; ++c) {
    out[StreamStats::kCountNames[c]] = s.count(static_cast<StreamStats::Count>(c));
  }
  for (int p = 0; p < StreamStats::kNumParts; ++p) {
    out[std::string(StreamStats::kPartNames[p]) + "_ns"] =
        s.nanos(static_cast<StreamStats::Part>(p));
  }
  if (reset) s.reset();
  if (timing >= 0) s.timing.store(timing > 0, std::memory_order_relaxed);
  return out;
}

std::chrono::milliseconds RingcollBackend::opTimeout(
    std::chrono::milliseconds requested) const {
  return requested.count() > 0 ? requested : timeout_;
}

algo::Params RingcollBackend::params(size_t n, int root) const {
  algo::Params prm;
  prm.rank = getRank();
  prm.size = getSize();
  prm.n = n;
  prm.root = root;
  prm.order = ringOrder_;
  prm.hosts = ringHosts_;
  return prm;
}

const algo::Algorithm& RingcollBackend::choose(const char* op, algo::Collective c,
                                               size_t bytes, const at::Tensor& like) const {
  algo::Choice choice;
  try {
    // The emulation of the stream path stands for CUDA in CI: it runs CUDA's choice.
    const bool cudaChoice = like.defined() && (like.is_cuda() || knobs_.transport == "stream");
    const algo::Selector& selector = cudaChoice ? gpuSelector_ : selector_;
    choice = selector.pick(c, bytes, /*explain=*/knobs_.debug);
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK(false, "ringcoll::", op, ": ", e.what());
  }
  if (knobs_.debug) logChoice(op, bytes, choice.algorithm->name.c_str(), choice.why.c_str());
  return *choice.algorithm;
}

algo::Prepared RingcollBackend::prepare(const algo::Algorithm& a, algo::Collective c,
                                        const algo::Params& prm) {
  try {
    return a.prepare(c, prm);
  } catch (const std::exception& e) {
    return algo::refused(a, c, e.what());
  }
}

void RingcollBackend::logChoice(const char* op, size_t bytes, const char* algorithm,
                                const char* why) const {
  std::fprintf(stderr, "[ringcoll rank %d/%d] %s %zu B: %s (%s)\n", getRank(), getSize(),
               torchOpName(op), bytes, algorithm, why);
}

algo::TraceTag RingcollBackend::traceTag(const char* op, uint64_t seq) const {
  algo::TraceTag tag;
  if (tracer_) {
    tag.op = torchOpName(op);
    tag.seq = seq;
    tag.issued = algo::Tracer::now();
  }
  return tag;
}

void RingcollBackend::afterCollective() { if (traceWriter_) traceWriter_->maybeWrite(); }

at::Tensor RingcollBackend::workspace(int64_t numel, const at::Tensor& like) {
  // Past this size a working buffer is not kept: one huge call must not pin its
  // memory for the life of the group.
  constexpr int64_t kMaxKeptBytes = int64_t{512} << 20;
  const int64_t bytes = numel * static_cast<int64_t>(like.element_size());
  if (!like.is_cpu() || bytes > kMaxKeptBytes) return at::empty({numel}, like.options());
  if (!workspace_.defined() || workspace_.numel() < bytes) {
    workspace_ = at::empty({bytes}, at::TensorOptions().dtype(at::kByte));
  }
  return workspace_.narrow(0, 0, bytes).view(like.scalar_type());
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::launch(c10d::OpType type, const char* op,
                                                       algo::Fingerprint fp,
                                                       const std::vector<at::Tensor>& inputs,
                                                       std::vector<at::Tensor> outputs,
                                                       size_t bytes,
                                                       std::chrono::milliseconds timeout,
                                                       Body body, bool async) {
  const uint64_t seq = ++seq_;
  const CallLabel label{op, seq, getRank(), getSize()};
  throwIfStopped(label);
  fp.seq = seq;
  fp.rank = getRank();
  FlightRecorder& recorder = FlightRecorder::get();
  int64_t fr = -1;
  if (recorder.enabled()) {
    recorder.setGroupDesc(frGroup_, getGroupDesc());
    fr = recorder.record(frGroup_, seq, op, inputs, outputs, timeout);
  }
  const at::Tensor* first = !inputs.empty() ? &inputs[0] : (!outputs.empty() ? &outputs[0] : nullptr);
  if (first && (first->is_cuda() || knobs_.transport == "stream")) {
    const bool cuda = first->is_cuda();  // `first` may be one of the outputs moved below
    std::shared_ptr<StreamPath> path = streamPathFor(*first, op, label);
    auto work = path->launch(type, traceTag(op, seq), label, seq, fp, timeout, inputs,
                             std::move(outputs), body);
    // Started once enqueued. Completed when its future is, for CPU tensors (the
    // emulation); a CUDA collective completes on the device, where the recorder
    // does not look, so its entry stays "started".
    recorder.started(fr);
    if (!cuda) {
      // Neither this backend nor the Work need outlive the future's callback.
      auto self = c10::weak_intrusive_ptr<RingcollBackend>(
          c10::intrusive_ptr<RingcollBackend>::unsafe_reclaim_from_nonowning(this));
      const uint64_t key = completionKey(*work);
      work->getFuture()->addCallback([self, fr, key](c10::ivalue::Future& f) {
        if (f.hasError()) {
          FlightRecorder::get().failed(fr, -1);
          return;
        }
        FlightRecorder::get().completed(fr);
        if (auto backend = self.lock()) backend->runCompletionHooks(key);
      });
    }
    afterCollective();
    noteCoalesced(work);
    return work;
  }
  auto work = launchCpu(type, op, label, seq, fp, std::move(outputs), bytes, timeout,
                        std::move(body), fr, async);
  noteCoalesced(work);
  return work;
}

std::shared_ptr<StreamPath> RingcollBackend::streamPathFor(const at::Tensor& first,
                                                          const char* op,
                                                          const CallLabel& label) {
  std::lock_guard<std::mutex> lock(pathMutex_);
  throwIfStopped(label);  // stop() took the paths
  if (!first.is_cuda()) return streamPath_;
#ifdef RINGCOLL_WITH_CUDA
  const c10::DeviceIndex index = first.device().index();
  if (!cuda_) {
    auto device = std::make_shared<CudaDevice>(store_, getRank(), getSize(), timeout_,
                                               knobs_.gpuChunkBytes, index, tracer_.get(),
                                               knobs_.ncclBlocking, /*connectAll=*/true,
                                               knobs_.stopLatchBytes, knobs_.maxBatchesInFlight);
    cuda_ = std::make_shared<StreamPath>(std::move(device), store_, getRank(), getSize(), knobs_,
                                         ringNeighbours_,
                                         knobs_.fingerprint && knobs_.gpuFingerprint);
    cudaIndex_ = index;
  }
  TORCH_CHECK(index == cudaIndex_, "ringcoll::", op, ": tensor is on cuda:",
              static_cast<int>(index), " but this process group is bound to cuda:",
              static_cast<int>(cudaIndex_));
  return cuda_;
#else
  TORCH_CHECK(false, "ringcoll::", op, ": this ringcoll build has no CUDA support");
#endif
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::launchCpu(c10d::OpType type, const char* op,
                                                          const CallLabel& label,
                                                          uint64_t seq, algo::Fingerprint fp,
                                                          std::vector<at::Tensor> outputs,
                                                          size_t bytes,
                                                          std::chrono::milliseconds timeout,
                                                          Body body, int64_t fr, bool async) {
  // stop() frees the worker and the executor only once no launch holds this.
  std::shared_lock<std::shared_mutex> lock(cpuMutex_);
  throwIfStopped(label);
  // The Work may outlive abort(), which drops the backend's executor: it keeps
  // its own reference, and only reads the executor's waitingFor().
  std::shared_ptr<algo::Executor> executor = executor_;
  auto task = std::make_shared<CpuTask>();
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
  // A broken group fails every call at once, here: nothing queued could run, and
  // the worker may still be writing a hang's diagnostics (runFailureHooks).
  if (broken_.load(std::memory_order_acquire)) {
    runCpu(*task, std::chrono::nanoseconds(0));
    return task->work;
  }
  // Small and nothing ahead of it: run here, no hand-off to the worker and back. A
  // blocking call gains nothing from the worker up to RINGCOLL_INLINE_BYTES; an
  // async_op=True one runs here only up to kAsyncInlineBytes, so that a larger one
  // returns at once and overlaps the caller's work (DDP's buckets, prefetches).
  const size_t inlineLimit =
      async ? std::min(knobs_.inlineBytes, kAsyncInlineBytes) : knobs_.inlineBytes;
  if (bytes <= inlineLimit && worker_->tryClaim()) {
    if (runCpu(*task, kInlineBudget)) {
      worker_->release();
    } else {
      worker_->handOff([this, task] { runCpu(*task, kForever); });
    }
    return task->work;
  }
  worker_->enqueue([this, task] { runCpu(*task, kForever); });
  return task->work;
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
      throwIfStopped(t.label);  // queued before abort()/shutdown()
      if (knobs_.debug) t.started = Clock::now();  // for the log line only
      FlightRecorder::get().started(t.fr);
      try {
        t.staged = t.body(*executor_);
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
          t.work->finishWithError(std::current_exception());
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
        t.exec = executor_->start(std::move(job));
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
    t.staged.reset();
    FlightRecorder::get().completed(t.fr);
    runCompletionHooks(completionKey(*t.work));
    t.work->finish();
    afterCollective();
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
      t.work->finishWithError(std::current_exception());
    }
    // After the error is out and the group marked broken: the dump may take a
    // second, and later calls fail at once meanwhile (launchCpu) rather than queue
    // behind it.
    if (e.timedOut()) runFailureHooks();
  } catch (...) {
    FlightRecorder::get().failed(t.fr, -1);
    keepAfterFailure(t);
    t.work->finishWithError(std::current_exception());
  }
  return true;
}

void RingcollBackend::runFailureHooks() {
  FlightRecorder::get().write(globalRank_, /*once=*/true);
  for (const auto& h : abortHooks_.snapshot()) {
    try {
      h();
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
  for (const auto& h : completionHooks_.snapshot()) h(args);
#else
  (void)key;
#endif
}

}  // namespace ringcoll
