#include "backend/backend.h"

#include <Python.h>

#include <chrono>
#include <cstdio>
#include <optional>

#include <c10/util/Exception.h>

#include "backend/checks.h"
#include "backend/gloo_port.h"
#include "backend/topology.h"
#include "backend/work.h"
#include "common/errors.h"

namespace ringcoll {

namespace {
using Clock = std::chrono::steady_clock;

// How long a collective run on the calling thread may wait for its peers before it
// is handed to the worker, so that async_op=True returns promptly when a peer is
// late; an on-time small collective finishes well within it.
constexpr auto kInlineBudget = std::chrono::milliseconds(2);

// Flat contiguous view of t's memory when t is contiguous, else a contiguous copy;
// the caller copies results back with writeBack().
at::Tensor flatWorking(const at::Tensor& t) { return t.contiguous().view({-1}); }

void writeBack(at::Tensor& dst, const at::Tensor& flat) {
  if (dst.numel() == 0) return;
  if (dst.is_contiguous() && dst.data_ptr() == flat.data_ptr()) return;
  dst.copy_(flat.view(dst.sizes()));
}

size_t bytesOf(const at::Tensor& t) { return t.numel() * t.element_size(); }
}  // namespace

// A CPU collective, started on one thread and possibly finished on another.
struct RingcollBackend::CpuTask {
  c10::intrusive_ptr<RingcollWork> work;
  Body body;
  std::string label;
  std::chrono::milliseconds timeout;
  std::optional<Staged> staged;
  std::unique_ptr<algo::Execution> exec;
  Clock::time_point started;
};

RingcollBackend::RingcollBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                 int size, std::chrono::milliseconds timeout,
                                 c10::intrusive_ptr<c10d::Backend> p2p, Knobs knobs)
    : c10d::Backend(rank, size),
      store_(store),
      knobs_(std::move(knobs)),
      algorithm_(algo::findAlgorithm(knobs_.algo)),
      timeout_(timeout),
      p2p_(std::move(p2p)) {
  TORCH_CHECK(p2p_, "ringcoll: backend created without its point-to-point group");
  TORCH_CHECK(p2p_->getRank() == rank && p2p_->getSize() == size,
              "ringcoll: point-to-point group is rank ", p2p_->getRank(), " of ",
              p2p_->getSize(), " but the backend is rank ", rank, " of ", size);
  StoreRendezvous rv(store_);
  const Topology topo = exchangeTopology(rv, rank, size,
                                         knobs_.host.empty() ? thisHost() : knobs_.host);
  ringOrder_ = topo.order;
  try {
    transport_ = makeCpuTransport(topo, knobs_.transport, rv, makeGlooPort(p2p_, kInternalTag),
                                  rank, size, knobs_.chunkBytes, timeout_);
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK(false, "ringcoll: ", e.what());
  } catch (const std::runtime_error& e) {
    C10_THROW_ERROR(DistBackendError, c10::str("ringcoll: setting up the transport: ", e.what()));
  }
  executor_ = std::make_unique<algo::Executor>(*transport_, reducer_, knobs_.chunkBytes);
  worker_ = std::make_unique<Worker>();
  if (knobs_.debug) {
    std::string links;
    for (const auto& l : this->links()) links += (links.empty() ? "" : ",") + (l.empty() ? "-" : l);
    std::fprintf(stderr, "[ringcoll rank %d/%d] %s transport=%s links=%s timeout=%lld ms\n",
                 rank, size, knobs_.describe().c_str(), transport_->name().c_str(),
                 links.c_str(), static_cast<long long>(timeout_.count()));
  }
}

RingcollBackend::~RingcollBackend() {
  // Joining the worker (and the CUDA watchdog) can wait on the GIL: their last
  // references to user tensors may be Python-owned, and dropping those needs the
  // GIL. destroy_process_group frees the backend with the GIL held, so release it
  // while joining, or the two threads deadlock.
  auto join = [this] {
    worker_.reset();
#ifdef RINGCOLL_WITH_CUDA
    cuda_.reset();
#endif
  };
  if (Py_IsInitialized() && PyGILState_Check()) {
    Py_BEGIN_ALLOW_THREADS
    join();
    Py_END_ALLOW_THREADS
  } else {
    join();
  }
}

std::vector<std::string> RingcollBackend::links() const {
  std::vector<std::string> out;
  for (int r = 0; r < getSize(); ++r) out.push_back(r == getRank() ? "" : transport_->linkName(r));
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
  return prm;
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::launch(c10d::OpType type, const char* op,
                                                       const std::vector<at::Tensor>& inputs,
                                                       std::vector<at::Tensor> outputs,
                                                       size_t bytes,
                                                       std::chrono::milliseconds timeout,
                                                       Body body) {
  const uint64_t seq = ++seq_;
  const std::string label = RingcollWork::label(op, seq, getRank(), getSize());
  const at::Tensor* first = !inputs.empty() ? &inputs[0] : (!outputs.empty() ? &outputs[0] : nullptr);
  if (first && first->is_cuda()) {
#ifdef RINGCOLL_WITH_CUDA
    CudaPath* path;
    {
      std::lock_guard<std::mutex> lock(cudaMutex_);
      if (!cuda_) {
        cuda_ = std::make_unique<CudaPath>(store_, getRank(), getSize(), timeout_, knobs_,
                                           first->device().index());
      }
      path = cuda_.get();
    }
    TORCH_CHECK(first->device().index() == path->device(), "ringcoll::", op,
                ": tensor is on cuda:", static_cast<int>(first->device().index()),
                " but this process group is bound to cuda:", static_cast<int>(path->device()));
    return path->launch(type, label, seq, inputs, std::move(outputs), body);
#else
    TORCH_CHECK(false, "ringcoll::", op, ": this ringcoll build has no CUDA support");
#endif
  }
  return launchCpu(type, label, seq, std::move(outputs), bytes, timeout, std::move(body));
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::launchCpu(c10d::OpType type,
                                                          const std::string& label,
                                                          uint64_t seq,
                                                          std::vector<at::Tensor> outputs,
                                                          size_t bytes,
                                                          std::chrono::milliseconds timeout,
                                                          Body body) {
  algo::Executor* executor = executor_.get();
  auto task = std::make_shared<CpuTask>();
  task->work = c10::make_intrusive<RingcollWork>(
      getRank(), type, label, seq, timeout, std::move(outputs), [executor]() -> std::string {
        const int peer = executor->waitingFor();
        return peer >= 0 ? c10::str("it was waiting for rank ", peer)
                         : std::string("it was queued behind an earlier collective");
      });
  task->body = std::move(body);
  task->label = label;
  task->timeout = timeout;
  // Small and nothing ahead of it: run here, no hand-off to the worker and back.
  if (bytes <= knobs_.inlineBytes && worker_->tryClaim()) {
    if (runCpu(*task, Clock::now() + kInlineBudget)) {
      worker_->release();
    } else {
      worker_->handOff([this, task] { runCpu(*task, Clock::time_point::max()); });
    }
    return task->work;
  }
  worker_->enqueue([this, task] { runCpu(*task, Clock::time_point::max()); });
  return task->work;
}

bool RingcollBackend::runCpu(CpuTask& t, Clock::time_point until) {
  try {
    if (!t.exec) {
      {
        std::lock_guard<std::mutex> lock(brokenMutex_);
        if (!broken_.empty()) {
          C10_THROW_ERROR(DistBackendError,
                          c10::str(t.label, ": the group is unusable after an earlier "
                                            "failure: ", broken_));
        }
      }
      t.started = Clock::now();
      t.staged = t.body(*executor_);
      t.exec = executor_->start(std::move(t.staged->job));
    }
    if (!executor_->drive(*t.exec, until, t.timeout)) return false;
    if (t.staged->finish) t.staged->finish();
    if (knobs_.debug) {
      const double ms =
          std::chrono::duration<double, std::milli>(Clock::now() - t.started).count();
      std::fprintf(stderr, "[ringcoll] %s %s done in %.3f ms\n", t.label.c_str(),
                   t.exec->schedule().name.c_str(), ms);
    }
    t.exec.reset();
    t.staged.reset();
    t.work->finish();
  } catch (const PeerError& e) {
    const std::string msg = c10::str(t.label, ": ", e.what());
    {
      std::lock_guard<std::mutex> lock(brokenMutex_);
      if (broken_.empty()) broken_ = msg;
    }
    try {
      C10_THROW_ERROR(DistBackendError, msg);
    } catch (...) {
      t.work->finishWithError(std::current_exception());
    }
  } catch (...) {
    t.work->finishWithError(std::current_exception());
  }
  return true;
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::allreduce(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  const char* op = "allreduce";
  at::Tensor t = checks::single(op, tensors, "input");
  const DType dtype = checks::tensorDType(op, t, "input");
  const algo::Reduction red = checks::reduction(op, opts.reduceOp, dtype);
  return launch(c10d::OpType::ALLREDUCE, op, {t}, {t}, bytesOf(t), opTimeout(opts.timeout),
                [this, t, dtype, red](algo::Executor& ex) {
                  at::Tensor flat = flatWorking(t);
                  return Staged{algo::allreduce(algorithm_, params(flat.numel()),
                                                flat.data_ptr(), dtype, red, ex.reducer()),
                                [t, flat]() mutable { writeBack(t, flat); }};
                });
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  const char* op = "allreduce_coalesced";
  TORCH_CHECK(!tensors.empty(), "ringcoll::", op, ": no tensors given");
  const DType dtype = checks::tensorDType(op, tensors[0], "tensor 0");
  size_t bytes = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    checks::tensorDType(op, tensors[i], "tensor");
    TORCH_CHECK(tensors[i].scalar_type() == tensors[0].scalar_type(), "ringcoll::", op,
                ": tensor ", i, " has dtype ", tensors[i].scalar_type(),
                " but tensor 0 has dtype ", tensors[0].scalar_type());
    bytes += bytesOf(tensors[i]);
  }
  const algo::Reduction red = checks::reduction(op, opts.reduceOp, dtype);
  std::vector<at::Tensor> ts = tensors;
  return launch(c10d::OpType::ALLREDUCE_COALESCED, op, ts, ts, bytes, opTimeout(opts.timeout),
                [this, ts, dtype, red](algo::Executor& ex) {
                  std::vector<at::Tensor> flats;
                  for (auto& t : ts) flats.push_back(t.reshape({-1}));
                  at::Tensor flat = at::cat(flats);
                  return Staged{algo::allreduce(algorithm_, params(flat.numel()),
                                                flat.data_ptr(), dtype, red, ex.reducer()),
                                [ts, flat]() mutable {
                                  int64_t off = 0;
                                  for (auto& t : ts) {
                                    writeBack(t, flat.narrow(0, off, t.numel()));
                                    off += t.numel();
                                  }
                                }};
                });
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::reduce(std::vector<at::Tensor>& tensors,
                                                       const c10d::ReduceOptions& opts) {
  const char* op = "reduce";
  at::Tensor t = checks::single(op, tensors, "input");
  const DType dtype = checks::tensorDType(op, t, "input");
  checks::rootInRange(op, opts.rootRank, getSize());
  const algo::Reduction red = checks::reduction(op, opts.reduceOp, dtype);
  const bool isRoot = opts.rootRank == getRank();
  // An all-reduce whose result only the root keeps: non-roots work on a copy so
  // their input is left as it was.
  return launch(c10d::OpType::REDUCE, op, {t}, {t}, bytesOf(t), opTimeout(opts.timeout),
                [this, t, dtype, red, isRoot](algo::Executor& ex) {
                  at::Tensor flat = isRoot ? flatWorking(t) : t.reshape({-1}).clone();
                  return Staged{algo::allreduce(algorithm_, params(flat.numel()),
                                                flat.data_ptr(), dtype, red, ex.reducer()),
                                [t, flat, isRoot]() mutable {
                                  if (isRoot) writeBack(t, flat);
                                }};
                });
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::broadcast(
    std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  const char* op = "broadcast";
  at::Tensor t = checks::single(op, tensors, "input");
  const DType dtype = checks::tensorDType(op, t, "input");
  checks::rootInRange(op, opts.rootRank, getSize());
  const int root = static_cast<int>(opts.rootRank);
  return launch(c10d::OpType::BROADCAST, op, {t}, {t}, bytesOf(t), opTimeout(opts.timeout),
                [this, t, dtype, root](algo::Executor&) {
                  at::Tensor flat = flatWorking(t);
                  return Staged{algo::broadcast(algorithm_,
                                                params(flat.numel() * elementSize(dtype), root),
                                                flat.data_ptr()),
                                [t, flat]() mutable { writeBack(t, flat); }};
                });
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  const char* op = "all_gather_into_tensor";
  checks::basePair(op, output, "output", input, "input", getSize());
  const DType dtype = checks::tensorDType(op, input, "input");
  at::Tensor out = output;
  at::Tensor in = input;
  return launch(c10d::OpType::_ALLGATHER_BASE, op, {in}, {out}, bytesOf(out),
                opTimeout(opts.timeout), [this, out, in, dtype](algo::Executor&) {
                  at::Tensor flat = flatWorking(out);
                  const algo::Range mine =
                      algo::blockRange(flat.numel(), getSize(), getRank());
                  flat.narrow(0, mine.begin, mine.size()).copy_(in.reshape({-1}));
                  return Staged{algo::allgather(algorithm_, params(flat.numel()),
                                                flat.data_ptr(), dtype),
                                [out, flat]() mutable { writeBack(out, flat); }};
                });
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const char* op = "allgather";
  at::Tensor in = checks::single(op, inputs, "input");
  const DType dtype = checks::tensorDType(op, in, "input");
  std::vector<at::Tensor> outs =
      checks::perRankList(op, outputs, "output", getSize(), in, "the input");
  return launch(c10d::OpType::ALLGATHER, op, {in}, outs, bytesOf(in) * outs.size(),
                opTimeout(opts.timeout), [this, outs, in, dtype](algo::Executor&) {
                  const int64_t m = in.numel();
                  at::Tensor flat = at::empty({m * static_cast<int64_t>(outs.size())},
                                              in.options());
                  flat.narrow(0, getRank() * m, m).copy_(in.reshape({-1}));
                  return Staged{algo::allgather(algorithm_, params(flat.numel()),
                                                flat.data_ptr(), dtype),
                                [outs, flat, m]() mutable {
                                  for (size_t i = 0; i < outs.size(); ++i) {
                                    if (m) outs[i].copy_(flat.narrow(0, i * m, m)
                                                             .view(outs[i].sizes()));
                                  }
                                }};
                });
}

namespace {
// The reduce-scatter result: the range the schedule says this rank keeps.
void copyResult(at::Tensor& out, const at::Tensor& work, const algo::Range& result) {
  if (out.numel()) {
    out.copy_(work.narrow(0, static_cast<int64_t>(result.begin),
                          static_cast<int64_t>(result.size())).view(out.sizes()));
  }
}
}  // namespace

c10::intrusive_ptr<c10d::Work> RingcollBackend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter_tensor";
  checks::basePair(op, input, "input", output, "output", getSize());
  const DType dtype = checks::tensorDType(op, input, "input");
  const algo::Reduction red = checks::reduction(op, opts.reduceOp, dtype);
  at::Tensor out = output;
  at::Tensor in = input;
  return launch(c10d::OpType::_REDUCE_SCATTER_BASE, op, {in}, {out}, bytesOf(in),
                opTimeout(opts.timeout), [this, out, in, dtype, red](algo::Executor& ex) {
                  // The schedule reduces in place, so it works on a copy of the input.
                  at::Tensor work = in.reshape({-1}).clone();
                  algo::Job job = algo::reduceScatter(algorithm_, params(work.numel()),
                                                      work.data_ptr(), dtype, red,
                                                      ex.reducer());
                  const algo::Range result = job.schedule.result;
                  return Staged{std::move(job), [out, work, result]() mutable {
                                  copyResult(out, work, result);
                                }};
                });
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter";
  at::Tensor out = checks::single(op, outputs, "output");
  const DType dtype = checks::tensorDType(op, out, "output");
  std::vector<at::Tensor> ins =
      checks::perRankList(op, inputs, "input", getSize(), out, "the output");
  const algo::Reduction red = checks::reduction(op, opts.reduceOp, dtype);
  return launch(c10d::OpType::REDUCE_SCATTER, op, ins, {out}, bytesOf(out) * ins.size(),
                opTimeout(opts.timeout), [this, out, ins, dtype, red](algo::Executor& ex) {
                  std::vector<at::Tensor> flats;
                  for (auto& t : ins) flats.push_back(t.reshape({-1}));
                  at::Tensor work = at::cat(flats);
                  algo::Job job = algo::reduceScatter(algorithm_, params(work.numel()),
                                                      work.data_ptr(), dtype, red,
                                                      ex.reducer());
                  const algo::Range result = job.schedule.result;
                  return Staged{std::move(job), [out, work, result]() mutable {
                                  copyResult(out, work, result);
                                }};
                });
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::barrier(const c10d::BarrierOptions& opts) {
  const char* op = "barrier";
  return launch(c10d::OpType::BARRIER, op, {}, {}, static_cast<size_t>(getSize()),
                opTimeout(opts.timeout), [this](algo::Executor&) {
                  at::Tensor scratch = at::zeros({getSize()}, at::kByte);
                  return Staged{algo::barrier(algorithm_, params(0), scratch.data_ptr()),
                                [scratch] {}};
                });
}

// User point-to-point goes straight to the gloo group: it is not a collective and
// has no schedule. ringcoll's own traffic uses kInternalTag, which users may not.
c10::intrusive_ptr<c10d::Work> RingcollBackend::send(std::vector<at::Tensor>& tensors,
                                                     int dstRank, int tag) {
  TORCH_CHECK(tag != kInternalTag, "ringcoll::send: tag ", tag,
              " is reserved for ringcoll's collectives");
  checks::rootInRange("send", dstRank, getSize());
  return p2p_->send(tensors, dstRank, tag);
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::recv(std::vector<at::Tensor>& tensors,
                                                     int srcRank, int tag) {
  TORCH_CHECK(tag != kInternalTag, "ringcoll::recv: tag ", tag,
              " is reserved for ringcoll's collectives");
  checks::rootInRange("recv", srcRank, getSize());
  return p2p_->recv(tensors, srcRank, tag);
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::recvAnysource(
    std::vector<at::Tensor>& tensors, int tag) {
  TORCH_CHECK(tag != kInternalTag, "ringcoll::recv: tag ", tag,
              " is reserved for ringcoll's collectives");
  return p2p_->recvAnysource(tensors, tag);
}

}  // namespace ringcoll
