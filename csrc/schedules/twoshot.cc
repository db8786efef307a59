// Two-shot: reduce-scatter by direct sends to each block's owner, then all-gather by
// direct sends from each owner, no ring. Step by step, p = 3, blocks b0 b1 b2, rank
// r owns block r:
//
//   step 0: r0 sends b1 -> r1   r1 sends b2 -> r2   r2 sends b0 -> r0   (each reduces
//           the block it receives into its own)
//   step 1: r0 sends b2 -> r2   r1 sends b0 -> r0   r2 sends b1 -> r1   (block r now
//           holds every rank's contribution on rank r)
//   step 2: every rank sends its block to every other rank, which copies it in
//
// In general at step s < p-1 rank r sends block r+1+s to rank r+1+s and reduces
// block r from rank r-1-s (mod p), so every step is a permutation of the ranks. A
// rank only ever sends blocks it never writes (its own input, or its finished
// block), so the executor can post all its sends at once: the reduce-scatter is one
// message hop deep, the receives into block r are what is serialised (one reduce at
// a time, since a step writes a range once). The all-gather is one step of p-1
// sends and p-1 receives. Each rank sends (p-1)/p of the buffer per phase, as on the
// ring, in 2(p-1) messages but two hops: for small and middle sizes.
//
// Block r is reduced on rank r only and copied everywhere else: all ranks end with
// the same bits whatever the op.
#include <algorithm>

#include "common/errors.h"
#include "schedules/registry.h"

namespace ringcoll::algo {

namespace {

// Steps [0, p-1) of a reduce-scatter over the p blocks of [0, n); rank r ends with
// block r reduced.
Schedule reduceScatterSteps(const char* name, const Params& prm) {
  const int p = prm.size, r = prm.rank;
  RC_ASSERT(p >= 1 && r >= 0 && r < p, "rank ", r, " of ", p);
  const Range mine = blockRange(prm.n, p, r);
  Schedule s{name, std::vector<Step>(static_cast<size_t>(std::max(p - 1, 1))), mine};
  for (int i = 0; i < p - 1; ++i) {
    const int to = mod(r + 1 + i, p), from = mod(r - 1 - i, p);
    s.steps[static_cast<size_t>(i)].transfers = {
        {Kind::kSend, to, blockRange(prm.n, p, to)}, {Kind::kRecvReduce, from, mine}};
  }
  s.steps.back().reduced.push_back(mine);  // p = 1: an empty step, own data is all
  return s;
}

// One step: rank r sends block r to every other rank and copies in theirs.
Step allGatherStep(const Params& prm) {
  const int p = prm.size, r = prm.rank;
  Step st;
  for (int i = 1; i < p; ++i) {
    st.transfers.push_back({Kind::kSend, mod(r + i, p), blockRange(prm.n, p, r)});
  }
  for (int i = 1; i < p; ++i) {
    const int from = mod(r - i, p);
    st.transfers.push_back({Kind::kRecvCopy, from, blockRange(prm.n, p, from)});
  }
  return st;
}

Schedule twoshotReduceScatter(const Params& prm) {
  return reduceScatterSteps("twoshot-reduce-scatter", prm);
}

Schedule twoshotAllGather(const Params& prm) {
  RC_ASSERT(prm.size >= 1 && prm.rank >= 0 && prm.rank < prm.size, "rank ", prm.rank,
            " of ", prm.size);
  Schedule s{"twoshot-all-gather", {}, Range{0, prm.n}};
  if (prm.size > 1) s.steps.push_back(allGatherStep(prm));
  return s;
}

Schedule twoshotAllReduce(const Params& prm) {
  Schedule s = reduceScatterSteps("twoshot-all-reduce", prm);
  s.result = Range{0, prm.n};
  if (prm.size > 1) s.steps.push_back(allGatherStep(prm));
  return s;
}

}  // namespace

Algorithm twoshotAlgorithm() {
  Algorithm a;
  a.name = "twoshot";
  a.summary = "two-shot: reduce-scatter by direct sends to each block's owner, then "
              "all-gather by direct sends (no ring)";
  a.allreduce = twoshotAllReduce;
  a.reduceScatter = twoshotReduceScatter;
  a.allgather = twoshotAllGather;
  return a;
}

}  // namespace ringcoll::algo
