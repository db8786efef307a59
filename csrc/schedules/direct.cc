// Direct: every block goes straight from the rank that holds it to the rank that
// needs it, in one hop; gather, scatter and all-to-all, step by step.
//
// Gather and scatter: the buffer has the same layout on every rank, p blocks of m
// elements, block i standing for rank i's part. With p = 3, root 0, m = 2:
//
//   buffer:  [ b0 b0 | b1 b1 | b2 b2 ]
//   gather, step 0:  r1 sends [2, 4) -> r0      r2 sends [4, 6) -> r0
//                    r0 receives [2, 4) from r1 and [4, 6) from r2, in place
//                    result: r0 [0, 6); r1 and r2 nothing
//   scatter, step 0: r0 sends [2, 4) -> r1 and [4, 6) -> r2
//                    r1 receives [2, 4), r2 receives [4, 6) from r0, in place
//                    result: rank r holds block r
//
// The root receives (gather) or sends (scatter) (p-1) m elements and every other
// rank sends or receives m: the least either moves. The executor posts the root's
// p-1 transfers at once and cuts each into segments, so the root serves whichever
// peer is ready first. The root's own block is placed by the job (engine/collectives/gather.cc,
// scatter.cc), not by the schedule.
//
// All-to-all, pairwise exchange in p-1 steps, any block sizes: each rank's buffer
// is its p send blocks then its p receive blocks (Params::sendCounts, recvCounts;
// the layout is each rank's own). At step s-1 (s = 1 .. p-1) rank r sends its
// block for r+s to rank r+s and receives the block of r-s from rank r-s (mod p).
// With p = 3, one element per pair:
//
//   buffer of r:  [ s0 s1 s2 | r0 r1 r2 ]  (s_j: for rank j; r_j: from rank j)
//   step 0:  r0 sends s1 -> r1, r1 sends s2 -> r2, r2 sends s0 -> r0
//            r0 receives r2 from r2, r1 receives r0 from r0, r2 receives r1 from r1
//   step 1:  r0 sends s2 -> r2, r1 sends s0 -> r0, r2 sends s1 -> r1
//            r0 receives r1 from r1, r1 receives r2 from r2, r2 receives r0 from r0
//   result:  the receive blocks, [3, 6); r_r (the own block) is the job's copy
//
// Sends only read the send blocks and receives only write the receive blocks, so
// no transfer waits for another: the executor posts them all at once, and the
// step order only decides the order in which each rank starts its peers (each
// rank first talks to a different peer, so no rank is every rank's first). Every
// rank sends and receives exactly its data once: the least any all-to-all moves.
#include "common/errors.h"
#include "schedules/registry.h"

namespace ringcoll::algo {

namespace {

// The one step of gather (toRoot) and scatter (!toRoot): block q of the buffer
// moves between the root and rank q, for every q but the root.
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

void checkBlocks(const Params& prm, const char* what) {
  RC_ASSERT(prm.size >= 1 && prm.rank >= 0 && prm.rank < prm.size, "rank ", prm.rank, " of ",
            prm.size);
  RC_ASSERT(prm.root >= 0 && prm.root < prm.size, "root ", prm.root, " of ", prm.size);
  RC_ASSERT(prm.n % static_cast<size_t>(prm.size) == 0, what, " buffer ", prm.n,
            " not a multiple of ", prm.size);
}

Schedule directGather(const Params& prm) {
  checkBlocks(prm, "gather");
  const bool root = prm.rank == prm.root;
  Schedule s{"direct-gather", {}, root ? Range{0, prm.n} : Range{}};
  if (prm.size > 1) s.steps.push_back(starStep(prm, /*toRoot=*/true));
  return s;
}

Schedule directScatter(const Params& prm) {
  checkBlocks(prm, "scatter");
  Schedule s{"direct-scatter", {}, blockRange(prm.n, prm.size, prm.rank)};
  if (prm.size > 1) s.steps.push_back(starStep(prm, /*toRoot=*/false));
  return s;
}

// Offsets of consecutive blocks of `counts` elements from `start`.
std::vector<size_t> offsets(const std::vector<size_t>& counts, size_t start) {
  std::vector<size_t> out(counts.size() + 1, start);
  for (size_t j = 0; j < counts.size(); ++j) out[j + 1] = out[j] + counts[j];
  return out;
}

Schedule directAlltoall(const Params& prm) {
  const int p = prm.size, r = prm.rank;
  RC_ASSERT(p >= 1 && r >= 0 && r < p, "rank ", r, " of ", p);
  RC_ASSERT(prm.sendCounts.size() == static_cast<size_t>(p) &&
                prm.recvCounts.size() == prm.sendCounts.size(),
            "all-to-all counts for ", prm.sendCounts.size(), " and ", prm.recvCounts.size(),
            " ranks, p ", p);
  const std::vector<size_t> so = offsets(prm.sendCounts, 0);
  const std::vector<size_t> ro = offsets(prm.recvCounts, so[p]);
  RC_ASSERT(prm.n == ro[p], "all-to-all buffer ", prm.n, " but blocks total ", ro[p]);
  Schedule s{"direct-alltoall", {}, Range{so[p], ro[p]}};
  for (int d = 1; d < p; ++d) {
    const int to = mod(r + d, p), from = mod(r - d, p);
    Step st;
    st.transfers = {{Kind::kSend, to, Range{so[to], so[to + 1]}},
                    {Kind::kRecvCopy, from, Range{ro[from], ro[from + 1]}}};
    s.steps.push_back(std::move(st));
  }
  return s;
}

}  // namespace

Algorithm directAlgorithm() {
  Algorithm a;
  a.name = "direct";
  a.summary = "direct: every block straight from its holder to the rank that needs it "
              "(gather and scatter in one step, pairwise-exchange all-to-all)";
  a.gather = directGather;
  a.scatter = directScatter;
  a.alltoall = directAlltoall;
  return a;
}

}  // namespace ringcoll::algo
