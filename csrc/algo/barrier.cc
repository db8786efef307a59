// barrier = an all-reduce (BOR) of p bytes. One byte per block means no block is
// empty, so every step of every phase moves a message and each rank's result
// depends on every rank's entry: nobody leaves before everybody has arrived.
#include "algo/collectives.h"

namespace ringcoll::algo {

void barrier(Executor& ex, const Algorithm& algo, void* scratch) {
  const int p = ex.size();
  if (p == 1) return;
  Reduction red;
  red.op = RedOp::kBor;
  allreduce(ex, algo, scratch, static_cast<size_t>(p), DType::kUInt8, red);
}

}  // namespace ringcoll::algo
