// barrier = an all-reduce (BOR) of p bytes. One byte per block means no block is
// empty, so every step of every phase moves a message and each rank's result
// depends on every rank's entry: nobody leaves before everybody has arrived.
#include "algo/collectives.h"

namespace ringcoll::algo {

Job barrier(const Algorithm& algo, const Params& prm, void* scratch) {
  Params bytes = prm;
  bytes.n = static_cast<size_t>(prm.size);
  Job job;
  job.schedule = algo.allreduce(bytes);
  job.buf = scratch;
  job.n = bytes.n;
  job.dtype = DType::kUInt8;
  job.op = RedOp::kBor;
  return job;
}

}  // namespace ringcoll::algo
