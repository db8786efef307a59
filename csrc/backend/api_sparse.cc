// all_reduce of a sparse COO tensor (SUM): every rank ends with the coalesced sum of
// all ranks' tensors, written into its own tensor (its nnz may change), as gloo
// computes it: the ranks all-gather their indices and values and each rank
// coalesces the union (coalesce() sums the values of equal indices).
//
// Four of ringcoll's own all-gathers (all_gather_into_tensor, so a rank that calls
// a different collective meets the fingerprint check at the first of them):
//   1. a header per rank: nnz, sparse_dim, dense_dim, ndim, dtype; every rank
//      checks that the ranks' layouts agree and, seeing the same headers, raises
//      the same error naming both ranks' values;
//   2. the sizes (ndim per rank), checked the same way;
//   3. the indices, padded to the largest nnz: sparse_dim x max_nnz int64 per rank;
//   4. the values as bytes, padded the same way: max_nnz rows per rank, so any dtype
//      moves, complex and bool included.
// The call is synchronous: it returns a completed Work, and a peer failure raises
// from the call itself with the all-gather's error (op, sequence number, peer).
// Input values that are small integers sum exactly, so the result equals gloo's.
#include "backend/backend.h"

#include <ATen/ATen.h>

#include "backend/checks.h"
#include "backend/work.h"

namespace ringcoll {

namespace {
constexpr int64_t kHeader = 5;  // nnz, sparse_dim, dense_dim, ndim, dtype

// The all-gather of `mine` (flat, contiguous) into a new tensor of p x its size.
at::Tensor gatherAll(c10d::Backend& backend, const at::Tensor& mine, int size,
                     std::chrono::milliseconds timeout) {
  at::Tensor in = mine.contiguous().reshape({-1});
  at::Tensor out = at::empty({in.numel() * size}, in.options());
  c10d::AllgatherOptions opts;
  opts.timeout = timeout;
  backend._allgather_base(out, in, opts)->wait();
  return out;
}
}  // namespace

c10::intrusive_ptr<c10d::Work> RingcollBackend::sparseAllreduce(
    at::Tensor& t, const c10d::AllreduceOptions& opts) {
  const char* op = "allreduce";
  const int p = getSize();
  // Its all-gathers' results are read on the host at once: nothing to record.
  refuseUnderCapture(CallLabel{"allreduce (sparse)", seq_.load() + 1, getRank(), p},
                     "a sparse all-reduce reads its exchanges' results on the host");
  TORCH_CHECK(opts.reduceOp.op_ == c10d::ReduceOp::SUM, "ringcoll::", op,
              ": sparse tensors support only the SUM op, got ",
              checks::reduceOpName(opts.reduceOp.op_));
  TORCH_CHECK(t.device().is_cpu(), "ringcoll::", op, ": sparse tensor is on ", t.device(),
              "; sparse all_reduce runs on cpu tensors only");
  at::Tensor in = t.coalesce();
  const at::Tensor indices = in._indices().contiguous();
  const at::Tensor values = in._values().contiguous();
  const int64_t nnz = in._nnz();
  const int64_t sparseDim = in.sparse_dim();
  const int64_t denseDim = in.dense_dim();
  const int64_t ndim = in.dim();

  // 1-2: the layouts, the same on every rank or the same error on every rank.
  at::Tensor header = at::tensor({nnz, sparseDim, denseDim, ndim,
                                  static_cast<int64_t>(in.scalar_type())}, at::kLong);
  const at::Tensor headers = gatherAll(*this, header, p, opts.timeout).view({p, kHeader});
  const auto h = headers.accessor<int64_t, 2>();
  const char* field[] = {"nnz", "sparse_dim", "dense_dim", "ndim", "dtype"};
  for (int r = 1; r < p; ++r) {
    for (int f = 1; f < kHeader; ++f) {
      TORCH_CHECK(h[r][f] == h[0][f], "ringcoll::", op, ": the ranks' sparse tensors differ: ",
                  "rank ", r, "'s has ", field[f], " ",
                  f == 4 ? c10::toString(static_cast<at::ScalarType>(h[r][f]))
                         : std::to_string(h[r][f]),
                  " but rank 0's has ", field[f], " ",
                  f == 4 ? c10::toString(static_cast<at::ScalarType>(h[0][f]))
                         : std::to_string(h[0][f]));
    }
  }
  const at::Tensor sizes =
      gatherAll(*this, at::tensor(in.sizes().vec(), at::kLong), p, opts.timeout).view({p, ndim});
  for (int r = 1; r < p; ++r) {
    TORCH_CHECK(sizes[r].equal(sizes[0]), "ringcoll::", op,
                ": the ranks' sparse tensors differ: rank ", r, "'s has sizes ",
                at::IntArrayRef(sizes[r].data_ptr<int64_t>(), ndim), " but rank 0's has sizes ",
                at::IntArrayRef(sizes[0].data_ptr<int64_t>(), ndim));
  }

  // 3-4: indices and values, padded to the largest nnz.
  int64_t maxNnz = 0, total = 0;
  for (int r = 0; r < p; ++r) {
    maxNnz = std::max(maxNnz, h[r][0]);
    total += h[r][0];
  }
  const int64_t rowBytes = static_cast<int64_t>(values.element_size()) *
                           c10::multiply_integers(in.sizes().slice(sparseDim));
  at::Tensor allIndices = at::empty({sparseDim, 0}, at::kLong);
  at::Tensor allValues = at::empty({0}, at::kByte);
  if (maxNnz > 0) {
    at::Tensor paddedIdx = at::zeros({sparseDim, maxNnz}, at::kLong);
    paddedIdx.narrow(1, 0, nnz).copy_(indices);
    at::Tensor paddedVal = at::zeros({maxNnz * rowBytes}, at::kByte);
    if (nnz > 0) {
      paddedVal.narrow(0, 0, nnz * rowBytes).copy_(values.reshape({-1}).view(at::kByte));
    }
    const at::Tensor gi =
        gatherAll(*this, paddedIdx, p, opts.timeout).view({p, sparseDim, maxNnz});
    const at::Tensor gv =
        gatherAll(*this, paddedVal, p, opts.timeout).view({p, maxNnz * rowBytes});
    std::vector<at::Tensor> idx, val;
    for (int r = 0; r < p; ++r) {
      idx.push_back(gi[r].narrow(1, 0, h[r][0]));
      val.push_back(gv[r].narrow(0, 0, h[r][0] * rowBytes));
    }
    allIndices = at::cat(idx, 1);
    allValues = at::cat(val, 0);
  }
  std::vector<int64_t> valueShape{total};
  for (int64_t d = sparseDim; d < ndim; ++d) valueShape.push_back(in.size(d));
  at::Tensor summedValues = allValues.view(in.scalar_type()).view(valueShape);
  at::Tensor result =
      at::sparse_coo_tensor(allIndices, summedValues, in.sizes(), in.options()).coalesce();
  t.copy_(result);

  const uint64_t seq = seq_.load();
  auto work = c10::make_intrusive<RingcollWork>(
      getRank(), c10d::OpType::ALLREDUCE, CallLabel{op, seq, getRank(), p}, seq,
      opTimeout(opts.timeout), std::vector<at::Tensor>{t}, nullptr);
  work->finish();
  return work;
}

}  // namespace ringcoll
