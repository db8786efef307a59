// Argument checks at the backend boundary. Every failure is a TORCH_CHECK whose
// message starts with "ringcoll::<op>:" and names both values involved, raised on
// the calling thread of every rank that sees the bad argument.
#pragma once

#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "engine/collectives.h"
#include "reduce/types.h"

namespace ringcoll::checks {

// The single tensor of a c10d tensor list (multi-tensor lists are not supported).
at::Tensor& single(const char* op, std::vector<at::Tensor>& tensors, const char* what);

// "SUM", "MAX", ...: a c10d reduce op's name for messages.
const char* reduceOpName(c10d::ReduceOp::RedOpType t);

// Complex tensors travel, and are reduced, as their real view: view_as_real's
// (..., 2) float or double tensor over the same memory, so results written into it
// land in the caller's tensor. That is exact for the ops that act on the real and
// imaginary parts alone (SUM, AVG, PREMUL_SUM with its real factor) and for every
// collective that only moves data (reduceOp null). MIN, MAX, PRODUCT and the
// bitwise ops have no such meaning and are an error naming the op and the dtype, as
// torch's Python layer raises before it reaches a backend. Other tensors are
// returned as they are.
at::Tensor realView(const char* op, const at::Tensor& t,
                    const c10d::ReduceOp* reduceOp = nullptr);
std::vector<at::Tensor> realViews(const char* op, const std::vector<at::Tensor>& ts,
                                  const c10d::ReduceOp* reduceOp = nullptr);
std::vector<std::vector<at::Tensor>> realViews(
    const char* op, const std::vector<std::vector<at::Tensor>>& lists,
    const c10d::ReduceOp* reduceOp = nullptr);

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

// Point-to-point runs on CPU tensors only for now: a cuda tensor is an error naming
// the op and the device.
void cpuOnly(const char* op, const at::Tensor& t, const std::string& what);
// t is on ref's device (the tensors of one call share a device).
void sameDevice(const char* op, const at::Tensor& t, const std::string& what,
                const at::Tensor& ref, const std::string& refWhat);

// gather's output list (scatter's input list): on the root one list of p tensors,
// each with the dtype, numel and device of `ref` (named refWhat); on other ranks no
// list (or one empty list), as gloo. Returns the root's tensors, else none.
std::vector<at::Tensor> rootList(const char* op, std::vector<std::vector<at::Tensor>>& lists,
                                 const char* what, int rank, int root, int size,
                                 const at::Tensor& ref, const char* refWhat);

// all-to-all: the elements `t` (named what: "input", "output") holds for each rank:
// splits[j] rows (along dim 0) times t's row size, or t's rows cut into `size`
// equal parts when splits is empty. Checks that the splits are `size` counts of at
// least 0 whose sum is t's rows, or that the rows divide by size.
std::vector<size_t> splitCounts(const char* op, const at::Tensor& t, const char* what,
                                const std::vector<int64_t>& splits, int size);

// all-to-all: what this rank sends itself equals what it receives from itself.
void selfBlock(const char* op, size_t sendCount, size_t recvCount, int rank);

}  // namespace ringcoll::checks
