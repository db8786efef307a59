// Argument checks at the backend boundary. Every failure is a TORCH_CHECK whose
// message starts with "ringcoll::<op>:" and names both values involved, raised on
// the calling thread of every rank that sees the bad argument.
#pragma once

#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "algo/collectives.h"
#include "reduce/types.h"

namespace ringcoll::checks {

// The single tensor of a c10d tensor list (multi-tensor lists are not supported).
at::Tensor& single(const char* op, std::vector<at::Tensor>& tensors, const char* what);

// A dense CPU tensor of a supported dtype; returns the dtype.
DType tensorDType(const char* op, const at::Tensor& t, const char* what);

// Same dtype and numel as `ref` (named refWhat).
void sameDTypeAndNumel(const char* op, const at::Tensor& t, const std::string& what,
                       const at::Tensor& ref, const char* refWhat);

void sameDevice(const char* op, const at::Tensor& out, const at::Tensor& in);

void numelEquals(const char* op, const at::Tensor& t, const char* what, int64_t expected,
                 const char* expectedWhat);

// Maps a c10d ReduceOp onto ringcoll's Reduction for dtype, or fails.
algo::Reduction reduction(const char* op, const c10d::ReduceOp& reduceOp, DType dtype);

void rootInRange(const char* op, int64_t root, int size);

}  // namespace ringcoll::checks
