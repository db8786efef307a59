// Maps the runtime (DType, RedOp) pair onto the compile-time storage type and
// functor. Shared by the CPU reducer and the CUDA launchers so both accept exactly
// the same pairs. Host-only code.
#pragma once

#include <cstdint>

#include "common/errors.h"
#include "reduce/functors.h"
#include "reduce/types.h"

namespace ringcoll {

// Calls f(T{}) with T the storage type of `dtype` (a value only for its type).
template <typename F>
decltype(auto) dispatchDType(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32: return f(float{});
    case DType::kFloat64: return f(double{});
    case DType::kFloat16: return f(Half{});
    case DType::kBFloat16: return f(BFloat16{});
    case DType::kInt8: return f(int8_t{});
    case DType::kUInt8: return f(uint8_t{});
    case DType::kInt16: return f(int16_t{});
    case DType::kInt32: return f(int32_t{});
    case DType::kInt64: return f(int64_t{});
    case DType::kBool: return f(bool{});
    case DType::kFloat8E4M3: return f(Float8E4M3{});
    case DType::kFloat8E5M2: return f(Float8E5M2{});
  }
  throw std::invalid_argument(RC_STR("ringcoll: dtype ", dtypeName(dtype),
                                     " has no reducer on this path"));
}

// Calls f(Op{}) with Op the functor of `op`.
template <typename F>
decltype(auto) dispatchOp(RedOp op, F&& f) {
  switch (op) {
    case RedOp::kSum: return f(SumOp{});
    case RedOp::kProduct: return f(ProductOp{});
    case RedOp::kMin: return f(MinOp{});
    case RedOp::kMax: return f(MaxOp{});
    case RedOp::kBand: return f(BandOp{});
    case RedOp::kBor: return f(BorOp{});
    case RedOp::kBxor: return f(BxorOp{});
  }
  RC_ASSERT(false, "unknown RedOp ", static_cast<int>(op));
}

}  // namespace ringcoll
