#include "backend/backend.h"

#include <Python.h>

#include <chrono>
#include <cstdio>
#include <optional>

#include <c10/util/Exception.h>

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
      selector_(knobs_.algo),
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

const algo::Algorithm* RingcollBackend::algorithm(const char* op, algo::Collective c,
                                                  size_t bytes) const {
  algo::Choice choice;
  try {
    choice = selector_.pick(c, bytes);
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK(false, "ringcoll::", op, ": ", e.what());
  }
  if (knobs_.debug) {
    std::fprintf(stderr, "[ringcoll rank %d/%d] %s %zu B: %s (%s)\n", getRank(), getSize(), op,
                 bytes, choice.algorithm->name.c_str(), choice.why.c_str());
  }
  return choice.algorithm;
}

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

}  // namespace ringcoll
