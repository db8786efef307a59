// all-gather = the algorithm's copying phases, rank r starting with block r.
#include "algo/collectives.h"

#include "common/errors.h"

namespace ringcoll::algo {

void allgather(Executor& ex, const Algorithm& algo, void* buf, size_t n, DType dtype) {
  const int p = ex.size();
  RC_ASSERT(n % static_cast<size_t>(p) == 0, "all-gather buffer ", n,
            " not a multiple of ", p);
  // The op is unused: copying phases never reduce.
  for (const auto& phase : algo.allgather(p)) ex.run(*phase, buf, n, dtype, RedOp::kSum);
}

}  // namespace ringcoll::algo
