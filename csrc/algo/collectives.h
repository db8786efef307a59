// The collectives, each in its own file, written once over (Executor, Algorithm)
// and raw memory. They know no torch and no transport; the backend calls them on
// its worker with validated arguments.
//
// Reductions beyond the element ops: AVG is SUM followed by a division of the
// reduced result by p; PREMUL_SUM multiplies the local input by the factor and then
// SUMs. So transports and kernels only ever see RedOp.
#pragma once

#include <cstddef>

#include "algo/executor.h"
#include "algo/registry.h"
#include "reduce/types.h"

namespace ringcoll::algo {

struct Reduction {
  RedOp op = RedOp::kSum;
  bool average = false;  // AVG: divide the reduced result by the world size
  bool premul = false;   // PREMUL_SUM: multiply local input by premulFactor first
  double premulFactor = 1.0;
};

// In place on buf (n elements): every rank ends with the reduction of all inputs.
void allreduce(Executor& ex, const Algorithm& algo, void* buf, size_t n, DType dtype,
               const Reduction& red);

// buf holds p * m elements (this rank's full input, clobbered). Afterwards block r
// of buf (elements [r*m, (r+1)*m)) holds the reduction of block r of all inputs.
void reduceScatter(Executor& ex, const Algorithm& algo, void* buf, size_t n,
                   DType dtype, const Reduction& red);

// buf holds p * m elements, block r filled by rank r; afterwards all blocks are
// filled on every rank.
void allgather(Executor& ex, const Algorithm& algo, void* buf, size_t n, DType dtype);

// The root's `bytes` bytes of buf reach every rank.
void broadcast(Executor& ex, const Algorithm& algo, void* buf, size_t bytes, int root);

// Returns on no rank before every rank has entered. scratch: p bytes of the
// executor's device memory.
void barrier(Executor& ex, const Algorithm& algo, void* scratch);

}  // namespace ringcoll::algo
