// broadcast = the algorithm's broadcast schedule over the buffer as bytes (the
// chain: the whole buffer flows along the ring, pipelined segment by segment).
#include "engine/collectives.h"

namespace ringcoll::algo {

Job broadcast(const Algorithm& algo, const Params& prm, void* buf) {
  Job job;
  job.schedule = algo.broadcast(prm);
  job.buf = buf;
  job.n = prm.n;
  job.dtype = DType::kUInt8;
  return job;
}

}  // namespace ringcoll::algo
