// all-reduce = the algorithm's all-reduce schedule (ring: share-reduce then
// share-only) in place on one buffer.
#include "algo/collectives.h"

namespace ringcoll::algo {

Job allreduce(const Algorithm& algo, const Params& prm, void* buf, DType dtype,
              const Reduction& red, Reducer& reducer) {
  if (red.premul) reducer.multiply(buf, prm.n, dtype, red.premulFactor);
  Job job;
  job.schedule = algo.allreduce(prm);
  job.buf = buf;
  job.n = prm.n;
  job.dtype = dtype;
  job.op = red.op;
  // Divided where each element is first complete, before it is shared: n/p
  // elements of work per rank on the ring, and every rank receives the same values.
  job.divideBy = red.average ? prm.size : 0;
  return job;
}

}  // namespace ringcoll::algo
