#include "backend/checks.h"

#include <c10/util/Exception.h>

namespace ringcoll::checks {

namespace {
const char* kSupported =
    "float32, float64, float16, bfloat16, int8, uint8, int16, int32, int64, bool, "
    "float8_e4m3fn, float8_e5m2";

bool toDType(at::ScalarType s, DType* out) {
  switch (s) {
    case at::kFloat: *out = DType::kFloat32; return true;
    case at::kDouble: *out = DType::kFloat64; return true;
    case at::kHalf: *out = DType::kFloat16; return true;
    case at::kBFloat16: *out = DType::kBFloat16; return true;
    case at::kChar: *out = DType::kInt8; return true;
    case at::kByte: *out = DType::kUInt8; return true;
    case at::kShort: *out = DType::kInt16; return true;
    case at::kInt: *out = DType::kInt32; return true;
    case at::kLong: *out = DType::kInt64; return true;
    case at::kBool: *out = DType::kBool; return true;
    case at::kFloat8_e4m3fn: *out = DType::kFloat8E4M3; return true;
    case at::kFloat8_e5m2: *out = DType::kFloat8E5M2; return true;
    default: return false;
  }
}


}  // namespace

const char* reduceOpName(c10d::ReduceOp::RedOpType t) {
  switch (t) {
    case c10d::ReduceOp::SUM: return "SUM";
    case c10d::ReduceOp::AVG: return "AVG";
    case c10d::ReduceOp::PRODUCT: return "PRODUCT";
    case c10d::ReduceOp::MIN: return "MIN";
    case c10d::ReduceOp::MAX: return "MAX";
    case c10d::ReduceOp::BAND: return "BAND";
    case c10d::ReduceOp::BOR: return "BOR";
    case c10d::ReduceOp::BXOR: return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM: return "PREMUL_SUM";
    default: return "UNUSED";
  }
}

at::Tensor realView(const char* op, const at::Tensor& t, const c10d::ReduceOp* reduceOp) {
  if (!t.defined() || !t.is_complex()) return t;
  if (reduceOp != nullptr) {
    const auto type = reduceOp->op_;
    TORCH_CHECK(type == c10d::ReduceOp::SUM || type == c10d::ReduceOp::AVG ||
                    type == c10d::ReduceOp::PREMUL_SUM,
                "ringcoll::", op, ": op ", reduceOpName(type), " is not supported for dtype ",
                t.scalar_type(), " (complex tensors support SUM, AVG and PREMUL_SUM)");
  }
  TORCH_CHECK(t.layout() == at::kStrided, "ringcoll::", op, ": tensor has layout ",
              t.layout(), "; only dense (strided) tensors are supported");
  TORCH_CHECK(!t.is_conj(), "ringcoll::", op, ": tensor of dtype ", t.scalar_type(),
              " is a conjugate view; resolve it first (resolve_conj()), since results "
              "are written into the tensor's memory");
  return at::view_as_real(t);
}

std::vector<at::Tensor> realViews(const char* op, const std::vector<at::Tensor>& ts,
                                  const c10d::ReduceOp* reduceOp) {
  std::vector<at::Tensor> out;
  out.reserve(ts.size());
  for (const auto& t : ts) out.push_back(realView(op, t, reduceOp));
  return out;
}

std::vector<std::vector<at::Tensor>> realViews(
    const char* op, const std::vector<std::vector<at::Tensor>>& lists,
    const c10d::ReduceOp* reduceOp) {
  std::vector<std::vector<at::Tensor>> out;
  out.reserve(lists.size());
  for (const auto& l : lists) out.push_back(realViews(op, l, reduceOp));
  return out;
}

at::Tensor& single(const char* op, std::vector<at::Tensor>& tensors, const char* what) {
  TORCH_CHECK(tensors.size() == 1, "ringcoll::", op, ": expected exactly 1 ", what,
              " tensor per call, got ", tensors.size());
  return tensors[0];
}

DType tensorDType(const char* op, const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.defined(), "ringcoll::", op, ": ", what, " tensor is undefined");
  TORCH_CHECK(t.layout() == at::kStrided, "ringcoll::", op, ": ", what,
              " tensor has layout ", t.layout(), "; only dense (strided) tensors are supported");
#ifdef RINGCOLL_WITH_CUDA
  TORCH_CHECK(t.device().is_cpu() || t.device().is_cuda(), "ringcoll::", op, ": ", what,
              " tensor is on ", t.device(), "; ringcoll handles cpu and cuda tensors");
#else
  TORCH_CHECK(t.device().is_cpu(), "ringcoll::", op, ": ", what, " tensor is on ",
              t.device(), " but this ringcoll build has no CUDA support (cpu tensors only)");
#endif
  DType d;
  TORCH_CHECK(toDType(t.scalar_type(), &d), "ringcoll::", op, ": ", what,
              " tensor has dtype ", t.scalar_type(), ", which is not supported (supported: ",
              kSupported, ")");
  return d;
}

void sameDTypeAndNumel(const char* op, const at::Tensor& t, const std::string& what,
                       const at::Tensor& ref, const char* refWhat) {
  TORCH_CHECK(t.scalar_type() == ref.scalar_type(), "ringcoll::", op, ": ", what,
              " has dtype ", t.scalar_type(), " but ", refWhat, " has dtype ",
              ref.scalar_type());
  TORCH_CHECK(t.numel() == ref.numel(), "ringcoll::", op, ": ", what, " has ", t.numel(),
              " elements but ", refWhat, " has ", ref.numel());
  TORCH_CHECK(t.device() == ref.device(), "ringcoll::", op, ": ", what, " is on ",
              t.device(), " but ", refWhat, " is on ", ref.device());
}

algo::Reduction reduction(const char* op, const c10d::ReduceOp& reduceOp, DType dtype) {
  algo::Reduction red;
  const auto type = reduceOp.op_;
  switch (type) {
    case c10d::ReduceOp::SUM: red.op = RedOp::kSum; break;
    case c10d::ReduceOp::PRODUCT: red.op = RedOp::kProduct; break;
    case c10d::ReduceOp::MIN: red.op = RedOp::kMin; break;
    case c10d::ReduceOp::MAX: red.op = RedOp::kMax; break;
    case c10d::ReduceOp::BAND: red.op = RedOp::kBand; break;
    case c10d::ReduceOp::BOR: red.op = RedOp::kBor; break;
    case c10d::ReduceOp::BXOR: red.op = RedOp::kBxor; break;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK(dtype != DType::kBool, "ringcoll::", op,
                  ": op AVG is not supported for dtype ", dtypeName(dtype));
      red.op = RedOp::kSum;
      red.average = true;
      break;
    case c10d::ReduceOp::PREMUL_SUM: {
      TORCH_CHECK(isFloating(dtype), "ringcoll::", op,
                  ": op PREMUL_SUM is not supported for dtype ", dtypeName(dtype),
                  " (floating dtypes only)");
      // NCCLPreMulSumSupplement: the class in torch 2.11, an alias of PreMulSumSupplement
      // from 2.13 on; the name works on both.
      auto* sup = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(reduceOp.supplement_.get());
      TORCH_CHECK(sup != nullptr, "ringcoll::", op,
                  ": PREMUL_SUM without a factor (use dist._make_nccl_premul_sum)");
      red.op = RedOp::kSum;
      red.premul = true;
      if (sup->tensor_factor.defined()) {
        TORCH_CHECK(sup->tensor_factor.numel() == 1, "ringcoll::", op,
                    ": PREMUL_SUM factor tensor has ", sup->tensor_factor.numel(),
                    " elements but must have 1");
        red.premulFactor = sup->tensor_factor.to(at::kCPU).item<double>();
      } else {
        red.premulFactor = sup->double_factor;
      }
      break;
    }
    default:
      TORCH_CHECK(false, "ringcoll::", op, ": unsupported reduce op ", reduceOpName(type));
  }
  TORCH_CHECK(opSupported(red.op, dtype), "ringcoll::", op, ": op ", reduceOpName(type),
              " is not supported for dtype ", dtypeName(dtype));
  return red;
}

std::vector<at::Tensor> perRankList(const char* op, std::vector<std::vector<at::Tensor>>& lists,
                                    const char* what, int size, const at::Tensor& ref,
                                    const char* refWhat) {
  TORCH_CHECK(lists.size() == 1, "ringcoll::", op, ": expected exactly 1 ", what,
              " list per call, got ", lists.size());
  std::vector<at::Tensor> list = lists[0];
  TORCH_CHECK(static_cast<int>(list.size()) == size, "ringcoll::", op, ": ", what,
              " list has ", list.size(), " tensors but the group has ", size, " ranks");
  for (size_t i = 0; i < list.size(); ++i) {
    tensorDType(op, list[i], what);
    sameDTypeAndNumel(op, list[i], c10::str(what, " tensor ", i), ref, refWhat);
  }
  return list;
}

void basePair(const char* op, const at::Tensor& large, const char* largeWhat,
              const at::Tensor& small, const char* smallWhat, int size) {
  tensorDType(op, large, largeWhat);
  tensorDType(op, small, smallWhat);
  TORCH_CHECK(large.scalar_type() == small.scalar_type(), "ringcoll::", op, ": ", largeWhat,
              " has dtype ", large.scalar_type(), " but ", smallWhat, " has dtype ",
              small.scalar_type());
  TORCH_CHECK(large.device() == small.device(), "ringcoll::", op, ": ", largeWhat, " is on ",
              large.device(), " but ", smallWhat, " is on ", small.device());
  TORCH_CHECK(large.numel() == small.numel() * size, "ringcoll::", op, ": ", largeWhat,
              " has ", large.numel(), " elements but must have ", small.numel() * size,
              " (world size x ", smallWhat, " numel)");
}

void rootInRange(const char* op, int64_t root, int size) {
  TORCH_CHECK(root >= 0 && root < size, "ringcoll::", op, ": root rank ", root,
              " is out of range for group size ", size);
}

void cpuOnly(const char* op, const at::Tensor& t, const std::string& what) {
  TORCH_CHECK(t.device().is_cpu(), "ringcoll::", op, ": ", what, " tensor is on ", t.device(),
              "; ", op, " is not supported on cuda yet (cpu tensors only)");
}

void sameDevice(const char* op, const at::Tensor& t, const std::string& what,
                const at::Tensor& ref, const std::string& refWhat) {
  TORCH_CHECK(t.device() == ref.device(), "ringcoll::", op, ": ", what, " is on ", t.device(),
              " but ", refWhat, " is on ", ref.device());
}

std::vector<at::Tensor> rootList(const char* op, std::vector<std::vector<at::Tensor>>& lists,
                                 const char* what, int rank, int root, int size,
                                 const at::Tensor& ref, const char* refWhat) {
  if (rank != root) {
    TORCH_CHECK(lists.empty() || (lists.size() == 1 && lists[0].empty()), "ringcoll::", op,
                ": rank ", rank, " is not the root (", root, ") and must pass no ", what,
                " list, got ", lists.size() == 1 ? lists[0].size() : lists.size(),
                lists.size() == 1 ? " tensors" : " lists");
    return {};
  }
  TORCH_CHECK(lists.size() == 1, "ringcoll::", op, ": the root (rank ", root,
              ") must pass exactly 1 ", what, " list, got ", lists.size());
  std::vector<at::Tensor> list = perRankList(op, lists, what, size, ref, refWhat);
  for (size_t i = 0; i < list.size(); ++i) {
    sameDevice(op, list[i], c10::str(what, " ", i), ref, refWhat);
  }
  return list;
}

std::vector<size_t> splitCounts(const char* op, const at::Tensor& t, const char* what,
                                const std::vector<int64_t>& splits, int size) {
  TORCH_CHECK(t.dim() >= 1, "ringcoll::", op, ": ", what,
              " tensor has 0 dimensions; it is split along dim 0 and needs at least 1");
  const int64_t rows = t.size(0);
  const int64_t row = rows > 0 ? t.numel() / rows : 0;
  std::vector<size_t> counts;
  if (splits.empty()) {
    TORCH_CHECK(rows % size == 0, "ringcoll::", op, ": ", what, " tensor has ", rows,
                " rows (dim 0), which do not split into ", size,
                " equal parts (the group size); pass split sizes");
    counts.assign(size, static_cast<size_t>(rows / size * row));
    return counts;
  }
  TORCH_CHECK(static_cast<int>(splits.size()) == size, "ringcoll::", op, ": ", what,
              " split sizes name ", splits.size(), " ranks but the group has ", size);
  int64_t sum = 0;
  for (size_t j = 0; j < splits.size(); ++j) {
    TORCH_CHECK(splits[j] >= 0, "ringcoll::", op, ": ", what, " split size ", j, " is ",
                splits[j], "; split sizes must be at least 0");
    sum += splits[j];
    counts.push_back(static_cast<size_t>(splits[j] * row));
  }
  TORCH_CHECK(sum == rows, "ringcoll::", op, ": ", what, " split sizes add up to ", sum,
              " rows but the ", what, " tensor has ", rows, " rows (dim 0)");
  return counts;
}

void selfBlock(const char* op, size_t sendCount, size_t recvCount, int rank) {
  TORCH_CHECK(sendCount == recvCount, "ringcoll::", op, ": rank ", rank, " sends ", sendCount,
              " elements to itself but receives ", recvCount, " from itself");
}

}  // namespace ringcoll::checks
