// broadcast = the algorithm's broadcast phases over the buffer as bytes: the
// chain pipelines blocks of at most one segment each along the ring.
#include "algo/collectives.h"

namespace ringcoll::algo {

void broadcast(Executor& ex, const Algorithm& algo, void* buf, size_t bytes, int root) {
  const int p = ex.size();
  if (p == 1) return;
  for (const auto& phase : algo.broadcast(p, root)) {
    ex.run(*phase, buf, bytes, DType::kUInt8, RedOp::kSum);
  }
}

}  // namespace ringcoll::algo
