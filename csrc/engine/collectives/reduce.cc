// reduce = the algorithm's reduce schedule: the root ends with the reduction of all
// inputs in place; the other ranks' buffers are its scratch (ring: reduce-scatter,
// then a gather to the root; tree: the binomial tree into the root). AVG divides
// where the schedule marks elements complete, before they travel on to the root.
#include "engine/collectives.h"

#include "common/errors.h"

namespace ringcoll::algo {

Job reduce(const Algorithm& algo, const Params& prm, void* buf, DType dtype,
           const Reduction& red, Reducer& reducer) {
  Job job = reducingJob(algo.reduce(prm), prm, buf, dtype, red, reducer);
  RC_ASSERT(prm.rank != prm.root || job.schedule.result == (Range{0, prm.n}),
            job.schedule.name, " leaves the root ", prm.root, " a result other than [0, ",
            prm.n, ")");
  return job;
}

}  // namespace ringcoll::algo
