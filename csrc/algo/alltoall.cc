// all-to-all = rank i's block for rank j reaches rank j, for every pair: pairwise
// exchange in p-1 steps, any block sizes.
//
// Each rank's buffer is its p send blocks followed by its p receive blocks (block
// j: what it sends to, or receives from, rank j; sizes per rank and pair, so the
// layout is each rank's own). At step s-1 (s = 1 .. p-1) rank r sends its block
// for r+s to rank r+s and receives the block of r-s from rank r-s (mod p); its own
// block is copied locally (the job's prologue, once the ranks agreed). With p = 3,
// every rank sending one element to each:
//
//   buffer of r:  [ s0 s1 s2 | r0 r1 r2 ]  (s_j: for rank j; r_j: from rank j)
//   step 0:  r0 sends s1 -> r1, r1 sends s2 -> r2, r2 sends s0 -> r0
//            r0 receives r2 from r2, r1 receives r0 from r0, r2 receives r1 from r1
//   step 1:  r0 sends s2 -> r2, r1 sends s0 -> r0, r2 sends s1 -> r1
//            r0 receives r1 from r1, r1 receives r2 from r2, r2 receives r0 from r0
//   result:  the receive blocks, [3, 6)
//
// Sends only read the send blocks and receives only write the receive blocks, so
// no transfer waits for another: the executor posts them all at once, and the
// step order only decides the order in which each rank starts its peers (each
// rank first talks to a different peer, so no rank is every rank's first). Every
// rank sends and receives exactly its data once: the least any all-to-all moves.
//
// The per-pair sizes differ by pair, so the fingerprint is pairwise
// (algo/fingerprint.h): the header to each peer carries this rank's counts for that
// peer, and every rank exchanges headers with every other rank, including those it
// sends nothing to, so that a rank expecting data from a peer that means to send it
// none is caught too.
//
// Memory: each block is its own region (Job::regions), the user's tensors.
#include "algo/collectives.h"

#include "common/errors.h"

namespace ringcoll::algo {

namespace {
std::vector<size_t> offsets(const std::vector<size_t>& counts, size_t start) {
  std::vector<size_t> out(counts.size() + 1, start);
  for (size_t j = 0; j < counts.size(); ++j) out[j + 1] = out[j] + counts[j];
  return out;
}
}  // namespace

Schedule alltoallSchedule(const Params& prm, const std::vector<size_t>& sendCounts,
                          const std::vector<size_t>& recvCounts) {
  const int p = prm.size, r = prm.rank;
  RC_ASSERT(sendCounts.size() == static_cast<size_t>(p) &&
                recvCounts.size() == sendCounts.size(),
            "all-to-all counts for ", sendCounts.size(), " and ", recvCounts.size(),
            " ranks, p ", p);
  const std::vector<size_t> so = offsets(sendCounts, 0), ro = offsets(recvCounts, so[p]);
  RC_ASSERT(prm.n == ro[p], "all-to-all buffer ", prm.n, " but blocks total ", ro[p]);
  Schedule s{"pairwise-a2a", {}, Range{so[p], ro[p]}};
  for (int d = 1; d < p; ++d) {
    const int to = (r + d) % p, from = (r - d + p) % p;
    Step st;
    st.transfers = {{Kind::kSend, to, Range{so[to], so[to + 1]}},
                    {Kind::kRecvCopy, from, Range{ro[from], ro[from + 1]}}};
    s.steps.push_back(std::move(st));
  }
  return s;
}

Job alltoall(const Params& prm, DType dtype, const std::vector<const void*>& sends,
             const std::vector<size_t>& sendCounts, const std::vector<void*>& recvs,
             const std::vector<size_t>& recvCounts, Reducer& reducer) {
  const int p = prm.size, r = prm.rank;
  RC_ASSERT(sends.size() == static_cast<size_t>(p) && recvs.size() == sends.size(),
            "all-to-all with ", sends.size(), " and ", recvs.size(), " blocks, p ", p);
  RC_ASSERT(sendCounts[r] == recvCounts[r], "all-to-all sends ", sendCounts[r],
            " elements to itself but receives ", recvCounts[r]);
  Job job;
  Params prm2 = prm;
  size_t n = 0;
  for (int j = 0; j < p; ++j) n += sendCounts[j] + recvCounts[j];
  prm2.n = n;
  job.schedule = alltoallSchedule(prm2, sendCounts, recvCounts);
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
