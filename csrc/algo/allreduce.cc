// all-reduce = the algorithm's reducing phases (ring: share-reduce) then its
// copying phases (ring: share-only), in place on one buffer.
#include "algo/collectives.h"

namespace ringcoll::algo {

void allreduce(Executor& ex, const Algorithm& algo, void* buf, size_t n, DType dtype,
               const Reduction& red) {
  if (red.premul) ex.reducer().multiply(buf, n, dtype, red.premulFactor);
  const int p = ex.size();
  if (p == 1) {
    if (red.average) ex.reducer().divide(buf, n, dtype, p);
    return;
  }
  bool divided = !red.average;
  for (const auto& phase : algo.allreduce(p)) {
    const int blocks = ex.run(*phase, buf, n, dtype, red.op);
    const int owned = phase->ownedBlockAfter(ex.rank(), p);
    if (!divided && owned >= 0) {
      // Divide the one fully reduced block before it is shared: n/p elements of
      // work instead of n, and every rank receives the same divided values.
      const Range r = blockRange(n, blocks, owned);
      ex.reducer().divide(static_cast<char*>(buf) + r.begin * elementSize(dtype),
                          r.size(), dtype, p);
      divided = true;
    }
  }
  if (!divided) ex.reducer().divide(buf, n, dtype, p);
}

}  // namespace ringcoll::algo
