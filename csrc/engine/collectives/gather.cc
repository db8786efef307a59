// gather = every rank's m elements reach the root, in rank order, by the
// algorithm's gather schedule (direct.cc draws direct's: one step, every rank
// sends its block to the root) over p blocks of m elements, block i standing for
// rank i's contribution.
//
// Memory: each block is its own region (Job::regions): on the root the user's
// output tensors, elsewhere the rank's input alone. Nothing is staged. The root
// places its own block locally (the job's prologue, once the ranks agreed). The
// job's shape is shared with scatter (rootedJob, defined here).
#include "engine/collectives.h"

#include "common/errors.h"

namespace ringcoll::algo {

Job gather(const Algorithm& algo, const Params& prm, DType dtype, const void* mine,
           const std::vector<void*>& blocks, Reducer& reducer) {
  RC_ASSERT(blocks.size() == (prm.rank == prm.root ? static_cast<size_t>(prm.size) : 0u),
            "gather: ", blocks.size(), " output blocks on rank ", prm.rank, " (root ",
            prm.root, ")");
  return rootedJob(algo.gather(prm), prm, dtype, const_cast<void*>(mine), blocks, reducer,
                   /*toRoot=*/true);
}

Job rootedJob(Schedule schedule, const Params& prm, DType dtype, void* mine,
              const std::vector<void*>& blocks, Reducer& reducer, bool toRoot) {
  Job job;
  job.schedule = std::move(schedule);
  job.n = prm.n;
  job.dtype = dtype;  // copies only: no op
  const Range me = blockRange(prm.n, prm.size, prm.rank);
  if (prm.rank != prm.root) {
    if (!me.empty()) job.regions.push_back({me.begin, me.end, mine});
    return job;
  }
  // Gather's root only receives into its blocks, scatter's only sends from them.
  for (int q = 0; q < prm.size; ++q) {
    const Range b = blockRange(prm.n, prm.size, q);
    if (!b.empty()) job.regions.push_back({b.begin, b.end, blocks[q]});
  }
  void* own = blocks[prm.root];
  if (!me.empty() && own != mine) {
    void* dst = toRoot ? own : mine;
    const void* src = toRoot ? mine : own;
    job.prologue = [&reducer, dst, src, bytes = me.size() * elementSize(dtype)] {
      reducer.copy(dst, src, bytes, false);
    };
  }
  return job;
}

}  // namespace ringcoll::algo
