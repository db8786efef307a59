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
  RC_ASSERT(blocks.size() == (prm.rank == prm.root ? static_cast<size_t>(prm.size) : 0u),
            "scatter: ", blocks.size(), " input blocks on rank ", prm.rank, " (root ",
            prm.root, ")");
  // The root's blocks are only sent from (read): rootedJob never writes them.
  std::vector<void*> writable;
  for (const void* b : blocks) writable.push_back(const_cast<void*>(b));
  return rootedJob(algo.scatter(prm), prm, dtype, mine, writable, reducer, /*toRoot=*/false);
}

}  // namespace ringcoll::algo
