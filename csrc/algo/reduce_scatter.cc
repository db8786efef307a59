// reduce-scatter = the algorithm's reducing phases with rank r owning block r.
#include "algo/collectives.h"

#include "common/errors.h"

namespace ringcoll::algo {

void reduceScatter(Executor& ex, const Algorithm& algo, void* buf, size_t n,
                   DType dtype, const Reduction& red) {
  const int p = ex.size();
  RC_ASSERT(n % static_cast<size_t>(p) == 0, "reduce-scatter buffer ", n,
            " not a multiple of ", p);
  if (red.premul) ex.reducer().multiply(buf, n, dtype, red.premulFactor);
  for (const auto& phase : algo.reduceScatter(p)) ex.run(*phase, buf, n, dtype, red.op);
  if (red.average) {
    const Range r = blockRange(n, p, ex.rank());
    ex.reducer().divide(static_cast<char*>(buf) + r.begin * elementSize(dtype), r.size(),
                        dtype, p);
  }
}

}  // namespace ringcoll::algo
