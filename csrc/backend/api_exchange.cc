// The c10d methods that move blocks without reducing: gather, scatter, all-to-all
// (a list of tensors, any sizes) and alltoall_base (one tensor, equal or given
// split sizes; what all_to_all_single calls). Each checks its arguments once, on
// the calling thread, and runs its schedule (engine/collectives/gather.cc, scatter.cc,
// alltoall.cc; the algorithm RINGCOLL_ALGO picks, direct by default) directly on
// the user's tensors: a contiguous tensor is used in
// place, a non-contiguous one through a contiguous copy written back at the end.
// CPU and CUDA tensors alike; the tensors of one call share a device.
#include "backend/backend.h"

#include "backend/api_helpers.h"
#include "backend/checks.h"
#include "common/errors.h"

namespace ringcoll {

namespace {
// Pointers to consecutive blocks of flat (counts[j] elements each).
template <typename Ptr>
std::vector<Ptr> blocksOf(const at::Tensor& flat, const std::vector<size_t>& counts) {
  std::vector<Ptr> out;
  char* base = static_cast<char*>(flat.data_ptr());
  size_t off = 0;
  for (size_t c : counts) {
    out.push_back(base == nullptr ? nullptr : base + off * flat.element_size());
    off += c;
  }
  return out;
}
}  // namespace

c10::intrusive_ptr<c10d::Work> RingcollBackend::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  const char* op = "gather";
  at::Tensor in = checks::realView(op, checks::single(op, inputs, "input"));
  const DType dtype = checks::tensorDType(op, in, "input");
  checks::rootInRange(op, opts.rootRank, getSize());
  const int root = static_cast<int>(opts.rootRank);
  auto outLists = checks::realViews(op, outputs);
  std::vector<at::Tensor> outs =
      checks::rootList(op, outLists, "output", getRank(), root, getSize(), in, "the input");
  for (size_t i = 0; i < outs.size(); ++i) {
    checks::sameDevice(op, outs[i], c10::str("output ", i), in, "the input");
  }
  const algo::Prepared a = algorithm(op, algo::Collective::kGather, bytesOf(in) * getSize(), in,
                                     [&] { return params(in.numel() * getSize(), root); });
  return launch(c10d::OpType::GATHER, op,
                callPrint(algo::Method::kGather, dtype, in.numel(), nullptr, root), {in}, outs,
                bytesOf(in) * getSize(), opTimeout(opts.timeout),
                [this, a, in, outs, dtype, root](algo::Executor& ex) {
                  at::Tensor mine = flatWorking(in);
                  std::vector<at::Tensor> flats;
                  std::vector<void*> blocks;
                  for (const auto& o : outs) {
                    flats.push_back(flatWorking(o));
                    blocks.push_back(flats.back().data_ptr());
                  }
                  algo::Job job = algo::gather(*a, params(mine.numel() * getSize(), root),
                                               dtype, mine.data_ptr(), blocks, ex.reducer());
                  return Staged{std::move(job), [outs, flats, mine]() mutable {
                                  for (size_t i = 0; i < outs.size(); ++i) {
                                    writeBack(outs[i], flats[i]);
                                  }
                                }};
                },
                opts.asyncOp);
}

#ifdef RINGCOLL_C10D_SINGLE_NAMES
// gather into one flat buffer on the root (torch >= 2.14): the root's output, which
// must be contiguous and hold p x the input's elements, is cut into p views in rank
// order that gather() fills in place; the other ranks' output is not used (torch
// passes an empty tensor).
c10::intrusive_ptr<c10d::Work> RingcollBackend::gather_single(at::Tensor& output,
                                                              at::Tensor& input,
                                                              const c10d::GatherOptions& opts) {
  const char* op = "gather_single";
  checks::rootInRange(op, opts.rootRank, getSize());
  std::vector<at::Tensor> inputs{input};
  std::vector<std::vector<at::Tensor>> outputs;
  if (opts.rootRank == getRank()) {
    TORCH_CHECK(output.scalar_type() == input.scalar_type(), "ringcoll::", op,
                ": output has dtype ", output.scalar_type(), " but input has dtype ",
                input.scalar_type());
    TORCH_CHECK(output.numel() == input.numel() * getSize(), "ringcoll::", op, ": output has ",
                output.numel(), " elements but must have ", input.numel() * getSize(),
                " (world size x input numel)");
    TORCH_CHECK(output.is_contiguous(), "ringcoll::", op,
                ": the output tensor must be contiguous (it is filled in place, rank by rank)");
    at::Tensor flat = output.view({-1});
    std::vector<at::Tensor> blocks;
    for (int r = 0; r < getSize(); ++r) {
      blocks.push_back(flat.narrow(0, r * input.numel(), input.numel()));
    }
    outputs.push_back(std::move(blocks));
  }
  return gather(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::gather_into_tensor(
    at::Tensor& output, at::Tensor& input, const c10d::GatherOptions& opts) {
  return gather_single(output, input, opts);
}
#endif

c10::intrusive_ptr<c10d::Work> RingcollBackend::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  const char* op = "scatter";
  at::Tensor out = checks::realView(op, checks::single(op, outputs, "output"));
  const DType dtype = checks::tensorDType(op, out, "output");
  checks::rootInRange(op, opts.rootRank, getSize());
  const int root = static_cast<int>(opts.rootRank);
  auto inLists = checks::realViews(op, inputs);
  std::vector<at::Tensor> ins =
      checks::rootList(op, inLists, "input", getRank(), root, getSize(), out, "the output");
  for (size_t i = 0; i < ins.size(); ++i) {
    checks::sameDevice(op, ins[i], c10::str("input ", i), out, "the output");
  }
  const algo::Prepared a = algorithm(op, algo::Collective::kScatter, bytesOf(out) * getSize(),
                                     out, [&] { return params(out.numel() * getSize(), root); });
  return launch(c10d::OpType::SCATTER, op,
                callPrint(algo::Method::kScatter, dtype, out.numel(), nullptr, root), ins,
                {out}, bytesOf(out) * getSize(), opTimeout(opts.timeout),
                [this, a, out, ins, dtype, root](algo::Executor& ex) {
                  at::Tensor mine = flatWorking(out);
                  std::vector<at::Tensor> flats;
                  std::vector<const void*> blocks;
                  for (size_t j = 0; j < ins.size(); ++j) {
                    flats.push_back(flatWorking(ins[j]));
                    blocks.push_back(flats.back().data_ptr());
                    // The root's own block is copied out before the others leave:
                    // an output that shares memory with another rank's block
                    // receives through a copy of its own.
                    if (static_cast<int>(j) != root && overlaps(flats.back(), mine)) {
                      mine = at::empty({out.numel()}, out.options());
                    }
                  }
                  algo::Job job = algo::scatter(*a, params(mine.numel() * getSize(), root),
                                                dtype, mine.data_ptr(), blocks, ex.reducer());
                  return Staged{std::move(job), [out, flats, mine]() mutable {
                                  writeBack(out, mine);
                                }};
                },
                opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplitSizes,
    std::vector<int64_t>& inputSplitSizes, const c10d::AllToAllOptions& opts) {
  const char* op = "alltoall_base";
  at::Tensor out = checks::realView(op, output);
  at::Tensor in = checks::realView(op, input);
  const DType dtype = checks::tensorDType(op, in, "input");
  checks::tensorDType(op, out, "output");
  checks::sameDevice(op, out, "output", in, "input");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "ringcoll::", op,
              ": output has dtype ", output.scalar_type(), " but input has dtype ",
              input.scalar_type());
  const std::vector<size_t> sendCounts =
      checks::splitCounts(op, in, "input", inputSplitSizes, getSize());
  const std::vector<size_t> recvCounts =
      checks::splitCounts(op, out, "output", outputSplitSizes, getSize());
  checks::selfBlock(op, sendCounts[getRank()], recvCounts[getRank()], getRank());
  const algo::Prepared a = algorithm(op, algo::Collective::kAlltoall, bytesOf(in), in,
                                     [&] { return algo::alltoallParams(params(0), sendCounts, recvCounts); });
  return launch(c10d::OpType::ALLTOALL_BASE, op, callPrint(algo::Method::kAlltoallBase, dtype, 0),
                {in}, {out}, bytesOf(in) + bytesOf(out), opTimeout(opts.timeout),
                [this, a, out, in, dtype, sendCounts, recvCounts](algo::Executor& ex) {
                  at::Tensor o = flatWorking(out);
                  at::Tensor i = flatWorking(in);
                  if (overlaps(i, o)) i = i.clone();  // in place: send from a copy
                  algo::Job job = algo::alltoall(
                      *a, params(0), dtype, blocksOf<const void*>(i, sendCounts), sendCounts,
                      blocksOf<void*>(o, recvCounts), recvCounts, ex.reducer());
                  return Staged{std::move(job), [out, o, i]() mutable { writeBack(out, o); }};
                },
                opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::alltoall(std::vector<at::Tensor>& outputs,
                                                         std::vector<at::Tensor>& inputs,
                                                         const c10d::AllToAllOptions& opts) {
  const char* op = "alltoall";
  const int p = getSize();
  TORCH_CHECK(static_cast<int>(inputs.size()) == p, "ringcoll::", op, ": input list has ",
              inputs.size(), " tensors but the group has ", p, " ranks");
  TORCH_CHECK(static_cast<int>(outputs.size()) == p, "ringcoll::", op, ": output list has ",
              outputs.size(), " tensors but the group has ", p, " ranks");
  std::vector<at::Tensor> ins = checks::realViews(op, inputs);
  std::vector<at::Tensor> outs = checks::realViews(op, outputs);
  const DType dtype = checks::tensorDType(op, ins[0], "input 0");
  std::vector<size_t> sendCounts, recvCounts;
  for (int j = 0; j < p; ++j) {
    for (const auto* t : {&ins[j], &outs[j]}) {
      const std::string what = c10::str(t == &ins[j] ? "input " : "output ", j);
      checks::tensorDType(op, *t, what.c_str());
      checks::sameDevice(op, *t, what, ins[0], "input 0");
      // Compared as the caller passed them: a complex tensor and a real one of
      // the same element type are different dtypes.
      const at::Tensor& given = t == &ins[j] ? inputs[j] : outputs[j];
      TORCH_CHECK(given.scalar_type() == inputs[0].scalar_type(), "ringcoll::", op, ": ",
                  what, " has dtype ", given.scalar_type(), " but input 0 has dtype ",
                  inputs[0].scalar_type());
    }
    sendCounts.push_back(static_cast<size_t>(ins[j].numel()));
    recvCounts.push_back(static_cast<size_t>(outs[j].numel()));
  }
  checks::selfBlock(op, sendCounts[getRank()], recvCounts[getRank()], getRank());
  size_t bytes = 0;
  for (int j = 0; j < p; ++j) bytes += bytesOf(ins[j]) + bytesOf(outs[j]);
  size_t sent = 0;
  for (const auto& t : ins) sent += bytesOf(t);
  const algo::Prepared a = algorithm(op, algo::Collective::kAlltoall, sent, ins[0],
                                     [&] { return algo::alltoallParams(params(0), sendCounts, recvCounts); });
  return launch(c10d::OpType::ALLTOALL, op, callPrint(algo::Method::kAlltoall, dtype, 0), ins,
                outs, bytes, opTimeout(opts.timeout),
                [this, a, ins, outs, dtype, sendCounts, recvCounts](algo::Executor& ex) {
                  std::vector<at::Tensor> is, os;
                  std::vector<const void*> sends;
                  std::vector<void*> recvs;
                  for (const auto& t : outs) {
                    os.push_back(flatWorking(t));
                    recvs.push_back(os.back().data_ptr());
                  }
                  for (const auto& t : ins) {
                    at::Tensor f = flatWorking(t);
                    for (const auto& o : os) {
                      if (overlaps(f, o)) {  // sent from a copy: an output may overwrite it
                        f = f.clone();
                        break;
                      }
                    }
                    is.push_back(f);
                    sends.push_back(f.data_ptr());
                  }
                  algo::Job job = algo::alltoall(*a, params(0), dtype, sends, sendCounts, recvs,
                                                 recvCounts, ex.reducer());
                  return Staged{std::move(job), [outs, os, is]() mutable {
                                  for (size_t j = 0; j < outs.size(); ++j) {
                                    writeBack(outs[j], os[j]);
                                  }
                                }};
                },
                opts.asyncOp);
}

}  // namespace ringcoll
