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

// Maps a c10d ReduceOp onto ringcoll's Reduction for dtype, or fails.
algo::Reduction reduction(const char* op, const c10d::ReduceOp& reduceOp, DType dtype);

// The single tensor list of a c10d list-of-lists argument (`what`: "input" or
// "output"), checked to hold one tensor per rank, each like `ref`.
std::vector<at::Tensor> perRankList(const char* op, std::vector<std::vector<at::Tensor>>& lists,
                                    const char* what, int size, const at::Tensor& ref,
                                    const char* refWhat);

// A (large, small) pair of a *_base collective: same dtype and device, and
// large.numel() == size x small.numel().
void basePair(const char* op, const at::Tensor& large, const char* largeWhat,
              const at::Tensor& small, const char* smallWhat, int size);

void rootInRange(const char* op, int64_t root, int size);

}  // namespace ringcoll::checks
