#include "backend/backend.h"

#include <Python.h>

#include <chrono>
#include <cstdio>

#include <c10/util/Exception.h>

#include "backend/checks.h"
#include "backend/work.h"
#include "common/errors.h"
#include "transport/gloo_transport.h"

namespace ringcoll {

namespace {
// Flat contiguous view of t's memory when t is contiguous, else a contiguous copy;
// the caller copies results back with writeBack().
at::Tensor flatWorking(const at::Tensor& t) { return t.contiguous().view({-1}); }

void writeBack(at::Tensor& dst, const at::Tensor& flat) {
  if (dst.numel() == 0) return;
  if (dst.is_contiguous() && dst.data_ptr() == flat.data_ptr()) return;
  dst.copy_(flat.view(dst.sizes()));
}
}  // namespace

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
  transport_ = std::make_unique<GlooTransport>(p2p_, timeout_, kInternalTag);
  staging_ = at::empty({static_cast<int64_t>(2 * knobs_.chunkBytes)}, at::kByte);
  executor_ = std::make_unique<algo::Executor>(
      *transport_, reducer_, algo::Staging{staging_.data_ptr(), 2 * knobs_.chunkBytes},
      knobs_.chunkBytes);
  worker_ = std::make_unique<Worker>();
  if (knobs_.debug) {
    std::fprintf(stderr, "[ringcoll rank %d/%d] %s transport=%s timeout=%lld ms\n", rank,
                 size, knobs_.describe().c_str(), transport_->name(),
                 static_cast<long long>(timeout_.count()));
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

std::chrono::milliseconds RingcollBackend::opTimeout(
    std::chrono::milliseconds requested) const {
  return requested.count() > 0 ? requested : timeout_;
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::launch(c10d::OpType type, const char* op,
                                                       const std::vector<at::Tensor>& inputs,
                                                       std::vector<at::Tensor> outputs,
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
  return launchCpu(type, label, seq, std::move(outputs), timeout, std::move(body));
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::launchCpu(c10d::OpType type,
                                                          const std::string& label,
                                                          uint64_t seq,
                                                          std::vector<at::Tensor> outputs,
                                                          std::chrono::milliseconds timeout,
                                                          Body body) {
  Transport* transport = transport_.get();
  auto work = c10::make_intrusive<RingcollWork>(
      getRank(), type, label, seq, timeout, std::move(outputs), [transport]() -> std::string {
        const int peer = transport->waitingFor();
        return peer >= 0 ? c10::str("it was waiting for rank ", peer)
                         : std::string("it was queued behind an earlier collective");
      });
  worker_->enqueue([this, work, body = std::move(body), label]() {
    {
      std::lock_guard<std::mutex> lock(brokenMutex_);
      if (!broken_.empty()) {
        try {
          C10_THROW_ERROR(DistBackendError,
                          c10::str(label, ": the group is unusable after an earlier "
                                          "failure: ", broken_));
        } catch (...) {
          work->finishWithError(std::current_exception());
        }
        return;
      }
    }
    const auto t0 = std::chrono::steady_clock::now();
    try {
      body(*executor_);
      if (knobs_.debug) {
        const double ms = std::chrono::duration<double, std::milli>(
                              std::chrono::steady_clock::now() - t0).count();
        std::fprintf(stderr, "[ringcoll] %s done in %.3f ms\n", label.c_str(), ms);
      }
      work->finish();
    } catch (const PeerError& e) {
      const std::string msg = c10::str(label, ": ", e.what());
      {
        std::lock_guard<std::mutex> lock(brokenMutex_);
        if (broken_.empty()) broken_ = msg;
      }
      try {
        C10_THROW_ERROR(DistBackendError, msg);
      } catch (...) {
        work->finishWithError(std::current_exception());
      }
    } catch (...) {
      work->finishWithError(std::current_exception());
    }
  });
  return work;
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::allreduce(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  const char* op = "allreduce";
  at::Tensor t = checks::single(op, tensors, "input");
  const DType dtype = checks::tensorDType(op, t, "input");
  const algo::Reduction red = checks::reduction(op, opts.reduceOp, dtype);
  return launch(c10d::OpType::ALLREDUCE, op, {t}, {t}, opTimeout(opts.timeout),
                [this, t, dtype, red](algo::Executor& ex) mutable {
                  at::Tensor flat = flatWorking(t);
                  algo::allreduce(ex, algorithm_, flat.data_ptr(), flat.numel(), dtype, red);
                  writeBack(t, flat);
                });
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  const char* op = "allreduce_coalesced";
  TORCH_CHECK(!tensors.empty(), "ringcoll::", op, ": no tensors given");
  const DType dtype = checks::tensorDType(op, tensors[0], "tensor 0");
  for (size_t i = 1; i < tensors.size(); ++i) {
    checks::tensorDType(op, tensors[i], "tensor");
    TORCH_CHECK(tensors[i].scalar_type() == tensors[0].scalar_type(), "ringcoll::", op,
                ": tensor ", i, " has dtype ", tensors[i].scalar_type(),
                " but tensor 0 has dtype ", tensors[0].scalar_type());
  }
  const algo::Reduction red = checks::reduction(op, opts.reduceOp, dtype);
  std::vector<at::Tensor> ts = tensors;
  return launch(c10d::OpType::ALLREDUCE_COALESCED, op, ts, ts, opTimeout(opts.timeout),
                [this, ts, dtype, red](algo::Executor& ex) mutable {
                  std::vector<at::Tensor> flats;
                  for (auto& t : ts) flats.push_back(t.reshape({-1}));
                  at::Tensor flat = at::cat(flats);
                  algo::allreduce(ex, algorithm_, flat.data_ptr(), flat.numel(), dtype, red);
                  int64_t off = 0;
                  for (auto& t : ts) {
                    writeBack(t, flat.narrow(0, off, t.numel()));
                    off += t.numel();
                  }
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
  return launch(c10d::OpType::REDUCE, op, {t}, {t}, opTimeout(opts.timeout),
                [this, t, dtype, red, isRoot](algo::Executor& ex) mutable {
                  at::Tensor flat = isRoot ? flatWorking(t) : t.reshape({-1}).clone();
                  algo::allreduce(ex, algorithm_, flat.data_ptr(), flat.numel(), dtype, red);
                  if (isRoot) writeBack(t, flat);
                });
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::broadcast(
    std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  const char* op = "broadcast";
  at::Tensor t = checks::single(op, tensors, "input");
  const DType dtype = checks::tensorDType(op, t, "input");
  checks::rootInRange(op, opts.rootRank, getSize());
  const int root = static_cast<int>(opts.rootRank);
  return launch(c10d::OpType::BROADCAST, op, {t}, {t}, opTimeout(opts.timeout),
                [this, t, dtype, root](algo::Executor& ex) mutable {
                  at::Tensor flat = flatWorking(t);
                  algo::broadcast(ex, algorithm_, flat.data_ptr(),
                                  flat.numel() * elementSize(dtype), root);
                  writeBack(t, flat);
                });
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  const char* op = "all_gather_into_tensor";
  checks::basePair(op, output, "output", input, "input", getSize());
  const DType dtype = checks::tensorDType(op, input, "input");
  at::Tensor out = output;
  at::Tensor in = input;
  const int me = getRank();
  return launch(c10d::OpType::_ALLGATHER_BASE, op, {in}, {out}, opTimeout(opts.timeout),
                [this, out, in, dtype, me](algo::Executor& ex) mutable {
                  const int64_t m = in.numel();
                  at::Tensor flat = flatWorking(out);
                  flat.narrow(0, me * m, m).copy_(in.reshape({-1}));
                  algo::allgather(ex, algorithm_, flat.data_ptr(), flat.numel(), dtype);
                  writeBack(out, flat);
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
  const int me = getRank();
  return launch(c10d::OpType::ALLGATHER, op, {in}, outs, opTimeout(opts.timeout),
                [this, outs, in, dtype, me](algo::Executor& ex) mutable {
                  const int64_t m = in.numel();
                  at::Tensor flat = at::empty({m * static_cast<int64_t>(outs.size())},
                                              in.options());
                  flat.narrow(0, me * m, m).copy_(in.reshape({-1}));
                  algo::allgather(ex, algorithm_, flat.data_ptr(), flat.numel(), dtype);
                  for (size_t i = 0; i < outs.size(); ++i) {
                    if (m) outs[i].copy_(flat.narrow(0, i * m, m).view(outs[i].sizes()));
                  }
                });
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter_tensor";
  checks::basePair(op, input, "input", output, "output", getSize());
  const DType dtype = checks::tensorDType(op, input, "input");
  const algo::Reduction red = checks::reduction(op, opts.reduceOp, dtype);
  at::Tensor out = output;
  at::Tensor in = input;
  const int me = getRank();
  return launch(c10d::OpType::_REDUCE_SCATTER_BASE, op, {in}, {out}, opTimeout(opts.timeout),
                [this, out, in, dtype, red, me](algo::Executor& ex) mutable {
                  const int64_t m = out.numel();
                  // The ring reduces in place, so it works on a copy of the input.
                  at::Tensor work = in.reshape({-1}).clone();
                  algo::reduceScatter(ex, algorithm_, work.data_ptr(), work.numel(), dtype,
                                      red);
                  if (m) out.copy_(work.narrow(0, me * m, m).view(out.sizes()));
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
  const int me = getRank();
  return launch(c10d::OpType::REDUCE_SCATTER, op, ins, {out}, opTimeout(opts.timeout),
                [this, out, ins, dtype, red, me](algo::Executor& ex) mutable {
                  const int64_t m = out.numel();
                  std::vector<at::Tensor> flats;
                  for (auto& t : ins) flats.push_back(t.reshape({-1}));
                  at::Tensor work = at::cat(flats);
                  algo::reduceScatter(ex, algorithm_, work.data_ptr(), work.numel(), dtype,
                                      red);
                  if (m) out.copy_(work.narrow(0, me * m, m).view(out.sizes()));
                });
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::barrier(const c10d::BarrierOptions& opts) {
  const char* op = "barrier";
  return launch(c10d::OpType::BARRIER, op, {}, {}, opTimeout(opts.timeout),
                [this](algo::Executor& ex) {
                  at::Tensor scratch = at::zeros({getSize()}, at::kByte);
                  algo::barrier(ex, algorithm_, scratch.data_ptr());
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
