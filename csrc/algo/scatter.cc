// scatter = block i of the root's p blocks of m elements reaches rank i: direct, in
// one step (gather, backwards).
//
// The buffer has the same layout on every rank: p blocks of m elements, block i
// standing for what rank i receives. The root sends block i to rank i and places
// its own block locally (the job's prologue, once the ranks agreed); every other
// rank receives its block from the root. With p = 3, root 0, m = 2:
//
//   buffer:  [ b0 b0 | b1 b1 | b2 b2 ]     (the root's; r1 and r2 hold only theirs)
//   step 0:  r0 sends [2, 4) -> r1 and [4, 6) -> r2
//            r1 receives [2, 4), r2 receives [4, 6) from r0, in place
//   result:  rank r holds block r
//
// The root sends (p-1) m elements and every other rank receives m. The executor
// posts the root's p-1 sends at once, each cut into segments.
//
// Memory: each block is its own region (Job::regions): on the root the user's
// input tensors, elsewhere the rank's output alone. Nothing is staged.
#include "algo/collectives.h"

#include "common/errors.h"

namespace ringcoll::algo {

Schedule scatterSchedule(const Params& prm) {
  RC_ASSERT(prm.root >= 0 && prm.root < prm.size, "root ", prm.root, " of ", prm.size);
  RC_ASSERT(prm.n % static_cast<size_t>(prm.size) == 0, "scatter buffer ", prm.n,
            " not a multiple of ", prm.size);
  Schedule s{"direct-scatter", {}, blockRange(prm.n, prm.size, prm.rank)};
  if (prm.size > 1) s.steps.push_back(starStep(prm, /*toRoot=*/false));
  return s;
}

Job scatter(const Params& prm, DType dtype, void* mine, const std::vector<const void*>& blocks,
            Reducer& reducer) {
  const bool root = prm.rank == prm.root;
  RC_ASSERT(blocks.size() == (root ? static_cast<size_t>(prm.size) : 0u), "scatter: ",
            blocks.size(), " input blocks on rank ", prm.rank, " (root ", prm.root, ")");
  Job job;
  job.schedule = scatterSchedule(prm);
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
