// The coalesced c10d methods: several tensors in one collective.
//
//   allgather_coalesced(outputLists, inputs)        dist.all_gather_coalesced
//   allgather_into_tensor_coalesced(outputs, inputs)
//       all_gather_into_tensor calls inside _coalescing_manager, and the
//       functional all_gather_tensor (what DTensor.full_tensor() and compiled
//       code call: torch's _c10d_functional ops go through the coalesced method
//       even for one tensor)
//   reduce_scatter_tensor_coalesced(outputs, inputs)
//       reduce_scatter_tensor inside _coalescing_manager, functional
//       reduce_scatter_tensor
//
// plus, on torch >= 2.14, their canonical names (all_gather_single_coalesced,
// reduce_scatter_single_coalesced) and those of the one-tensor methods
// (all_gather_single, reduce_scatter_single, all_to_all_single), which call the
// same code as the old names.
//
// Contract: a coalesced call is ONE collective (one sequence number, one
// fingerprint, one schedule run). Its k tensors are packed into one working
// buffer of p blocks, block r holding rank r's part of every tensor in list
// order; one all-gather (or reduce-scatter) schedule runs over it; the results
// are unpacked into the user's tensors once the schedule is done, so an output is
// written only after every rank agreed about the call. Example, p = 2, inputs
// a (2 elements) and b (1): rank r's block is [a_r0 a_r1 b_r0], the buffer
// [a_00 a_01 b_00 | a_10 a_11 b_10]; after the all-gather, output a is
// [a_00 a_01 a_10 a_11] and output b [b_00 b_10].
//
// All-gather moves bytes, so its tensors may have different dtypes (each
// output has its input's dtype); reduce-scatter reduces, so all its tensors
// share one dtype. Every rank must pass the same list (count, dtypes, numels in
// order): the fingerprint carries a digest of it (engine/fingerprint.h).
//
// Cost: one pack and one unpack copy of the data on top of the schedule; the
// price of running k collectives as one (one header exchange, one set of
// rendezvous) instead of k.
//
// CPU and CUDA tensors alike (the CUDA path runs the same body on the comm
// stream, as allreduce_coalesced does); all tensors of a call on one device.
#include "backend/backend.h"

#include "backend/api_helpers.h"
#include "backend/checks.h"
#include "common/errors.h"

namespace ringcoll {

// Where each tensor's part lies in a rank's block: `sizes[i]` units (bytes for
// all-gather, elements for reduce-scatter) at `offsets[i]`; `block` in all.
struct RingcollBackend::Packing {
  std::vector<int64_t> offsets, sizes;
  int64_t block = 0;
  void add(int64_t size) {
    offsets.push_back(block);
    sizes.push_back(size);
    block += size;
  }
};

namespace {

// The flat bytes of t (a working view; writeBack() copies them home).
at::Tensor bytesView(const at::Tensor& flat) { return flat.view(at::kByte); }

// The per-rank tensor list of a coalesced call: not empty, every tensor dense,
// supported and on the device of tensor 0. Returns the layout digest.
uint32_t checkList(const char* op, const std::vector<at::Tensor>& ts, const char* what) {
  TORCH_CHECK(!ts.empty(), "ringcoll::", op, ": no ", what, " tensors given");
  algo::LayoutDigest digest;
  digest.add(ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    const std::string name = c10::str(what, " ", i);
    const DType d = checks::tensorDType(op, ts[i], name.c_str());
    TORCH_CHECK(ts[i].device() == ts[0].device(), "ringcoll::", op, ": ", name, " is on ",
                ts[i].device(), " but ", what, " 0 is on ", ts[0].device());
    digest.add(static_cast<uint64_t>(d));
    digest.add(static_cast<uint64_t>(ts[i].numel()));
  }
  return digest.value();
}

int64_t totalNumel(const std::vector<at::Tensor>& ts) {
  int64_t n = 0;
  for (const auto& t : ts) n += t.numel();
  return n;
}

}  // namespace

// The shared all-gather of the two all-gather methods: block r of the working
// buffer (bytes) is rank r's inputs in list order; `unpack(grid, packing)` copies
// the gathered (p, block) bytes into the outputs.
c10::intrusive_ptr<c10d::Work> RingcollBackend::allgatherPacked(
    c10d::OpType type, const char* op, algo::Method method, std::vector<at::Tensor> ins,
    std::vector<at::Tensor> outs, uint32_t layout, std::chrono::milliseconds timeout,
    std::function<void(const at::Tensor&, const Packing&)> unpack) {
  Packing packing;
  for (const auto& t : ins) packing.add(static_cast<int64_t>(bytesOf(t)));
  const int p = getSize();
  const size_t bytes = static_cast<size_t>(packing.block) * p;
  const DType dtype0 = checks::tensorDType(op, ins[0], "input 0");
  algo::Fingerprint fp = callPrint(method, dtype0, totalNumel(ins));
  fp.layout = layout;
  const algo::Prepared a =
      algorithm(op, algo::Collective::kAllgather, bytes, ins[0], [&] { return params(bytes); });
  return launch(
      type, op, fp, ins, outs, bytes, timeout,
      [this, a, ins, packing, p, unpack = std::move(unpack)](algo::Executor&) {
        at::Tensor flat = workspace(packing.block * p,
                                    at::empty({0}, ins[0].options().dtype(at::kByte)));
        at::Tensor grid = flat.view({p, packing.block});
        at::Tensor mine = grid.select(0, getRank());
        for (size_t i = 0; i < ins.size(); ++i) {
          if (packing.sizes[i] == 0) continue;
          mine.narrow(0, packing.offsets[i], packing.sizes[i])
              .copy_(bytesView(flatWorking(ins[i])));
        }
        return Staged{algo::allgather(*a, params(flat.numel()), flat.data_ptr(), DType::kUInt8),
                      [grid, packing, unpack]() { unpack(grid, packing); }};
      });
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputTensors, std::vector<at::Tensor>& inputTensors,
    const c10d::AllgatherOptions& opts) {
  const char* op = "allgather_into_tensor_coalesced";
  std::vector<at::Tensor> outputs = checks::realViews(op, outputTensors);
  std::vector<at::Tensor> inputs = checks::realViews(op, inputTensors);
  const int p = getSize();
  const uint32_t layout = checkList(op, inputs, "input");
  TORCH_CHECK(outputs.size() == inputs.size(), "ringcoll::", op, ": ", outputs.size(),
              " output tensors but ", inputs.size(), " input tensors");
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string in = c10::str("input ", i), out = c10::str("output ", i);
    checks::basePair(op, outputs[i], out.c_str(), inputs[i], in.c_str(), p);
  }
  std::vector<at::Tensor> outs = outputs;
  return allgatherPacked(
      c10d::OpType::ALLGATHER_COALESCED, op, algo::Method::kAllgatherIntoTensorCoalesced,
      inputs, outs, layout, opTimeout(opts.timeout),
      [outs, p](const at::Tensor& grid, const Packing& packing) {
        for (size_t i = 0; i < outs.size(); ++i) {
          if (packing.sizes[i] == 0) continue;
          at::Tensor o = flatWorking(outs[i]);
          bytesView(o).view({p, packing.sizes[i]})
              .copy_(grid.narrow(1, packing.offsets[i], packing.sizes[i]));
          at::Tensor dst = outs[i];
          writeBack(dst, o);
        }
      });
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputTensorLists,
    std::vector<at::Tensor>& inputTensors, const c10d::AllgatherOptions& opts) {
  const char* op = "allgather_coalesced";
  std::vector<std::vector<at::Tensor>> outputLists = checks::realViews(op, outputTensorLists);
  std::vector<at::Tensor> inputs = checks::realViews(op, inputTensors);
  const int p = getSize();
  const uint32_t layout = checkList(op, inputs, "input");
  TORCH_CHECK(static_cast<int>(outputLists.size()) == p, "ringcoll::", op, ": ",
              outputLists.size(), " output lists but the group has ", p,
              " ranks (one list per rank)");
  std::vector<at::Tensor> outs;  // rank-major: rank r's tensor i at r * k + i
  for (int r = 0; r < p; ++r) {
    TORCH_CHECK(outputLists[r].size() == inputs.size(), "ringcoll::", op, ": output list ", r,
                " has ", outputLists[r].size(), " tensors but the input list has ",
                inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      const std::string out = c10::str("output ", r, "[", i, "]"), in = c10::str("input ", i);
      checks::tensorDType(op, outputLists[r][i], out.c_str());
      checks::sameDTypeAndNumel(op, outputLists[r][i], out, inputs[i], in.c_str());
      outs.push_back(outputLists[r][i]);
    }
  }
  const size_t k = inputs.size();
  return allgatherPacked(
      c10d::OpType::ALLGATHER_COALESCED, op, algo::Method::kAllgatherCoalesced, inputs, outs,
      layout, opTimeout(opts.timeout),
      [outs, p, k](const at::Tensor& grid, const Packing& packing) {
        for (int r = 0; r < p; ++r) {
          for (size_t i = 0; i < k; ++i) {
            if (packing.sizes[i] == 0) continue;
            at::Tensor dst = outs[r * k + i];
            at::Tensor o = flatWorking(dst);
            bytesView(o).copy_(grid.select(0, r).narrow(0, packing.offsets[i],
                                                        packing.sizes[i]));
            writeBack(dst, o);
          }
        }
      });
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputTensors, std::vector<at::Tensor>& inputTensors,
    const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter_tensor_coalesced";
  std::vector<at::Tensor> outputs = checks::realViews(op, outputTensors, &opts.reduceOp);
  std::vector<at::Tensor> inputs = checks::realViews(op, inputTensors, &opts.reduceOp);
  const int p = getSize();
  const uint32_t layout = checkList(op, inputs, "input");
  TORCH_CHECK(outputs.size() == inputs.size(), "ringcoll::", op, ": ", outputs.size(),
              " output tensors but ", inputs.size(), " input tensors");
  const DType dtype = checks::tensorDType(op, inputs[0], "input 0");
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string in = c10::str("input ", i), out = c10::str("output ", i);
    TORCH_CHECK(inputs[i].scalar_type() == inputs[0].scalar_type(), "ringcoll::", op, ": ", in,
                " has dtype ", inputs[i].scalar_type(), " but input 0 has dtype ",
                inputs[0].scalar_type(), " (a coalesced reduce-scatter reduces one dtype)");
    checks::basePair(op, inputs[i], in.c_str(), outputs[i], out.c_str(), p);
  }
  const algo::Reduction red = checks::reduction(op, opts.reduceOp, dtype);
  Packing packing;  // elements of one block
  for (const auto& t : outputs) packing.add(t.numel());
  algo::Fingerprint fp = callPrint(algo::Method::kReduceScatterTensorCoalesced, dtype,
                                   packing.block, &red);
  fp.layout = layout;
  const size_t bytes = static_cast<size_t>(inputs[0].element_size() * packing.block * p);
  const algo::Prepared a = algorithm(op, algo::Collective::kReduceScatter, bytes, inputs[0],
                                     [&] { return params(static_cast<size_t>(packing.block) * p); });
  std::vector<at::Tensor> ins = inputs, outs = outputs;
  return launch(
      RINGCOLL_OP_REDUCE_SCATTER_TENSOR_COALESCED, op, fp, ins, outs, bytes,
      opTimeout(opts.timeout),
      [this, a, ins, outs, packing, p, dtype, red](algo::Executor& ex) {
        // Block r of the working buffer: block r of every input, in list order.
        at::Tensor work = workspace(packing.block * p, ins[0]);
        at::Tensor grid = work.view({p, packing.block});
        for (size_t i = 0; i < ins.size(); ++i) {
          if (packing.sizes[i] == 0) continue;
          grid.narrow(1, packing.offsets[i], packing.sizes[i])
              .copy_(flatWorking(ins[i]).view({p, packing.sizes[i]}));
        }
        algo::Job job = algo::reduceScatter(*a, params(work.numel()), work.data_ptr(), dtype,
                                            red, ex.reducer());
        const algo::Range result = job.schedule.result;
        TORCH_INTERNAL_ASSERT(static_cast<int64_t>(result.size()) == packing.block,
                              "reduce-scatter keeps ", result.size(), " elements, not ",
                              packing.block);
        return Staged{std::move(job), [outs, work, packing, result]() mutable {
                        for (size_t i = 0; i < outs.size(); ++i) {
                          if (packing.sizes[i] == 0) continue;
                          outs[i].copy_(work.narrow(0,
                                                    static_cast<int64_t>(result.begin) +
                                                        packing.offsets[i],
                                                    packing.sizes[i])
                                            .view(outs[i].sizes()));
                        }
                      }};
      });
}

#ifdef RINGCOLL_C10D_SINGLE_NAMES
// torch >= 2.14's canonical names: the same collectives as the old names.
c10::intrusive_ptr<c10d::Work> RingcollBackend::all_gather_single(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  return _allgather_base(output, input, opts);
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::reduce_scatter_single(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  return _reduce_scatter_base(output, input, opts);
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::all_to_all_single(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplitSizes,
    std::vector<int64_t>& inputSplitSizes, const c10d::AllToAllOptions& opts) {
  return alltoall_base(output, input, outputSplitSizes, inputSplitSizes, opts);
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::all_gather_single_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  return allgather_into_tensor_coalesced(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::reduce_scatter_single_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  return reduce_scatter_tensor_coalesced(outputs, inputs, opts);
}
#endif

}  // namespace ringcoll
