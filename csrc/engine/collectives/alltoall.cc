// all-to-all = rank i's block for rank j reaches rank j, for every pair, any block
// sizes, by the algorithm's all-to-all schedule (direct.cc draws direct's: pairwise
// exchange in p-1 steps) over this rank's send blocks followed by its receive
// blocks. The own block is copied locally (the job's prologue, once the ranks
// agreed).
//
// The per-pair sizes differ by pair, so the fingerprint is pairwise
// (engine/fingerprint.h): the header to each peer carries this rank's counts for that
// peer, and every rank exchanges headers with every other rank, including those it
// sends nothing to, so that a rank expecting data from a peer that means to send it
// none is caught too.
//
// Memory: each block is its own region (Job::regions), the user's tensors. A
// schedule that forwards blocks (Bruck's, which stages what it passes on) asks for
// scratch (schedules/schedule.h): one more region past the blocks, memory the job
// owns from the reducer's device; it starts empty, or as a copy of the blocks'
// first elements (the own receive block after its local copy) when the schedule's
// scratch starts as a copy.
#include "engine/collectives.h"

#include <algorithm>

#include "common/errors.h"

namespace ringcoll::algo {

Job alltoall(const Algorithm& algo, const Params& prm, DType dtype,
             const std::vector<const void*>& sends, const std::vector<size_t>& sendCounts,
             const std::vector<void*>& recvs, const std::vector<size_t>& recvCounts,
             Reducer& reducer) {
  const int p = prm.size, r = prm.rank;
  RC_ASSERT(sends.size() == static_cast<size_t>(p) && recvs.size() == sends.size(),
            "all-to-all with ", sends.size(), " and ", recvs.size(), " blocks, p ", p);
  RC_ASSERT(sendCounts[r] == recvCounts[r], "all-to-all sends ", sendCounts[r],
            " elements to itself but receives ", recvCounts[r]);
  Job job;
  const Params prm2 = alltoallParams(prm, sendCounts, recvCounts);
  const size_t n = prm2.n;
  job.schedule = algo.alltoall(prm2);
  job.n = n;
  job.dtype = dtype;  // copies only: no op
  // Regions: the send blocks (only read), then the receive blocks.
  size_t at = 0;
  for (int j = 0; j < p; ++j) {
    if (sendCounts[j]) {
      job.regions.push_back({at, at + sendCounts[j], const_cast<void*>(sends[j])});
    }
    at += sendCounts[j];
  }
  for (int j = 0; j < p; ++j) {
    if (recvCounts[j]) job.regions.push_back({at, at + recvCounts[j], recvs[j]});
    at += recvCounts[j];
  }
  for (int j = 0; j < p; ++j) {
    job.sendCounts.push_back(sendCounts[j]);
    job.recvCounts.push_back(recvCounts[j]);
    if (j != r) job.neighbours.push_back(j);  // headers with every rank (above)
  }
  const size_t scratch = job.schedule.scratch, elem = elementSize(dtype);
  std::vector<Region> copied;  // the blocks the scratch starts as a copy of
  void* keep = allocateScratch(job, job.schedule, dtype, reducer);
  if (keep) {
    if (job.schedule.scratchCopy) {
      for (const Region& g : job.regions) {
        if (g.begin < std::min(scratch, n)) copied.push_back(g);
      }
    }
    job.regions.push_back({n, n + scratch, keep});
  }
  void* own = recvs[r];
  const void* src = sends[r];
  const size_t ownBytes = own != src ? recvCounts[r] * elem : 0;
  if (ownBytes || !copied.empty()) {
    const size_t limit = std::min(scratch, n);
    job.prologue = [&reducer, own, src, ownBytes, copied = std::move(copied), keep, limit,
                    elem] {
      if (ownBytes) reducer.copy(own, src, ownBytes, false);
      for (const Region& g : copied) {
        reducer.copy(static_cast<char*>(keep) + g.begin * elem, g.ptr,
                     (std::min(g.end, limit) - g.begin) * elem, false);
      }
    };
  }
  return job;
}

}  // namespace ringcoll::algo
