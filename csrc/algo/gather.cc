// gather = every rank's m elements reach the root, in rank order: direct, in one
// step.
//
// The buffer has the same layout on every rank: p blocks of m elements, block i
// standing for rank i's contribution. Every rank but the root sends its block to
// the root; the root receives block i from rank i and copies it in place, and
// places its own block locally (the job's prologue, once the ranks agreed). With
// p = 3, root 0, m = 2:
//
//   buffer:  [ b0 b0 | b1 b1 | b2 b2 ]
//   step 0:  r1 sends [2, 4) -> r0      r2 sends [4, 6) -> r0
//            r0 receives [2, 4) from r1 and [4, 6) from r2, in place
//   result:  r0 [0, 6); r1 and r2 nothing
//
// The root receives (p-1) m elements and every other rank sends m: the least any
// gather moves. The executor posts the root's p-1 receives at once and cuts each
// into segments, so the root takes whichever sender is ready first.
//
// Memory: each block is its own region (Job::regions): on the root the user's
// output tensors, elsewhere the rank's input alone. Nothing is staged.
#include "algo/collectives.h"

#include "common/errors.h"

namespace ringcoll::algo {

Schedule gatherSchedule(const Params& prm) {
  RC_ASSERT(prm.root >= 0 && prm.root < prm.size, "root ", prm.root, " of ", prm.size);
  RC_ASSERT(prm.n % static_cast<size_t>(prm.size) == 0, "gather buffer ", prm.n,
            " not a multiple of ", prm.size);
  const bool root = prm.rank == prm.root;
  Schedule s{"direct-gather", {}, root ? Range{0, prm.n} : Range{}};
  if (prm.size > 1) s.steps.push_back(starStep(prm, /*toRoot=*/true));
  return s;
}

Step starStep(const Params& prm, bool toRoot) {
  const bool root = prm.rank == prm.root;
  Step st;
  for (int q = 0; q < prm.size; ++q) {
    if (q == prm.root || (!root && q != prm.rank)) continue;
    const Range block = blockRange(prm.n, prm.size, q);
    if (root) {
      st.transfers.push_back({toRoot ? Kind::kRecvCopy : Kind::kSend, q, block});
    } else {
      st.transfers.push_back({toRoot ? Kind::kSend : Kind::kRecvCopy, prm.root, block});
    }
  }
  return st;
}

Job gather(const Params& prm, DType dtype, const void* mine, const std::vector<void*>& blocks,
           Reducer& reducer) {
  const bool root = prm.rank == prm.root;
  RC_ASSERT(blocks.size() == (root ? static_cast<size_t>(prm.size) : 0u), "gather: ",
            blocks.size(), " output blocks on rank ", prm.rank, " (root ", prm.root, ")");
  Job job;
  job.schedule = gatherSchedule(prm);
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
