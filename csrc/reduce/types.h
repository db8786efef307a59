// The element types and reduction ops ringcoll's reducers understand.
//
// These are ringcoll's own enums so that the reducer, the schedules and the
// transports never include torch; the backend maps at::ScalarType / c10d::ReduceOp
// onto them once, at the boundary.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ringcoll {

enum class DType : uint8_t {
  kFloat32,
  kFloat64,
  kFloat16,
  kBFloat16,
  kInt8,
  kUInt8,
  kInt16,
  kInt32,
  kInt64,
  kBool,
  kFloat8E4M3,  // torch.float8_e4m3fn (SUM, MIN, MAX only)
  kFloat8E5M2,  // torch.float8_e5m2 (SUM, MIN, MAX only)
};

// Element ops applied pairwise, dst = op(dst, src). AVG and PREMUL_SUM are not
// here: the collectives express them as SUM plus a scaling pass (see
// collectives.h), so every transport and kernel only ever sees these.
enum class RedOp : uint8_t {
  kSum,
  kProduct,
  kMin,
  kMax,
  kBand,
  kBor,
  kBxor,
};

size_t elementSize(DType dtype);
const char* dtypeName(DType dtype);
const char* redOpName(RedOp op);

inline bool isFloating(DType d) {
  return d == DType::kFloat32 || d == DType::kFloat64 || d == DType::kFloat16 ||
      d == DType::kBFloat16 || d == DType::kFloat8E4M3 || d == DType::kFloat8E5M2;
}
inline bool isBitwise(RedOp op) {
  return op == RedOp::kBand || op == RedOp::kBor || op == RedOp::kBxor;
}
inline bool isFloat8(DType d) {
  return d == DType::kFloat8E4M3 || d == DType::kFloat8E5M2;
}

// Whether `op` is defined for `dtype`. Bitwise ops need an integer or bool type;
// float8 takes only SUM, MIN and MAX (as NCCL). Shared by the CPU and CUDA paths
// and by the backend's argument check, so all three agree.
bool opSupported(RedOp op, DType dtype);

}  // namespace ringcoll
