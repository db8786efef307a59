// Recursive halving and doubling (Rabenseifner's all-reduce), step by step.
//
// p = 4, buffer cut into quarters q0..q3. Reduce-scatter by recursive halving: at
// each step a rank splits what it is responsible for in two, sends one half to the
// partner at distance d (who keeps that half) and reduces the partner's copy of the
// half it keeps:
//
//   step 0 (d = 2): r0 <-> r2 and r1 <-> r3; r0, r1 keep q0q1, r2, r3 keep q2q3:
//                   r0 sends q2q3 -> r2 and reduces q0q1 from r2 (likewise the others)
//   step 1 (d = 1): r0 <-> r1 and r2 <-> r3; r0 keeps q0, r1 q1, r2 q2, r3 q3
//   after:          rank r holds quarter r reduced (the bits of r, high to low,
//                   chose its halves)
//
// All-gather by recursive doubling, the mirror: at each step a rank sends all it
// holds to the partner at distance d and copies in what the partner holds:
//
//   step 2 (d = 1): r0 <-> r1: both hold q0q1;  r2 <-> r3: both hold q2q3
//   step 3 (d = 2): r0 <-> r2, r1 <-> r3: all hold q0q1q2q3
//
// log2(p) steps per phase; each rank sends (p-1)/p of the buffer per phase, as on
// the ring, but in log2(p) messages instead of p-1.
//
// Any p, as MPICH does it: p = 2^k + rem. Ranks 0..2rem-1 pair up (0,1), (2,3), ...
// and the even rank of each pair folds out: it first sends its whole buffer to its
// odd partner, who reduces it in, and gets the result back last. The 2^k ranks left
// take virtual ranks 0..2^k-1 (the odd ranks below 2rem, then the ranks from 2rem
// on, in order) and run the above. p = 3 (rem = 1; r1 is virtual 0, r2 virtual 1):
//
//   step 0: r0 sends all -> r1, r1 reduces it         (fold in)
//   step 1: r1 <-> r2 halving: r1 keeps the first half, r2 the second
//   step 2: r1 <-> r2 doubling: both hold everything
//   step 3: r1 sends all -> r0, r0 copies it          (fold out)
//
// Reduce-scatter, where rank r must end with block r of p: the same halving over
// groups of blocks, the group of a virtual rank being the blocks of the ranks
// folded into it (a pair's two, or one) in rank order, so that halving leaves each
// virtual rank its group; a partner then sends its extra rank that rank's block.
// All-gather mirrors it: an extra rank sends its block to its partner, doubling
// runs over the groups, and the partner sends the extra rank every other block.
// With rem > 0 the pairs' groups are twice as large: reduce-scatter and all-gather
// are unbalanced there (all-reduce cuts its halves from 2^k equal blocks instead).
//
// Every block is reduced on one rank and copied everywhere else, so all ranks end
// with the same bits whatever the op.
#include <functional>
#include <vector>

#include "common/errors.h"
#include "schedules/registry.h"

namespace ringcoll::algo {

namespace {

// Who folds out, and the virtual ranks of the others.
struct Fold {
  explicit Fold(const Params& prm) : p(prm.size), rank(prm.rank) {
    RC_ASSERT(p >= 1 && rank >= 0 && rank < p, "rank ", rank, " of ", p);
    while (pof2 * 2 <= p) pof2 *= 2;
    while ((1 << levels) < pof2) ++levels;
    rem = p - pof2;
    v = rank < 2 * rem ? (rank % 2 ? rank / 2 : -1) : rank - rem;
  }
  int real(int u) const { return u < rem ? 2 * u + 1 : u + rem; }
  bool extra() const { return v < 0; }            // folds out
  bool paired() const { return rank < 2 * rem; }  // extra, or the partner of one
  int partner() const { return rank ^ 1; }
  int first() const { return rem > 0 ? 1 : 0; }  // index of the first halving step

  int p, rank;
  int pof2 = 1;    // 2^k
  int levels = 0;  // k
  int rem = 0;
  int v = -1;      // virtual rank; -1 for an extra rank
};

// The elements of the groups [lo, hi) of virtual ranks.
using Groups = std::function<Range(int lo, int hi)>;

// 2^k equal blocks: all-reduce's halves.
Groups equalGroups(size_t n, int pof2) {
  return [n, pof2](int lo, int hi) {
    return Range{blockRange(n, pof2, lo).begin, blockRange(n, pof2, hi - 1).end};
  };
}

// The p blocks of the contract, virtual rank u owning the blocks of the ranks
// folded into it: reduce-scatter's and all-gather's.
Groups rankGroups(size_t n, const Fold& f) {
  const int p = f.p, rem = f.rem;
  return [n, p, rem](int lo, int hi) {
    auto firstBlock = [rem](int u) { return u < rem ? 2 * u : u + rem; };
    auto begin = [n, p](int block) { return block == p ? n : blockRange(n, p, block).begin; };
    return Range{begin(firstBlock(lo)), begin(firstBlock(hi))};
  };
}

// nsteps empty steps, to be filled; an extra rank's stay empty while the others
// halve and double, so that every rank numbers the steps alike.
Schedule withSteps(const char* name, int nsteps, Range result) {
  return Schedule{name, std::vector<Step>(static_cast<size_t>(nsteps)), result};
}

// Recursive halving on steps [at, at + k): virtual rank v ends with groups [v, v+1)
// reduced, and marks them on the last of those steps.
void halve(Schedule& s, int at, const Fold& f, const Groups& groups) {
  if (f.extra()) return;
  int lo = 0, hi = f.pof2;
  for (int mask = f.pof2 / 2, i = 0; mask >= 1; mask /= 2, ++i) {
    const int mid = lo + mask;
    const bool low = (f.v & mask) == 0;
    const Range give = low ? groups(mid, hi) : groups(lo, mid);
    if (low) hi = mid; else lo = mid;
    auto& st = s.steps[static_cast<size_t>(at + i)];
    st.transfers = {{Kind::kSend, f.real(f.v ^ mask), give},
                    {Kind::kRecvReduce, f.real(f.v ^ mask), groups(lo, hi)}};
  }
  s.steps[static_cast<size_t>(at + f.levels - 1)].reduced.push_back(groups(f.v, f.v + 1));
}

// Recursive doubling on steps [at, at + k): virtual rank v starts with groups
// [v, v+1) and ends with all of them.
void dbl(Schedule& s, int at, const Fold& f, const Groups& groups) {
  if (f.extra()) return;
  int lo = f.v, hi = f.v + 1;
  for (int mask = 1, i = 0; mask < f.pof2; mask *= 2, ++i) {
    const bool low = (f.v & mask) == 0;
    const int plo = low ? hi : lo - mask, phi = low ? hi + mask : lo;
    auto& st = s.steps[static_cast<size_t>(at + i)];
    st.transfers = {{Kind::kSend, f.real(f.v ^ mask), groups(lo, hi)},
                    {Kind::kRecvCopy, f.real(f.v ^ mask), groups(plo, phi)}};
    if (low) hi = phi; else lo = plo;
  }
}

// The extra rank's whole buffer goes to its partner, which reduces it in.
void foldIn(Step& st, const Fold& f, Range all) {
  if (!f.paired()) return;
  st.transfers.push_back({f.extra() ? Kind::kSend : Kind::kRecvReduce, f.partner(), all});
}

Schedule rhdAllReduce(const Params& prm) {
  const Fold f(prm);
  const Range all{0, prm.n};
  if (f.p == 1) {  // nothing to receive: the rank's own data is the reduction
    Schedule s = withSteps("rhd-all-reduce", 1, all);
    s.steps[0].reduced.push_back(all);
    return s;
  }
  const int at = f.first();
  Schedule s = withSteps("rhd-all-reduce", 2 * at + 2 * f.levels, all);
  const Groups groups = equalGroups(prm.n, f.pof2);
  if (at) foldIn(s.steps[0], f, all);
  halve(s, at, f, groups);
  dbl(s, at + f.levels, f, groups);
  if (at && f.paired()) {
    s.steps.back().transfers.push_back(
        {f.extra() ? Kind::kRecvCopy : Kind::kSend, f.partner(), all});
  }
  return s;
}

Schedule rhdReduceScatter(const Params& prm) {
  const Fold f(prm);
  const Range mine = blockRange(prm.n, f.p, f.rank);
  if (f.p == 1) {
    Schedule s = withSteps("rhd-reduce-scatter", 1, mine);
    s.steps[0].reduced.push_back(mine);
    return s;
  }
  const int at = f.first();
  Schedule s = withSteps("rhd-reduce-scatter", 2 * at + f.levels, mine);
  if (at) foldIn(s.steps[0], f, Range{0, prm.n});
  halve(s, at, f, rankGroups(prm.n, f));
  // The partner holds the pair's two blocks reduced; the extra rank's goes home.
  if (at && f.paired()) {
    s.steps.back().transfers.push_back(
        {f.extra() ? Kind::kRecvCopy : Kind::kSend, f.partner(),
         blockRange(prm.n, f.p, f.extra() ? f.rank : f.partner())});
  }
  return s;
}

Schedule rhdAllGather(const Params& prm) {
  const Fold f(prm);
  const Range all{0, prm.n};
  const int at = f.first();
  Schedule s = withSteps("rhd-all-gather", 2 * at + f.levels, all);
  if (at && f.paired()) {  // the extra rank's block joins its partner's group
    const Range extraBlock = blockRange(prm.n, f.p, f.extra() ? f.rank : f.partner());
    s.steps.front().transfers.push_back(
        {f.extra() ? Kind::kSend : Kind::kRecvCopy, f.partner(), extraBlock});
    // ...and the extra rank gets every other block back at the end.
    for (const Range r : {Range{0, extraBlock.begin}, Range{extraBlock.end, prm.n}}) {
      if (r.empty()) continue;
      s.steps.back().transfers.push_back(
          {f.extra() ? Kind::kRecvCopy : Kind::kSend, f.partner(), r});
    }
  }
  dbl(s, at, f, rankGroups(prm.n, f));
  return s;
}

}  // namespace

Algorithm rhdAlgorithm() {
  Algorithm a;
  a.name = "rhd";
  a.summary = "recursive halving reduce-scatter, recursive doubling all-gather "
              "(Rabenseifner); any p, the ranks beyond a power of two folded in";
  a.allreduce = rhdAllReduce;
  a.reduceScatter = rhdReduceScatter;
  a.allgather = rhdAllGather;
  return a;
}

}  // namespace ringcoll::algo
