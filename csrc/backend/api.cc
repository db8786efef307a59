// The c10d API of RingcollBackend: each method checks its arguments once (on the
// calling thread, so every rank that sees a bad argument raises before anything is
// sent) and hands launch() the collective's staged body: the working buffer and
// the job, then what to copy back once the job is done.
#include "backend/backend.h"

#include <Python.h>

#include "backend/api_helpers.h"
#include "backend/checks.h"
#include "common/errors.h"

namespace ringcoll {

namespace {
// A small collective (engine/small.h) over `buf` (the whole buffer for all-reduce
// and broadcast, one block for reduce-scatter and all-gather: set `n` and the
// pointers after).
algo::SmallJob smallJob(algo::SmallKind kind, const at::Tensor& buf, DType dtype,
                        const algo::Reduction* red, int size = 0) {
  algo::SmallJob job;
  job.kind = kind;
  job.buf = buf.data_ptr();
  job.n = static_cast<size_t>(buf.numel());
  job.dtype = dtype;
  if (red) {
    job.op = red->op;
    job.divideBy = red->average ? size : 0;
  }
  return job;
}

// The small reduce-scatter of `src` (p blocks, only read) into `dst` (one block).
algo::SmallJob smallScatter(const at::Tensor& src, const at::Tensor& dst, DType dtype,
                            const algo::Reduction& red, int size) {
  algo::SmallJob job = smallJob(algo::SmallKind::kReduceScatter, dst, dtype, &red, size);
  job.buf = src.data_ptr();
  job.out = dst.data_ptr();
  return job;
}

// A reduce-scatter over `work` (this rank's whole input, which it clobbers); `out`
// receives the range the schedule says this rank keeps.
Staged reduceScatterInto(at::Tensor out, at::Tensor work, const algo::Algorithm& algo,
                         const algo::Params& prm, DType dtype, const algo::Reduction& red,
                         Reducer& reducer) {
  algo::Job job = algo::reduceScatter(algo, prm, work.data_ptr(), dtype, red, reducer);
  const algo::Range result = job.schedule.result;
  return Staged{std::move(job), [out, work, result]() mutable {
                  if (out.numel()) {
                    out.copy_(work.narrow(0, static_cast<int64_t>(result.begin),
                                          static_cast<int64_t>(result.size()))
                                  .view(out.sizes()));
                  }
                }};
}
}  // namespace

c10::intrusive_ptr<c10d::Work> RingcollBackend::allreduce(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  const char* op = "allreduce";
  if (checks::single(op, tensors, "input").layout() == at::kSparse) {
    return sparseAllreduce(tensors[0], opts);  // api_sparse.cc
  }
  at::Tensor t = checks::realView(op, tensors[0], &opts.reduceOp);
  const DType dtype = checks::tensorDType(op, t, "input");
  const algo::Reduction red = checks::reduction(op, opts.reduceOp, dtype);
  // No algorithm: a small collective (engine/small.h).
  const bool isSmall = small(op, algo::SmallKind::kAllreduce, t, bytesOf(t), &red);
  const algo::Fingerprint fp = callPrint(algo::Method::kAllreduce, dtype, t.numel(), &red);
  if (isSmall && !opts.asyncOp && t.is_contiguous()) {
    // Blocking: on this thread, start to end, the Work made completed (cpu_launch.cc).
    const algo::SmallJob job =
        smallJob(algo::SmallKind::kAllreduce, t, dtype, &red, getSize());
    const auto timeout = opTimeout(opts.timeout);
    if (const auto seq = runSmallNow(op, fp, job, timeout, t, /*gilHeld=*/false)) {
      return RingcollWork::completed(getRank(), c10d::OpType::ALLREDUCE,
                                     CallLabel{op, *seq, getRank(), getSize()}, timeout, {t});
    }
  }
  const algo::Prepared a =
      isSmall ? nullptr
              : algorithm(op, algo::Collective::kAllreduce, bytesOf(t), t,
                          [&] { return params(t.numel()); });
  return launch(c10d::OpType::ALLREDUCE, op, fp,
                {t}, {t}, bytesOf(t), opTimeout(opts.timeout),
                [this, a, t, dtype, red](algo::Executor& ex) {
                  at::Tensor flat = flatWorking(t);
                  std::function<void()> finish = [t, flat]() mutable { writeBack(t, flat); };
                  if (a == nullptr) {
                    return Staged{{}, std::move(finish),
                                  smallJob(algo::SmallKind::kAllreduce, flat, dtype, &red,
                                           getSize())};
                  }
                  return Staged{algo::allreduce(*a, params(flat.numel()),
                                                flat.data_ptr(), dtype, red, ex.reducer()),
                                std::move(finish)};
                },
                opts.asyncOp);
}

void RingcollBackend::allreduceNow(at::Tensor& tensor, bool gilHeld) {
  const char* op = "allreduce";
  if (tensor.layout() == at::kStrided && !tensor.is_complex() && tensor.is_contiguous()) {
    const DType dtype = checks::tensorDType(op, tensor, "input");
    const algo::Reduction red = checks::reduction(op, c10d::ReduceOp::SUM, dtype);
    if (small(op, algo::SmallKind::kAllreduce, tensor, bytesOf(tensor), &red)) {
      const algo::SmallJob job =
          smallJob(algo::SmallKind::kAllreduce, tensor, dtype, &red, getSize());
      if (runSmallNow(op, callPrint(algo::Method::kAllreduce, dtype, tensor.numel(), &red), job,
                      timeout_, tensor, gilHeld)) {
        return;
      }
    }
  }
  // Every other call: the general way, waited for (complex views, checks, errors).
  std::vector<at::Tensor> tensors{tensor};
  c10d::AllreduceOptions opts;
  opts.asyncOp = false;  // it may run inline up to RINGCOLL_INLINE_BYTES
  if (!gilHeld) {
    allreduce(tensors, opts)->wait();
    return;
  }
  PyThreadState* state = PyEval_SaveThread();
  try {
    allreduce(tensors, opts)->wait();
  } catch (...) {
    PyEval_RestoreThread(state);
    throw;
  }
  PyEval_RestoreThread(state);
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  const char* op = "allreduce_coalesced";
  TORCH_CHECK(!tensors.empty(), "ringcoll::", op, ": no tensors given");
  std::vector<at::Tensor> ts = checks::realViews(op, tensors, &opts.reduceOp);
  const DType dtype = checks::tensorDType(op, ts[0], "tensor 0");
  size_t bytes = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    checks::tensorDType(op, ts[i], "tensor");
    TORCH_CHECK(ts[i].scalar_type() == ts[0].scalar_type(), "ringcoll::", op,
                ": tensor ", i, " has dtype ", tensors[i].scalar_type(),
                " but tensor 0 has dtype ", tensors[0].scalar_type());
    bytes += bytesOf(ts[i]);
  }
  const algo::Reduction red = checks::reduction(op, opts.reduceOp, dtype);
  int64_t count = 0;
  for (const auto& t : ts) count += t.numel();
  const algo::Prepared a =
      algorithm(op, algo::Collective::kAllreduce, bytes, ts[0], [&] { return params(count); });
  return launch(c10d::OpType::ALLREDUCE_COALESCED, op,
                callPrint(algo::Method::kAllreduceCoalesced, dtype, count,
                          &red),
                ts, ts, bytes, opTimeout(opts.timeout),
                [this, a, ts, dtype, red](algo::Executor& ex) {
                  std::vector<at::Tensor> flats;
                  int64_t total = 0;
                  for (auto& t : ts) {
                    flats.push_back(t.reshape({-1}));
                    total += t.numel();
                  }
                  at::Tensor flat = workspace(total, ts[0]);
                  at::cat_out(flat, flats);
                  return Staged{algo::allreduce(*a, params(flat.numel()),
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
  at::Tensor t = checks::realView(op, checks::single(op, tensors, "input"), &opts.reduceOp);
  const DType dtype = checks::tensorDType(op, t, "input");
  checks::rootInRange(op, opts.rootRank, getSize());
  const algo::Reduction red = checks::reduction(op, opts.reduceOp, dtype);
  const int root = static_cast<int>(opts.rootRank);
  const bool isRoot = root == getRank();
  const algo::Prepared a =
      algorithm(op, algo::Collective::kReduce, bytesOf(t), t, [&] { return params(t.numel(), root); });
  // The schedule clobbers non-roots' buffers: they work on a copy so that their
  // input is left as it was.
  return launch(c10d::OpType::REDUCE, op,
                callPrint(algo::Method::kReduce, dtype, t.numel(), &red, root),
                {t}, {t}, bytesOf(t), opTimeout(opts.timeout),
                [this, a, t, dtype, red, root, isRoot](algo::Executor& ex) {
                  at::Tensor flat = isRoot ? flatWorking(t)
                                           : workspace(t.numel(), t).copy_(t.reshape({-1}));
                  return Staged{algo::reduce(*a, params(flat.numel(), root),
                                             flat.data_ptr(), dtype, red, ex.reducer()),
                                [t, flat, isRoot]() mutable {
                                  if (isRoot) writeBack(t, flat);
                                }};
                },
                opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::broadcast(
    std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  const char* op = "broadcast";
  at::Tensor t = checks::realView(op, checks::single(op, tensors, "input"));
  const DType dtype = checks::tensorDType(op, t, "input");
  checks::rootInRange(op, opts.rootRank, getSize());
  const int root = static_cast<int>(opts.rootRank);
  const algo::Prepared a =
      small(op, algo::SmallKind::kBroadcast, t, bytesOf(t), nullptr)
          ? nullptr  // small (engine/small.h)
          : algorithm(op, algo::Collective::kBroadcast, bytesOf(t), t,
                      [&] { return params(t.numel() * elementSize(dtype), root); });
  return launch(c10d::OpType::BROADCAST, op,
                callPrint(algo::Method::kBroadcast, dtype, t.numel(), nullptr, root),
                {t}, {t}, bytesOf(t), opTimeout(opts.timeout),
                [this, a, t, dtype, root](algo::Executor&) {
                  at::Tensor flat = flatWorking(t);
                  std::function<void()> finish = [t, flat]() mutable { writeBack(t, flat); };
                  if (a == nullptr) {
                    algo::SmallJob job =
                        smallJob(algo::SmallKind::kBroadcast, flat, dtype, nullptr);
                    job.root = root;
                    return Staged{{}, std::move(finish), job};
                  }
                  return Staged{algo::broadcast(*a,
                                                params(flat.numel() * elementSize(dtype), root),
                                                flat.data_ptr()),
                                std::move(finish)};
                },
                opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  const char* op = "all_gather_into_tensor";
  at::Tensor out = checks::realView(op, output);
  at::Tensor in = checks::realView(op, input);
  checks::basePair(op, out, "output", in, "input", getSize());
  const DType dtype = checks::tensorDType(op, in, "input");
  const algo::Prepared a =
      small(op, algo::SmallKind::kAllgather, out, bytesOf(out), nullptr)
          ? nullptr  // small (engine/small.h)
          : algorithm(op, algo::Collective::kAllgather, bytesOf(out), out, [&] { return params(out.numel()); });
  return launch(c10d::OpType::_ALLGATHER_BASE, op,
                callPrint(algo::Method::kAllgatherIntoTensor, dtype, in.numel()), {in}, {out},
                bytesOf(out), opTimeout(opts.timeout),
                [this, a, out, in, dtype](algo::Executor&) {
                  at::Tensor flat = flatWorking(out);
                  if (a == nullptr) {
                    // May be flat's block r (in place); anywhere else in it, a copy:
                    // the blocks are written over it.
                    at::Tensor own = flatWorking(in);
                    const char* block =
                        static_cast<const char*>(flat.data_ptr()) + getRank() * bytesOf(own);
                    if (overlaps(own, flat) && own.data_ptr() != block) own = own.clone();
                    algo::SmallJob job =
                        smallJob(algo::SmallKind::kAllgather, own, dtype, nullptr);
                    job.buf = flat.data_ptr();
                    job.in = own.data_ptr();
                    return Staged{{}, [out, flat, own]() mutable { writeBack(out, flat); }, job};
                  }
                  const algo::Range mine =
                      algo::blockRange(flat.numel(), getSize(), getRank());
                  algo::Job job = algo::allgather(*a, params(flat.numel()), flat.data_ptr(), dtype);
                  // Into the user's output only once the ranks agreed (the prologue).
                  job.prologue = [flat, in, mine]() mutable {
                    flat.narrow(0, mine.begin, mine.size()).copy_(in.reshape({-1}));
                  };
                  return Staged{std::move(job), [out, flat]() mutable { writeBack(out, flat); }};
                },
                opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const char* op = "allgather";
  at::Tensor in = checks::realView(op, checks::single(op, inputs, "input"));
  const DType dtype = checks::tensorDType(op, in, "input");
  auto outLists = checks::realViews(op, outputs);
  std::vector<at::Tensor> outs =
      checks::perRankList(op, outLists, "output", getSize(), in, "the input");
  const bool isSmall = small(op, algo::SmallKind::kAllgather, in, bytesOf(in) * outs.size(), nullptr);
  const algo::Prepared a =
      isSmall ? nullptr
              : algorithm(op, algo::Collective::kAllgather, bytesOf(in) * outs.size(), in,
                          [&] { return params(in.numel() * static_cast<int64_t>(outs.size())); });
  return launch(c10d::OpType::ALLGATHER, op, callPrint(algo::Method::kAllgather, dtype, in.numel()),
                {in}, outs, bytesOf(in) * outs.size(), opTimeout(opts.timeout),
                [this, a, outs, in, dtype](algo::Executor&) {
                  const int64_t m = in.numel();
                  at::Tensor flat = workspace(m * static_cast<int64_t>(outs.size()), in);
                  auto unpack = [outs, flat, m]() mutable {
                    for (size_t i = 0; i < outs.size(); ++i) {
                      if (m) outs[i].copy_(flat.narrow(0, i * m, m).view(outs[i].sizes()));
                    }
                  };
                  if (a == nullptr) {  // small: the blocks are placed once the ranks agreed
                    at::Tensor mine = flatWorking(in);
                    algo::SmallJob job =
                        smallJob(algo::SmallKind::kAllgather, mine, dtype, nullptr);
                    job.buf = flat.data_ptr();
                    job.in = mine.data_ptr();
                    return Staged{{}, [unpack, mine]() mutable { unpack(); }, job};
                  }
                  flat.narrow(0, getRank() * m, m).copy_(in.reshape({-1}));
                  return Staged{algo::allgather(*a, params(flat.numel()),
                                                flat.data_ptr(), dtype),
                                unpack};
                },
                opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter_tensor";
  at::Tensor out = checks::realView(op, output, &opts.reduceOp);
  at::Tensor in = checks::realView(op, input, &opts.reduceOp);
  checks::basePair(op, in, "input", out, "output", getSize());
  const DType dtype = checks::tensorDType(op, in, "input");
  const algo::Reduction red = checks::reduction(op, opts.reduceOp, dtype);
  const algo::Prepared a =
      small(op, algo::SmallKind::kReduceScatter, in, bytesOf(in), &red)
          ? nullptr  // small (engine/small.h)
          : algorithm(op, algo::Collective::kReduceScatter, bytesOf(in), in, [&] { return params(in.numel()); });
  return launch(c10d::OpType::_REDUCE_SCATTER_BASE, op,
                callPrint(algo::Method::kReduceScatterTensor, dtype, out.numel(),
                          &red),
                {in}, {out}, bytesOf(in), opTimeout(opts.timeout),
                [this, a, out, in, dtype, red](algo::Executor& ex) {
                  if (a == nullptr) {
                    // Only read. The result goes to `out` where it is in's block r
                    // or apart from `in`; elsewhere in it, to a buffer of its own.
                    at::Tensor src = flatWorking(in);
                    at::Tensor dst = flatWorking(out);
                    const char* block =
                        static_cast<const char*>(src.data_ptr()) + getRank() * bytesOf(dst);
                    if (overlaps(src, dst) && dst.data_ptr() != block) dst = at::empty_like(dst);
                    return Staged{{}, [out, src, dst]() mutable { writeBack(out, dst); },
                                  smallScatter(src, dst, dtype, red, getSize())};
                  }
                  // A schedule that writes only its result block reads the input where
                  // it is and reduces into the output (out contiguous, and apart from
                  // the input or exactly its block r).
                  at::Tensor src = flatWorking(in);
                  const char* block =
                      static_cast<const char*>(src.data_ptr()) + getRank() * bytesOf(out);
                  if (out.is_contiguous() && src.data_ptr() == in.data_ptr() &&
                      (!overlaps(src, out) || out.data_ptr() == block)) {
                    if (auto job = algo::reduceScatterFrom(*a, params(src.numel()),
                                                           src.data_ptr(), out.data_ptr(),
                                                           dtype, red, ex.reducer())) {
                      return Staged{std::move(*job), nullptr};
                    }
                  }
                  // The schedule reduces in place, so it works on a copy of the input.
                  at::Tensor work = workspace(in.numel(), in).copy_(in.reshape({-1}));
                  return reduceScatterInto(out, work, *a, params(work.numel()), dtype,
                                           red, ex.reducer());
                },
                opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter";
  at::Tensor out = checks::realView(op, checks::single(op, outputs, "output"), &opts.reduceOp);
  const DType dtype = checks::tensorDType(op, out, "output");
  auto inLists = checks::realViews(op, inputs, &opts.reduceOp);
  std::vector<at::Tensor> ins =
      checks::perRankList(op, inLists, "input", getSize(), out, "the output");
  const algo::Reduction red = checks::reduction(op, opts.reduceOp, dtype);
  const bool isSmall =
      small(op, algo::SmallKind::kReduceScatter, out, bytesOf(out) * ins.size(), &red);
  const algo::Prepared a =
      isSmall ? nullptr
              : algorithm(op, algo::Collective::kReduceScatter, bytesOf(out) * ins.size(), out,
                          [&] { return params(out.numel() * static_cast<int64_t>(ins.size())); });
  return launch(c10d::OpType::REDUCE_SCATTER, op,
                callPrint(algo::Method::kReduceScatter, dtype, out.numel(),
                          &red),
                ins, {out}, bytesOf(out) * ins.size(), opTimeout(opts.timeout),
                [this, a, out, ins, dtype, red](algo::Executor& ex) {
                  std::vector<at::Tensor> flats;
                  for (auto& t : ins) flats.push_back(t.reshape({-1}));
                  at::Tensor work = workspace(out.numel() * static_cast<int64_t>(ins.size()), out);
                  at::cat_out(work, flats);
                  if (a == nullptr) {
                    at::Tensor dst = flatWorking(out);
                    return Staged{{}, [out, work, dst]() mutable { writeBack(out, dst); },
                                  smallScatter(work, dst, dtype, red, getSize())};
                  }
                  return reduceScatterInto(out, work, *a, params(work.numel()), dtype,
                                           red, ex.reducer());
                },
                opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::barrier(const c10d::BarrierOptions& opts) {
  const char* op = "barrier";
  // It runs on the host (below), where a CUDA graph records nothing: inside a
  // capture it would block once now and never at a replay (backend/capture.h).
  if (cudaCapturing()) {
    C10_THROW_ERROR(DistBackendError,
                    "ringcoll::barrier: a barrier cannot be captured into a CUDA graph: it "
                    "blocks the host until every rank arrived, which a replay does not "
                    "repeat; call it outside the capture");
  }
  // The barrier's p bytes. Its own tensor, so that it runs where this group's CPU
  // collectives run (launch() routes by tensor): on the stream path under
  // RINGCOLL_TRANSPORT=stream, in order with them (it overtook queued async ones on
  // the CPU path and paired with a peer's collective instead).
  at::Tensor scratch = at::zeros({getSize()}, at::kByte);
  const algo::Prepared a = algorithm(op, algo::Collective::kBarrier,
                                     static_cast<size_t>(getSize()), scratch,
                                     [&] { return algo::barrierParams(params(0)); });
  algo::Fingerprint fp;
  fp.method = algo::Method::kBarrier;
  return launch(c10d::OpType::BARRIER, op, fp, {scratch}, {}, static_cast<size_t>(getSize()),
                opTimeout(opts.timeout), [this, a, scratch](algo::Executor&) {
                  return Staged{algo::barrier(*a, params(0), scratch.data_ptr()),
                                [scratch] {}};
                },
                opts.asyncOp);
}

}  // namespace ringcoll
