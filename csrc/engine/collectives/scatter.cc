// scatter = block i of the root's p blocks of m elements reaches rank i, by the
// algorithm's scatter schedule (direct.cc draws direct's: one step, the root sends
// block i to rank i).
//
// Memory: each block is its own region (Job::regions): on the root the user's
// input tensors, elsewhere the rank's output alone. Nothing is staged. The root
// places its own block locally (the job's prologue, once the ranks agreed).
#include "engine/collectives.h"

#include "common/errors.h"

namespace ringcoll::algo {

Job scatter(const Algorithm& algo, const Params& prm, DType dtype, void* mine,
            const std::vector<const void*>& blocks, Reducer& reducer) {
  const bool root = prm.rank == prm.root;
  RC_ASSERT(blocks.size() == (root ? static_cast<size_t>(prm.size) : 0u), "scatter: ",
            blocks.size(), " input blocks on rank ", prm.rank, " (root ", prm.root, ")");
  Job job;
  job.schedule = algo.scatter(prm);
  job.n = prm.n;
  job.dtype = dtype;  // copies only: no op
  const size_t es = elementSize(dtype);
  const Range me = blockRange(prm.n, prm.size, prm.rank);
  if (!root) {
    if (!me.empty()) job.regions.push_back({me.begin, me.end, mine});
    return job;
  }
  // The root's blocks are only sent from (read), its own is only copied out.
  for (int q = 0; q < prm.size; ++q) {
    const Range b = blockRange(prm.n, prm.size, q);
    if (!b.empty()) job.regions.push_back({b.begin, b.end, const_cast<void*>(blocks[q])});
  }
  const void* own = blocks[prm.root];
  if (!me.empty() && own != mine) {
    job.prologue = [&reducer, own, mine, bytes = me.size() * es] {
      reducer.copy(mine, own, bytes, false);
    };
  }
  return job;
}

}  // namespace ringcoll::algo
