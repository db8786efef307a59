#include "backend/backend.h"

#include <Python.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>

#include <unistd.h>

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "backend/comm_init.h"
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

// Point-to-point's gloo lanes wait this long for one message: a peer may send
// nothing for hours, and a lane that timed out would close the gloo pair the
// collectives use too. The engine times out each request itself.
constexpr auto kPointToPointLaneWait = std::chrono::hours(24 * 30);
}  // namespace

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
                                  rank, size, knobs_.chunkBytes, timeout_, waitPolicy());
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
                         rank, size, knobs_.chunkBytes, kPointToPointLaneWait, waitPolicy()),
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
    // Point-to-point's emulated stream path rides on a host transport of its own,
    // made here; both emulated paths are made at their first call (lazyPath), as
    // the CUDA ones are.
    try {
      StoreRendezvous srv(
          c10::make_intrusive<c10d::PrefixStore>("ringcoll/user-p2p-stream", store_));
      p2pStreamHost_ = makeCpuTransport(topo, knobs_.transport, srv,
                                        makeGlooPort(p2p_, kStreamPointToPointTag), rank, size,
                                        knobs_.chunkBytes, kPointToPointLaneWait,
                                        waitPolicy());
    } catch (const std::runtime_error& e) {
      C10_THROW_ERROR(DistBackendError,
                      c10::str("ringcoll: setting up the point-to-point stream path: ", e.what()));
    }
  }
  pairSeq_[0].assign(static_cast<size_t>(size), 0);
  pairSeq_[1].assign(static_cast<size_t>(size), 0);
  callbacks_ = std::make_shared<CallbackRunner>();
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

WaitPolicy RingcollBackend::waitPolicy() const {
  WaitPolicy w;
  w.spin = std::chrono::microseconds(knobs_.spinUs);
  w.yield = WaitPolicy::yieldNamed(knobs_.yield);
  return w;
}

void RingcollBackend::stop(Stop how) {
  int prev = stop_.load();
  while (prev < static_cast<int>(how) &&
         !stop_.compare_exchange_weak(prev, static_cast<int>(how))) {
  }
  if (onOwnThread()) {
    // A future's callback (on the worker, a watchdog, point-to-point's thread) that
    // stops the group: the teardown would join this very thread. Everything in
    // flight fails now; the joins and frees come with the next stop() from another
    // thread, at the latest the destructor's.
    requestStop(how);
    return;
  }
  // Joining the worker (and the watchdogs) can wait on the GIL: their last
  // references to user tensors may be Python-owned, dropping those needs the GIL,
  // and a future's callbacks may be Python. destroy_process_group frees the backend
  // with the GIL held, so release it while tearing down, or the threads deadlock.
  auto run = [this, how] {
    // One teardown at a time: abort() from another thread may still be aborting a
    // path (waiting for its running batch) when destroy_process_group's shutdown()
    // comes; the second must not free the transport under the first. It hurries
    // the first (an abort fails what a shutdown would let finish) and waits for it.
    // No lock is held while the teardown runs (common/locks.h): a callback that
    // stops the group from a thread the teardown joins returns at once (above).
    {
      std::unique_lock<Mutex> lock(stopMutex_);
      if (tearingDown_) {
        lock.unlock();
        requestStop(how);
        lock.lock();
        stopCv_.wait(lock, [this] { return tornDown_; });
        return;
      }
      tearingDown_ = true;
    }
    teardown(how);
    {
      std::lock_guard<Mutex> lock(stopMutex_);
      tornDown_ = true;
    }
    stopCv_.notify_all();
  };
  if (Py_IsInitialized() && PyGILState_Check()) {
    Py_BEGIN_ALLOW_THREADS
    run();
    Py_END_ALLOW_THREADS
  } else {
    run();
  }
}

void RingcollBackend::requestStop(Stop how) {
  if (pointToPoint_) {
    pointToPoint_->requestStop(how == Stop::kAbort ? P2PEngine::Stop::kAbort
                                                   : P2PEngine::Stop::kShutdown);
  }
  if (how != Stop::kAbort) return;
  std::vector<std::shared_ptr<StreamPath>> paths;
  {
    std::lock_guard<Mutex> lock(pathMutex_);
    paths = {cuda_, streamPath_, p2pCuda_, p2pStream_};
  }
  // Each fails its work and completes the futures on this thread, which holds no lock.
  for (auto& path : paths) {
    if (path) path->abort("the process group was aborted (abort())");
  }
}

void RingcollBackend::teardown(Stop how) {
  {
    // A path being made gives up (its waits see stop_) or ends; it is not published
    // after this (lazyPath), so what it uses may go below.
    std::lock_guard<Mutex> made(createMutex_);
  }
  if (pointToPoint_) {
    pointToPoint_->stop(how == Stop::kAbort ? P2PEngine::Stop::kAbort
                                            : P2PEngine::Stop::kShutdown);
  }
  std::shared_ptr<StreamPath> cuda, stream, p2pCuda, p2pStream;
  {
    std::lock_guard<Mutex> lock(pathMutex_);
    cuda = std::move(cuda_);
    stream = std::move(streamPath_);
    p2pCuda = std::move(p2pCuda_);
    p2pStream = std::move(p2pStream_);
  }
  for (auto* path : {&cuda, &stream, &p2pCuda, &p2pStream}) {
    if (*path && how == Stop::kAbort) (*path)->abort("the process group was aborted (abort())");
  }
  // No CPU launch runs past this point (cpuMutex_, taken once to wait for the ones
  // inside); later ones see stop_ and fail before they touch the worker, the
  // executor or the transport. The worker is joined with no lock held: its tasks'
  // callbacks may launch (and fail at once) or take the GIL.
  std::unique_ptr<Worker> worker;
  {
    std::unique_lock<SharedMutex> cpu(cpuMutex_);
    worker = std::move(worker_);
  }
  worker.reset();
  // After the worker, which posts to it; before what the callbacks' endCpu uses.
  callbacks_.reset();
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
  // Nothing runs on them any more: unmap the shared memory, close the lanes. The
  // transport goes first: a send still pending in gloo (the peer has not posted
  // its receive yet) reads the executor's header memory until its lane drops it,
  // and a peer that received freed bytes would report a garbled header. Each is
  // taken out under the lock (links() reads the transport) and freed after it.
  std::unique_ptr<RoutedTransport> transport, p2pStreamHost;
  std::shared_ptr<algo::Executor> executor;
  std::vector<std::shared_ptr<void>> kept;
  {
    std::unique_lock<SharedMutex> cpu(cpuMutex_);
    p2pStreamHost = std::move(p2pStreamHost_);
    transport = std::move(transport_);
    executor = std::move(executor_);
  }
  p2pStreamHost.reset();
  transport.reset();
  {
    std::lock_guard<Mutex> lock(keptMutex_);
    kept.swap(kept_);  // no transport operation refers to it any more
  }
  kept.clear();
  executor.reset();
  // The gloo group under the transports goes too, here and not as a member after
  // the destructor's body: ~ProcessGroupGloo joins its threads, which must not
  // happen with the GIL held (a thread that needs it would never finish).
  p2p_.reset();
  // Every execution is gone: write the rest of the trace and close the file.
  if (traceWriter_) traceWriter_->close();
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
  std::lock_guard<Mutex> lock(brokenMutex_);
  return brokenWhy_;
}

void RingcollBackend::markBroken(const std::string& why) {
  std::lock_guard<Mutex> lock(brokenMutex_);
  if (brokenWhy_.empty()) brokenWhy_ = why;
  broken_.store(true, std::memory_order_release);
}




std::vector<std::string> RingcollBackend::links() const {
  std::shared_lock<SharedMutex> lock(cpuMutex_);
  std::vector<std::string> out;
  if (!transport_) return out;  // aborted or shut down
  for (int r = 0; r < getSize(); ++r) out.push_back(r == getRank() ? "" : transport_->linkName(r));
  return out;
}

std::map<std::string, uint64_t> RingcollBackend::streamStats(bool cuda, bool reset,
                                                             int timing) {
  std::shared_ptr<StreamPath> path;
  {
    std::lock_guard<Mutex> lock(pathMutex_);
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
    bool captured = false;
    c10::intrusive_ptr<c10d::Work> work;
    try {
      work = path->launch(type, traceTag(op, seq), label, seq, fp, timeout, inputs,
                          std::move(outputs), body, "", &captured);
    } catch (...) {
      recorder.failed(fr, -1);  // raised at launch (a refusal, a broken group)
      throw;
    }
    // Started once enqueued. Completed when its future is, for CPU tensors (the
    // emulation); a CUDA collective completes on the device, where the recorder
    // does not look, so its entry stays "started", as a captured one's does on
    // either (it runs at each replay, unwatched: backend/capture.h).
    recorder.started(fr);
    if (!cuda && !captured) {
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

std::shared_ptr<StreamPath> RingcollBackend::lazyPath(std::shared_ptr<StreamPath>& slot,
                                                     const CallLabel& label,
                                                     const MakePath& make) {
  {
    std::lock_guard<Mutex> lock(pathMutex_);
    throwIfStopped(label);  // stop() took the paths
    if (slot) return slot;
  }
  // One creation at a time; stop() waits here for one in progress to give up (its
  // waits poll stop_) before it frees what the creation uses.
  std::lock_guard<Mutex> creating(createMutex_);
  {
    std::lock_guard<Mutex> lock(pathMutex_);
    throwIfStopped(label);
    if (slot) return slot;  // made meanwhile by another thread
  }
  const Stopping stopping = [this]() -> const char* {
    switch (static_cast<Stop>(stop_.load())) {
      case Stop::kAbort:
        return "the process group was aborted (abort())";
      case Stop::kShutdown:
        return "the process group was shut down (destroy_process_group)";
      default:
        return nullptr;
    }
  };
  std::shared_ptr<StreamPath> path;
  try {
    path = make(stopping);
  } catch (const PeerError& e) {
    C10_THROW_ERROR(DistBackendError, c10::str(label, ": ", e.what()));
  }
  {
    std::lock_guard<Mutex> lock(pathMutex_);
    if (stop_.load() == 0) {
      slot = path;
      return path;
    }
  }
  // Stopped while it was made: never published, it ends here (no work ran on it).
  path.reset();
  throwIfStopped(label);
  RC_ASSERT(false, "unreachable");
}

std::shared_ptr<StreamPath> RingcollBackend::streamPathFor(const at::Tensor& first,
                                                          const char* op,
                                                          const CallLabel& label) {
  if (!first.is_cuda()) {
    // The emulation's communicator: made like NCCL's (comm_init.h), on the host
    // transport, so CI runs the creation's waits, timeout and interruption.
    return lazyPath(streamPath_, label, [this](const Stopping& stopping) {
      emulateCommInit("ringcoll/stream-comm/collectives", *store_, stopping);
      auto device = std::make_shared<CpuStreamDevice>(
          *transport_, knobs_.chunkBytes, knobs_.streamDelayUs, knobs_.streamFailAfter,
          knobs_.stopLatchBytes, knobs_.maxBatchesInFlight);
      device->executor().setTracer(tracer_.get());
      auto path = std::make_shared<StreamPath>(std::move(device), store_, getRank(), getSize(),
                                               knobs_, ringNeighbours_, knobs_.fingerprint);
      path->setEmulatedCapture(capture_);
      return path;
    });
  }
#ifdef RINGCOLL_WITH_CUDA
  const c10::DeviceIndex index = first.device().index();
  checkCudaIndex(op, index);
  return lazyPath(cuda_, label, [this, index](const Stopping& stopping) {
    auto device = std::make_shared<CudaDevice>(store_, getRank(), getSize(), timeout_,
                                               knobs_.gpuChunkBytes, index, tracer_.get(),
                                               knobs_.ncclBlocking, /*connectAll=*/true,
                                               knobs_.stopLatchBytes, knobs_.maxBatchesInFlight,
                                               stopping);
    return std::make_shared<StreamPath>(std::move(device), store_, getRank(), getSize(), knobs_,
                                        ringNeighbours_,
                                        knobs_.fingerprint && knobs_.gpuFingerprint);
  });
#else
  (void)label;
  TORCH_CHECK(false, "ringcoll::", op, ": this ringcoll build has no CUDA support");
#endif
}

void RingcollBackend::checkCudaIndex(const char* op, c10::DeviceIndex index) {
  std::lock_guard<Mutex> lock(pathMutex_);
  if (cudaIndex_ < 0) cudaIndex_ = index;
  TORCH_CHECK(index == cudaIndex_, "ringcoll::", op, ": tensor is on cuda:",
              static_cast<int>(index), " but this process group is bound to cuda:",
              static_cast<int>(cudaIndex_));
}

void RingcollBackend::emulateCommInit(const std::string& key, c10d::Store& store,
                                      const Stopping& stopping) {
  const std::string what = "creating the stream emulation's communicator";
  const std::vector<uint8_t> id = shareCommId(
      store, key + "/id", getRank(),
      [] {
        const auto t = std::chrono::steady_clock::now().time_since_epoch().count();
        const std::string s = std::to_string(t) + "-" + std::to_string(::getpid());
        return std::vector<uint8_t>(s.begin(), s.end());
      },
      timeout_, stopping, what + " (rank 0's id)");
  joinEveryRank(store, key + "/joined/" + std::string(id.begin(), id.end()), getRank(),
                getSize(), timeout_, stopping, what);
  // Every rank read the id (it joined after): a group made again under the same
  // prefix must not read it (cuda_device.h does the same with NCCL's).
  if (getRank() == 0) {
    try {
      store.deleteKey(key + "/id");
    } catch (const std::exception&) {
    }
  }
}








}  // namespace ringcoll
