// all-reduce = the algorithm's all-reduce schedule (ring: share-reduce then
// share-only) in place on one buffer. AVG divides each element where it is first
// complete, before it is shared: n/p elements of work per rank on the ring, and
// every rank receives the same divided values.
#include "engine/collectives.h"

namespace ringcoll::algo {

Job allreduce(const Algorithm& algo, const Params& prm, void* buf, DType dtype,
              const Reduction& red, Reducer& reducer) {
  return reducingJob(algo.allreduce(prm), prm, buf, dtype, red, reducer);
}

}  // namespace ringcoll::algo
