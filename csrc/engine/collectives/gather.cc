// gather = every rank's m elements reach the root, in rank order, by the
// algorithm's gather schedule (direct.cc draws direct's: one step, every rank
// sends its block to the root) over p blocks of m elements, block i standing for
// rank i's contribution.
//
// Memory: each block is its own region (Job::regions): on the root the user's
// output tensors, elsewhere the rank's input alone. Nothing is staged. The root
// places its own block locally (the job's prologue, once the ranks agreed).
#include "engine/collectives.h"

#include "common/errors.h"

namespace ringcoll::algo {

Job gather(const Algorithm& algo, const Params& prm, DType dtype, const void* mine,
           const std::vector<void*>& blocks, Reducer& reducer) {
  const bool root = prm.rank == prm.root;
  RC_ASSERT(blocks.size() == (root ? static_cast<size_t>(prm.size) : 0u), "gather: ",
            blocks.size(), " output blocks on rank ", prm.rank, " (root ", prm.root, ")");
  Job job;
  job.schedule = algo.gather(prm);
  job.n = prm.n;
  job.dtype = dtype;  // copies only: no op
  const size_t es = elementSize(dtype);
  const Range me = blockRange(prm.n, prm.size, prm.rank);
  if (!root) {
    if (!me.empty()) job.regions.push_back({me.begin, me.end, const_cast<void*>(mine)});
    return job;
  }
  for (int q = 0; q < prm.size; ++q) {
    const Range b = blockRange(prm.n, prm.size, q);
    if (!b.empty()) job.regions.push_back({b.begin, b.end, blocks[q]});
  }
  void* own = blocks[prm.root];
  if (!me.empty() && own != mine) {
    job.prologue = [&reducer, own, mine, bytes = me.size() * es] {
      reducer.copy(own, mine, bytes, false);
    };
  }
  return job;
}

}  // namespace ringcoll::algo
