// all-gather = the algorithm's all-gather schedule, rank r starting with block r.
#include "engine/collectives.h"

#include "common/errors.h"

namespace ringcoll::algo {

Job allgather(const Algorithm& algo, const Params& prm, void* buf, DType dtype) {
  RC_ASSERT(prm.n % static_cast<size_t>(prm.size) == 0, "all-gather buffer ", prm.n,
            " not a multiple of ", prm.size);
  Job job;
  job.schedule = algo.allgather(prm);
  job.buf = buf;
  job.n = prm.n;
  job.dtype = dtype;  // copies only: no op
  return job;
}

}  // namespace ringcoll::algo
