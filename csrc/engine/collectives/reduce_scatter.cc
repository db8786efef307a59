// reduce-scatter = the algorithm's reduce-scatter schedule; rank r keeps block r.
#include "engine/collectives.h"

#include "common/errors.h"

namespace ringcoll::algo {

Job reduceScatter(const Algorithm& algo, const Params& prm, void* buf, DType dtype,
                  const Reduction& red, Reducer& reducer) {
  RC_ASSERT(prm.n % static_cast<size_t>(prm.size) == 0, "reduce-scatter buffer ", prm.n,
            " not a multiple of ", prm.size);
  Job job = reducingJob(algo.reduceScatter(prm), prm, buf, dtype, red, reducer);
  RC_ASSERT(job.schedule.result == blockRange(prm.n, prm.size, prm.rank),
            job.schedule.name, " leaves rank ", prm.rank, " a result other than block ",
            prm.rank);
  return job;
}

}  // namespace ringcoll::algo
