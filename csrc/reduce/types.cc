#include "reduce/types.h"

#include "common/errors.h"

namespace ringcoll {

size_t elementSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat64:
    case DType::kInt64: return 8;
    case DType::kFloat32:
    case DType::kInt32: return 4;
    case DType::kFloat16:
    case DType::kBFloat16:
    case DType::kInt16: return 2;
    case DType::kInt8:
    case DType::kUInt8:
    case DType::kBool:
    case DType::kFloat8E4M3:
    case DType::kFloat8E5M2: return 1;
  }
  RC_ASSERT(false, "unknown DType ", static_cast<int>(dtype));
}

const char* dtypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kInt8: return "int8";
    case DType::kUInt8: return "uint8";
    case DType::kInt16: return "int16";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kBool: return "bool";
    case DType::kFloat8E4M3: return "float8_e4m3fn";
    case DType::kFloat8E5M2: return "float8_e5m2";
  }
  return "unknown";
}

const char* redOpName(RedOp op) {
  switch (op) {
    case RedOp::kSum: return "SUM";
    case RedOp::kProduct: return "PRODUCT";
    case RedOp::kMin: return "MIN";
    case RedOp::kMax: return "MAX";
    case RedOp::kBand: return "BAND";
    case RedOp::kBor: return "BOR";
    case RedOp::kBxor: return "BXOR";
  }
  return "unknown";
}

bool opSupported(RedOp op, DType dtype) {
  if (isBitwise(op)) return !isFloating(dtype);
  if (isFloat8(dtype)) return op == RedOp::kSum || op == RedOp::kMin || op == RedOp::kMax;
  return true;
}

}  // namespace ringcoll
