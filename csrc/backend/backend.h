// RingcollBackend: the c10d::Backend that torch.distributed drives when a script
// says init_process_group("ringcoll").
//
// Every public collective (1) validates its arguments once, on the calling thread,
// with TORCH_CHECK messages that start "ringcoll::<op>:" and name both values, so
// every rank that sees a bad argument raises before anything is sent; (2) takes the
// next sequence number; (3) runs the collective's schedule through the executor:
// on the calling thread when it is small and nothing else is queued, else on the
// backend's worker (CPU), or enqueued on the comm stream (CUDA); (4) returns a
// RingcollWork.
//
// A peer failure or timeout makes that collective's Work fail with a
// DistBackendError naming op, sequence number, rank and peer, and leaves the
// backend unusable (the ring's message pairing is lost): later collectives fail
// at once with the first error instead of hanging.
//
// Ranks that disagree about a collective (engine/fingerprint.h) are caught by the
// ranks that exchange headers with each other; the rank that sees a disagreement
// also writes it to the group's store, and every rank whose collective waits for
// its peers looks there every kReportPoll, so the ranks that saw nothing raise
// the same error within a fraction of a second instead of at the timeout.
//
// RINGCOLL_TRACE: with a trace directory the backend measures its clock against
// rank 0's through the store when it is created, sets a Tracer on its executors
// (CPU and CUDA) and writes this rank's trace file (backend/trace_writer.h) after
// collectives, now and then, and when it stops.
//
// Point-to-point (send, recv, recv from any source, batch_isend_irecv through
// start/endCoalescing) and monitoredBarrier run on a P2PEngine (engine/p2p.h)
// with transports of their own, built like the collectives' (shared memory within
// a host, gloo between hosts): user messages never interleave with a collective's
// pairing, and a failed send or recv does not make the collectives unusable.
// Point-to-point of CUDA tensors (and of CPU tensors under RINGCOLL_TRANSPORT=
// stream, its emulation) runs on a stream path of its own instead, with NCCL's
// semantics (api_p2p.cc).
//
// abort() fails the collectives (and point-to-point requests) in flight and queued
// at once; shutdown() (called by destroy_process_group) lets them finish while they
// make progress and fails them once they waited kShutdownGrace for a peer. Either
// way the backend is then unusable and its threads are joined, so neither ever
// hangs on a dead peer.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/version.h>

#include "backend/capture.h"
#include "backend/comm_init.h"
#include "backend/stream_path.h"
#include "backend/trace_writer.h"
#include "backend/work.h"
#include "common/callbacks.h"
#include "common/knobs.h"
#include "common/locks.h"
#include "engine/call.h"
#include "engine/collectives.h"
#include "engine/executor.h"
#include "engine/p2p.h"
#include "engine/worker.h"
#include "reduce/reducer.h"
#include "schedules/registry.h"
#include "schedules/select.h"
#include "transport/doorbell.h"
#include "transport/routed_transport.h"

// torch 2.14 added canonical `_single` names for the one-buffer collectives
// (all_gather_single, ..._coalesced, gather_single); they and the old names forward
// to each other, and ringcoll overrides both (api_coalesced.cc, api_exchange.cc).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 14)
#define RINGCOLL_C10D_SINGLE_NAMES 1
#endif
// OpType::REDUCE_SCATTER_TENSOR_COALESCED exists from torch 2.13 (2.11, the GPU
// machine's torch, lacks it); before that the Work reports plain COALESCED.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 13)
#define RINGCOLL_OP_REDUCE_SCATTER_TENSOR_COALESCED c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED
#else
#define RINGCOLL_OP_REDUCE_SCATTER_TENSOR_COALESCED c10d::OpType::COALESCED
#endif

namespace ringcoll {

class RingcollBackend final : public c10d::Backend {
 public:
  // `p2p`: a gloo process group over the same ranks, used by the gloo transports
  // (collectives' and point-to-point's). `group`: the process group's id (names its
  // trace files and its flight-recorder entries). `globalRanks`: the default
  // group's rank of each of this group's ranks (empty: the same).
  RingcollBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                  std::chrono::milliseconds timeout, c10::intrusive_ptr<c10d::Backend> p2p,
                  Knobs knobs, const std::string& group = "",
                  std::vector<int64_t> globalRanks = {});
  ~RingcollBackend() override;

  const std::string getBackendName() const override { return "ringcoll"; }
  const Knobs& knobs() const { return knobs_; }
  // The CPU transport of each peer's link ("shm", "gloo"; "" for this rank).
  std::vector<std::string> links() const;
  // What the stream path of CUDA tensors (`cuda`) or of the CPU emulation enqueued
  // so far, counted and timed (common/stream_stats.h), by name; empty where that
  // path does not exist (yet). `reset`: zero them after reading; `timing`: -1
  // leaves host timing as it is, 0 turns it off, 1 on.
  std::map<std::string, uint64_t> streamStats(bool cuda, bool reset, int timing);
  // Capture on the CPU emulation (RINGCOLL_TRANSPORT=stream; backend/capture.h):
  // the stream collectives and point-to-point calls made between captureBegin() and
  // captureEnd() are recorded, not run; replay() runs them again, in order, on the
  // same tensors, and returns once they finished (raising the first failure). CUDA
  // tensors are captured by torch.cuda.graph instead. api_capture.cc.
  void captureBegin();
  std::shared_ptr<CapturedGraph> captureEnd();
  void replay(const CapturedGraph& graph);

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  // The op's body (backend/ops.h): a SUM all-reduce of `tensor` in place, blocking,
  // the same collective as allreduce() (its checks, sequence number and errors).
  // `gilHeld`: the caller holds the GIL (runSmallNow).
  void allreduceNow(at::Tensor& tensor, bool gilHeld);
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  // api_coalesced.cc: several tensors, one packed collective.
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
#ifdef RINGCOLL_C10D_SINGLE_NAMES
  c10::intrusive_ptr<c10d::Work> all_gather_single(at::Tensor& output, at::Tensor& input,
                                                   const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_single(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> all_to_all_single(at::Tensor& output, at::Tensor& input,
                                                   std::vector<int64_t>& outputSplitSizes,
                                                   std::vector<int64_t>& inputSplitSizes,
                                                   const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> all_gather_single_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_single_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
#endif
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  // api_exchange.cc. torch 2.14's all_to_all_single forwards to alltoall_base.
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
#ifdef RINGCOLL_C10D_SINGLE_NAMES  // gather_single too (a gather into one flat buffer)
  c10::intrusive_ptr<c10d::Work> gather_single(at::Tensor& output, at::Tensor& input,
                                               const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather_into_tensor(at::Tensor& output, at::Tensor& input,
                                                    const c10d::GatherOptions& opts) override;
#endif
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplitSizes,
                                               std::vector<int64_t>& inputSplitSizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  // api_p2p.cc: point-to-point, coalescing (batch_isend_irecv), monitoredBarrier.
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override;
  bool supportsCoalescing() const override { return true; }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) override;

  void abort() override { stop(Stop::kAbort); }
  void shutdown() override { stop(Stop::kShutdown); }

  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return seq_.load(); }
#ifdef C10D_BACKEND_HAS_HOOKS
  // c10d's hooks (torch 2.14+): abort hooks run when a collective times out, before
  // the group is marked broken (torch's flight-recorder hook dumps from one, 2.15+);
  // completion hooks run once per collective that succeeded (2.15+).
  void registerAbortHook(int64_t id, c10d::AbortHook hook) override {
    abortHooks_.add(id, std::move(hook));
  }
  void unregisterAbortHook(int64_t id) override { abortHooks_.remove(id); }
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 15)
#define RINGCOLL_COMPLETION_HOOKS 1
  bool supportsAbortHooks() const override { return true; }
  bool supportsCompletionHooks() const override { return true; }
  void registerCompletionHook(int64_t id, c10d::CompletionHook hook) override {
    completionHooks_.add(id, std::move(hook));
  }
  void unregisterCompletionHook(int64_t id) override { completionHooks_.remove(id); }
#endif
#endif

  // The gloo tags of ringcoll's messages on its gloo group: the collectives', and
  // point-to-point's (user tags travel inside its headers, so any tag is the user's).
  static constexpr int kInternalTag = 0x52430000;
  static constexpr int kPointToPointTag = kInternalTag + 1;
  static constexpr int kStreamPointToPointTag = kInternalTag + 2;  // the emulation's

 private:
  struct CpuTask;
  // api_coalesced.cc: where each tensor lies in a packed block, and the all-gather
  // both all-gather methods run (`unpack` copies the gathered blocks out).
  struct Packing;
  c10::intrusive_ptr<c10d::Work> allgatherPacked(
      c10d::OpType type, const char* op, algo::Method method, std::vector<at::Tensor> ins,
      std::vector<at::Tensor> outs, uint32_t layout, std::chrono::milliseconds timeout,
      std::function<void(const at::Tensor&, const Packing&)> unpack);
  // allreduce of a sparse COO tensor (SUM only), in place: api_sparse.cc.
  c10::intrusive_ptr<c10d::Work> sparseAllreduce(at::Tensor& t,
                                                 const c10d::AllreduceOptions& opts);
  // Runs `body` on the path of the tensors' device: the CPU executor (shared memory
  // and gloo transports, CPU reducer) or the CUDA path (NCCL transport, CUDA
  // kernels, comm stream). `inputs` and `outputs` are the user's tensors; `bytes`,
  // the size of the collective's buffer, and `async` (the caller's async_op, as c10d
  // passes it in the options) decide whether it may run inline (launchCpu).
  c10::intrusive_ptr<c10d::Work> launch(c10d::OpType type, const char* op,
                                        algo::Fingerprint fp,
                                        const std::vector<at::Tensor>& inputs,
                                        std::vector<at::Tensor> outputs, size_t bytes,
                                        std::chrono::milliseconds timeout, Body body,
                                        bool async = true);
  c10::intrusive_ptr<c10d::Work> launchCpu(c10d::OpType type, const char* op,
                                           const CallLabel& label,
                                           uint64_t seq, algo::Fingerprint fp,
                                           std::vector<at::Tensor> outputs,
                                           size_t bytes, std::chrono::milliseconds timeout,
                                           Body body, int64_t fr, bool async);
  // A blocking small collective (engine/small.h) of this CPU group, run on the
  // calling thread start to end with no Work (cpu_launch.cc): the op's whole call,
  // and dist.*'s with async_op=False. Returns its sequence number, or nothing when
  // it cannot run that way (the group is stopped or broken, work is queued ahead of
  // it, it is coalescing, c10d hooks want a Work): the caller then launches it the
  // general way. `tensor`: the user's (for the flight recorder). `gilHeld`: the
  // caller holds the GIL, which it keeps for the first pass and lets go of while it
  // waits for a peer. Throws the collective's error (DistBackendError) as wait()
  // would.
  std::optional<uint64_t> runSmallNow(const char* op, algo::Fingerprint fp,
                                      const algo::SmallJob& job,
                                      std::chrono::milliseconds timeout,
                                      const at::Tensor& tensor, bool gilHeld);
  // Starts or resumes a CPU task; false if `budget` ran out first (it can be
  // resumed). kForever: until it ends. True: it ended (its outcome is in the task),
  // and the caller calls endCpu once it holds no lock.
  static constexpr std::chrono::nanoseconds kForever = std::chrono::nanoseconds::max();
  bool runCpu(CpuTask& task, std::chrono::nanoseconds budget);
  // With no lock held (common/locks.h): completes the ended task's Work (its
  // future's callbacks run here, or on `callbacks`: RingcollWork::finish), runs
  // c10d's hooks and lets its memory go.
  void endCpu(CpuTask& task, CallbackRunner* callbacks = nullptr);
  // The worker's task: runCpu to the end, then endCpu, the future's callbacks on
  // callbacks_ (they may wait for the worker's next task).
  void runOnWorker(const std::shared_ptr<CpuTask>& task);
  std::chrono::milliseconds opTimeout(std::chrono::milliseconds requested) const;
  // Between slices of a CPU collective: throws if it must end now (a peer's report
  // in the store, abort(), shutdown() with no progress for kShutdownGrace).
  void checkInterrupts(CpuTask& task);
  // A collective called after abort()/shutdown(), or queued before abort(), fails at
  // once (one queued before shutdown() runs: runCpu).
  void throwIfStopped(const CallLabel& label) const;
  // What another rank reported in the group's store (a disagreement), "" if none.
  std::string peerReport();
  // The first failure of this group, as this rank saw or learnt it; "" if none.
  std::string brokenReason();
  void markBroken(const std::string& why);
  // Keeps the memory a failed CPU collective gave its transport (the user's tensors,
  // which its body captured; working copies and scratch, in its staged job and its
  // run) until stop() has closed the transport. A gloo send or receive of a failed
  // call can still be pending (its peer has not posted the other side); gloo reads
  // or writes that memory when the peer does, so it must not be freed before the
  // transport drops those operations, whatever the caller does with the tensors.
  void keepAfterFailure(CpuTask& task);
  enum class Stop : int { kRunning = 0, kShutdown = 1, kAbort = 2 };
  // abort() and shutdown(): one thread tears down (teardown()); a concurrent call
  // hurries it (requestStop) and waits for it. On one of ringcoll's own threads (a
  // future's callback that aborts the group runs on the worker or a watchdog),
  // which the teardown joins, it only requests: the failures come at once, the
  // joins and frees with the next stop() on another thread or the destructor.
  void stop(Stop how);
  // How the CPU transports' waiters wait: RINGCOLL_SPIN_US and RINGCOLL_YIELD.
  WaitPolicy waitPolicy() const;
  // The parts of a stop that wait for nothing: fails the stream paths' work at once
  // (kAbort) and tells point-to-point to stop.
  void requestStop(Stop how);
  void teardown(Stop how);
  // Whether a CPU collective over a buffer of `bytes` (reducing by `red`, or
  // null) runs as a small collective (engine/small.h), and if so logs it under
  // RINGCOLL_DEBUG: the same answer on every rank for the same call.
  bool small(const char* op, algo::SmallKind kind, const at::Tensor& t, size_t bytes,
             const algo::Reduction* red) const {
    if (!smallOn_ || bytes > smallBytes_ || (red && red->premul) || t.is_cuda()) return false;
    if (knobs_.debug) {
      logChoice(op, bytes, algo::SmallCollective::name(kind).c_str(), "RINGCOLL_SMALL_BYTES");
    }
    return true;
  }
  // RINGCOLL_DEBUG's line for the algorithm a call runs, and why.
  void logChoice(const char* op, size_t bytes, const char* algorithm, const char* why) const;
  algo::Params params(size_t n, int root = 0) const;
  // The algorithm RINGCOLL_ALGO selects for collective c over `bytes` bytes, logged
  // with the reason under RINGCOLL_DEBUG; a "ringcoll::<op>:" error if it does not
  // provide c. `like`: a tensor of the call; CUDA tensors use RINGCOLL_GPU_ALGO's
  // selection. `makeParams()`: the Params the call's job builds its schedule with
  // (the body's params(...)), for an algorithm written in Python, which is prepared
  // here, on the calling thread (schedules/registry.h: Algorithm::prepare); a
  // built-in one is returned as the registry entry (which lives for the whole
  // process) and no Params are made (they copy the ring order and hosts). A Python
  // algorithm that raises or whose schedule the checker refuses gives an algorithm
  // whose builder throws that error in the body: the call then fails on this rank
  // and breaks the group, and the other ranks, which entered the collective, learn
  // why from the group's store (launchCpu's and StreamPath::launch's rule for a
  // body that throws).
  // An algorithm that declares where it applies (registry.h: Applies) and does not
  // serve this call is refused here, on every rank alike, before anything is sent
  // (a barrier runs the default instead).
  template <typename MakeParams>
  algo::Prepared algorithm(const char* op, algo::Collective c, size_t bytes,
                           const at::Tensor& like, MakeParams&& makeParams) const {
    const algo::Algorithm* a = &choose(op, c, bytes, like);
    const bool declares = !a->applies(c).everywhere();
    if (!a->prepare && !declares) return algo::Prepared(algo::Prepared(), a);  // not owned
    const algo::Params prm = makeParams();
    if (declares) {
      const std::string why = a->refusal(c, prm.size, prm.n, bytes, prm.root);
      if (!why.empty() && c == algo::Collective::kBarrier) {
        a = &algo::defaultAlgorithm(c);
        if (knobs_.debug) logChoice(op, bytes, a->name.c_str(), ("default: " + why).c_str());
      }
      TORCH_CHECK(why.empty() || c == algo::Collective::kBarrier, "ringcoll::", op, ": ", why,
                  "; RINGCOLL_ALGO (or Options(algo=...)) must name another algorithm for it");
    }
    if (!a->prepare) return algo::Prepared(algo::Prepared(), a);  // not owned: no count kept
    return prepare(*a, c, prm);
  }
  // algorithm()'s two halves: the selection (and its debug line), and the
  // preparation of an algorithm written in Python.
  const algo::Algorithm& choose(const char* op, algo::Collective c, size_t bytes,
                                const at::Tensor& like) const;
  static algo::Prepared prepare(const algo::Algorithm& a, algo::Collective c,
                                const algo::Params& prm);
  // A flat working buffer of `numel` elements like `like` (dtype, device). On CPU it
  // is memory reused from one collective to the next: a fresh allocation of tens of
  // MiB costs page faults and zeroing on every call (a 32 MiB clone took 12 ms here,
  // a copy into reused memory 1.7 ms). Only the collective running on the executor
  // uses it, and collectives run one at a time, so one buffer serves them all.
  at::Tensor workspace(int64_t numel, const at::Tensor& like);
  // Tracing only: the record's tag for a call made now, and the writer's turn after
  // a collective.
  algo::TraceTag traceTag(const char* op, uint64_t seq) const;
  void afterCollective();
  // api_p2p.cc: posts one send or receive (srcOrDst kAnySource: any source).
  c10::intrusive_ptr<c10d::Work> postPointToPoint(const char* op, c10d::OpType type,
                                                  std::vector<at::Tensor>& tensors,
                                                  int peer, int tag);
  // Between startCoalescing and endCoalescing: `work` joins the coalesced Work.
  void noteCoalesced(const c10::intrusive_ptr<c10d::Work>& work);
  // Point-to-point on a stream path (api_p2p.cc): one message of a send or recv.
  struct StreamMessage {
    bool send = false;
    int peer = -1;
    int tag = 0;
    at::Tensor tensor;  // the user's
    at::Tensor flat;    // contiguous: the tensor, or a copy (copied back once received)
  };
  // The messages as one job (one NCCL group) on the stream path of their device.
  c10::intrusive_ptr<c10d::Work> launchStreamMessages(c10d::OpType type,
                                                      const CallLabel& label, uint64_t seq,
                                                      std::vector<StreamMessage> messages);
  // The point-to-point stream path for `t`'s device, created if needed.
  std::shared_ptr<StreamPath> pointToPointPathFor(const at::Tensor& t, const char* op,
                                                  const CallLabel& label);

  const c10::intrusive_ptr<c10d::Store> store_;
  const Knobs knobs_;
  bool smallOn_ = false;  // small collectives run (small()) ...
  size_t smallBytes_ = 0;  // ... up to this many bytes
  const algo::Selector selector_;
  // For CUDA tensors and the stream emulation: Knobs::gpuAlgo, else Knobs::algo
  // when set, else algo::gpuDefault(p).
  const algo::Selector gpuSelector_;
  const std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<c10d::Backend> p2p_;  // the gloo group the ports ride on; stop() drops it
  std::vector<int> ringOrder_;
  std::vector<int> ringHosts_;  // Params::hosts: each rank's host; empty on one host
  std::vector<int> ringNeighbours_;  // the ranks before and after this one in ringOrder_
  int64_t frGroup_ = -1;  // this group in the flight recorder (backend/flight_recorder.h)
  // After a timeout (the flight recorder's dump, then c10d's abort hooks) and on
  // success (c10d's completion hooks, keyed by the Work). Hooks run unlocked.
  void runFailureHooks();
  void runCompletionHooks(uint64_t key);
  static uint64_t completionKey(const c10d::Work& work);  // c10d's, where it has one
  // c10d hooks of one kind by id; run from a snapshot, so a hook may (un)register.
  // Held by shared_ptr: a hook may wrap a Python callable, whose copy or release
  // takes the GIL, so neither happens under the table's lock (common/locks.h).
  template <typename Hook>
  class HookTable {
   public:
    void add(int64_t id, Hook hook) {
      auto h = std::make_shared<const Hook>(std::move(hook));
      std::lock_guard<Mutex> lock(mutex_);
      hooks_[id].swap(h);  // a replaced hook goes with `h`, unlocked
      count_.store(hooks_.size(), std::memory_order_release);
    }
    void remove(int64_t id) {
      std::shared_ptr<const Hook> gone;
      std::lock_guard<Mutex> lock(mutex_);
      auto it = hooks_.find(id);
      if (it == hooks_.end()) return;
      gone.swap(it->second);  // released after the lock (declared before it)
      hooks_.erase(it);
      count_.store(hooks_.size(), std::memory_order_release);
    }
    // Without the lock: what every collective asks (most groups have no hooks).
    bool empty() const { return count_.load(std::memory_order_acquire) == 0; }
    std::vector<std::shared_ptr<const Hook>> snapshot() const {
      std::lock_guard<Mutex> lock(mutex_);
      std::vector<std::shared_ptr<const Hook>> out;
      for (const auto& [id, h] : hooks_) out.push_back(h);
      return out;
    }

   private:
    mutable Mutex mutex_{"RingcollBackend::HookTable"};
    std::map<int64_t, std::shared_ptr<const Hook>> hooks_;
    std::atomic<size_t> count_{0};  // hooks_.size()
  };
  HookTable<std::function<void()>> abortHooks_;
#ifdef RINGCOLL_COMPLETION_HOOKS
  HookTable<c10d::CompletionHook> completionHooks_;
#endif
  int globalRank_ = 0;    // this rank in the default group: names its flight-recorder dump
  // Tracing (null when off). Declared before the transport and executors, so the
  // tracer outlives every Execution that records into it.
  std::unique_ptr<algo::Tracer> tracer_;
  std::unique_ptr<TraceWriter> traceWriter_;
  std::unique_ptr<RoutedTransport> transport_;
  // Point-to-point: stopped with the backend, kept until it is destroyed (a call
  // racing stop() then fails instead of touching freed memory).
  std::unique_ptr<P2PEngine> pointToPoint_;
  std::atomic<uint64_t> p2pSeq_{0};        // numbers send/recv/coalesced Works
  std::atomic<uint64_t> monitoredSeq_{0};  // numbers monitoredBarrier calls
  // The backend's locks, named for RINGCOLL_CHECKS (common/locks.h: none is
  // held while a tensor may be freed, Python runs or a future's callbacks run).
  Mutex coalesceMutex_{"RingcollBackend::coalesceMutex_"};
  bool coalescing_ = false;
  std::atomic<bool> coalescingNow_{false};  // coalescing_, read without the lock
  std::vector<c10::intrusive_ptr<c10d::Work>> coalesced_;
  // Stream point-to-point messages of the open coalescing block, sent as one job at
  // endCoalescing, and the Works their calls returned (completed with it).
  std::vector<StreamMessage> streamBatch_;
  std::vector<c10::intrusive_ptr<RingcollWork>> streamBatchWorks_;
  CpuReducer reducer_;
  std::shared_ptr<algo::Executor> executor_;
  at::Tensor workspace_;  // bytes, CPU; see workspace()
  std::atomic<uint64_t> seq_{0};
  Mutex brokenMutex_{"RingcollBackend::brokenMutex_"};
  std::string brokenWhy_;  // the first peer failure, once there was one (brokenMutex_)
  std::atomic<bool> broken_{false};  // brokenWhy_ is set: every later call fails at once
  // stop(): the first caller tears down, the others wait for it (stopped_).
  Mutex stopMutex_{"RingcollBackend::stopMutex_"};
  std::condition_variable_any stopCv_;
  bool tearingDown_ = false;  // under stopMutex_
  bool tornDown_ = false;     // under stopMutex_
  Mutex keptMutex_{"RingcollBackend::keptMutex_"};
  std::vector<std::shared_ptr<void>> kept_;  // keepAfterFailure's, freed by stop()

  std::atomic<int> stop_{0};  // a Stop
  // The stream paths (stream_path.h): CUDA tensors' (created by the first CUDA
  // collective, bound to its device), and CPU tensors' under RINGCOLL_TRANSPORT=
  // stream (the emulation; created with the backend). A launch holds its own
  // reference, so stop() from another thread never frees a path under it.
  Mutex pathMutex_{"RingcollBackend::pathMutex_"};
  Mutex createMutex_{"RingcollBackend::createMutex_"};  // lazyPath: one creation at a time
  std::shared_ptr<StreamPath> cuda_;
  c10::DeviceIndex cudaIndex_ = -1;
  std::shared_ptr<StreamPath> streamPath_;
  // Point-to-point's stream paths: CUDA tensors' (an NCCL communicator of its own,
  // created by the first CUDA send/recv, which every rank of the group must make),
  // and the emulation's (RINGCOLL_TRANSPORT=stream, over a host transport of its
  // own). pairSeq: per path (0: emulation, 1: CUDA) and peer, the calls between
  // this rank and that peer, the number in their fingerprint; touched only by the
  // launching body (one launch at a time per path).
  std::shared_ptr<StreamPath> p2pCuda_;
  std::shared_ptr<StreamPath> p2pStream_;
  // The emulated paths' capture (captureBegin), shared by both.
  const std::shared_ptr<EmulatedCapture> capture_ = std::make_shared<EmulatedCapture>();
  // Throws for `label` if an emulated capture is under way: the call runs at once on
  // a host transport, where nothing can be recorded (`what` says which).
  void refuseUnderCapture(const CallLabel& label, const char* what) const;
  // Whether this thread's current CUDA stream is capturing a graph, as seen by the
  // group's CUDA path (false before its first CUDA collective).
  bool cudaCapturing();
  std::unique_ptr<RoutedTransport> p2pStreamHost_;
  std::vector<uint64_t> pairSeq_[2];
  // The stream path for `first`'s device, created if needed; throws if stopped.
  std::shared_ptr<StreamPath> streamPathFor(const at::Tensor& first, const char* op,
                                            const CallLabel& label);
  // `slot` (one of the paths above), made by `make` if it is not yet: at the first
  // call on it, as ProcessGroupNCCL makes its communicator. The creation waits for
  // every rank (comm_init.h) and gives up when the group stops (`stopping`), with no
  // lock held but createMutex_, which stop() takes to wait for it; a path made while
  // the group stopped is never published. Throws DistBackendError naming `label`.
  using MakePath = std::function<std::shared_ptr<StreamPath>(const Stopping&)>;
  std::shared_ptr<StreamPath> lazyPath(std::shared_ptr<StreamPath>& slot,
                                       const CallLabel& label, const MakePath& make);
  // The emulated paths' stand-in for ncclCommInitRank: an id from rank 0, then every
  // rank joins, through `store` under `key` (comm_init.h).
  void emulateCommInit(const std::string& key, c10d::Store& store, const Stopping& stopping);
  // The CUDA device this group is bound to: the first CUDA call's; another is an error.
  void checkCudaIndex(const char* op, c10::DeviceIndex index);
  // Held shared by every CPU launch (launchCpu, links()) from its stop_ check to
  // its return, and exclusively by stop() while it frees worker_, executor_ and
  // transport_: an abort() from another thread never frees them under a running
  // launch. A launch holds it for at most kInlineBudget and a hand-off.
  mutable SharedMutex cpuMutex_{"RingcollBackend::cpuMutex_"};
  // Where the futures of collectives that ended on the worker (and of point-to-point
  // requests) complete: common/callbacks.h. Joined by stop() after the worker.
  std::shared_ptr<CallbackRunner> callbacks_;
  // Declared last: destroyed first, so queued collectives finish while the
  // members they use still exist.
  std::unique_ptr<Worker> worker_;
};

}  // namespace ringcoll
