// barrier = an all-reduce (BOR) of p bytes. One byte per block means no block is
// empty, so every step of every phase moves a message and each rank's result
// depends on every rank's entry: nobody leaves before everybody has arrived.
#include <memory>

#include "engine/collectives.h"

namespace ringcoll::algo {

Job barrier(const Algorithm& algo, const Params& prm, void* scratch) {
  const Params bytes = barrierParams(prm);
  Job job;
  job.schedule = algo.allreduce(bytes);
  job.buf = scratch;
  job.n = bytes.n;
  job.dtype = DType::kUInt8;
  job.op = RedOp::kBor;
  if (const size_t extra = job.schedule.scratch) {
    // The schedule's scratch starts as a copy of the buffer's first bytes, which
    // are zero: zeroed host memory (the backend runs barriers on the CPU path).
    job.owned = std::shared_ptr<void>(new uint8_t[extra](), [](void* q) {
      delete[] static_cast<uint8_t*>(q);
    });
    job.regions = {{0, job.n, scratch}, {job.n, job.n + extra, job.owned.get()}};
  }
  return job;
}

}  // namespace ringcoll::algo
