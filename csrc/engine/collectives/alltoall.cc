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
// Memory: each block is its own region (Job::regions), the user's tensors.
#include "engine/collectives.h"

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
  void* own = recvs[r];
  const void* src = sends[r];
  if (recvCounts[r] && own != src) {
    job.prologue = [&reducer, own, src, bytes = recvCounts[r] * elementSize(dtype)] {
      reducer.copy(own, src, bytes, false);
    };
  }
  return job;
}

}  // namespace ringcoll::algo
