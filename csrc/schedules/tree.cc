// Binomial trees: broadcast, reduce to a root, and all-reduce as the two, step by
// step.
//
// Ranks are relabelled relative to the root, rel = (rank - root) mod p, and every
// transfer moves the whole buffer. Reduce, p = 6, root 0: at step k (distance
// d = 2^k) every rank whose rel is an odd multiple of d sends what it holds to rel - d,
// which reduces it in:
//
//   step 0 (d = 1): r1 -> r0, r3 -> r2, r5 -> r4
//   step 1 (d = 2): r2 -> r0                     (r2 holds r2+r3)
//   step 2 (d = 4): r4 -> r0                     (r4 holds r4+r5; r0 now holds all)
//
// Broadcast is the mirror: at step k every rank with rel < d that holds the data
// sends it to rel + d:
//
//   step 0 (d = 1): r0 -> r1
//   step 1 (d = 2): r0 -> r2, r1 -> r3
//   step 2 (d = 4): r0 -> r4, r1 -> r5
//
// ceil(log2 p) steps each; the root sends (broadcast) or receives (reduce) the
// buffer ceil(log2 p) times, the others at most that. All-reduce is reduce to rank 0
// then broadcast from it: 2 ceil(log2 p) steps, each moving the whole buffer, for
// small buffers, where the number of steps matters more than the bytes.
// The executor cuts each transfer into segments and moves segment j on as soon as
// it has arrived (or been reduced), so the tree is also a pipeline.
//
// The reduction happens on one path into the root and the result is copied
// everywhere else: all ranks end with the same bits whatever the op.
#include <algorithm>

#include "common/errors.h"
#include "schedules/registry.h"

namespace ringcoll::algo {

namespace {

struct Tree {
  Tree(const Params& prm, int root) : p(prm.size), root(root) {
    RC_ASSERT(p >= 1 && prm.rank >= 0 && prm.rank < p, "rank ", prm.rank, " of ", p);
    RC_ASSERT(root >= 0 && root < p, "root ", root, " of ", p);
    rel = mod(prm.rank - root, p);
    while ((1 << levels) < p) ++levels;
  }
  int rankOf(int r) const { return (r + root) % p; }

  int p, root, rel;
  int levels = 0;  // ceil(log2 p): steps per tree
};

// Steps [at, at + levels) of s: the whole buffer flows towards the root.
void reduceUp(Schedule& s, int at, const Tree& t, Range all) {
  for (int k = 0; k < t.levels; ++k) {
    const int d = 1 << k;
    auto& st = s.steps[static_cast<size_t>(at + k)];
    if (t.rel % (2 * d) == 0 && t.rel + d < t.p) {
      st.transfers.push_back({Kind::kRecvReduce, t.rankOf(t.rel + d), all});
    } else if (t.rel % (2 * d) == d) {
      st.transfers.push_back({Kind::kSend, t.rankOf(t.rel - d), all});
    }
  }
  // The root holds everything after the last step (with p = 1, an empty step says
  // its own data is the reduction).
  if (t.rel == 0) {
    s.steps[static_cast<size_t>(at + std::max(t.levels - 1, 0))].reduced.push_back(all);
  }
}

// Steps [at, at + levels) of s: the whole buffer flows out from the root.
void broadcastDown(Schedule& s, int at, const Tree& t, Range all) {
  for (int k = 0; k < t.levels; ++k) {
    const int d = 1 << k;
    auto& st = s.steps[static_cast<size_t>(at + k)];
    if (t.rel < d && t.rel + d < t.p) {
      st.transfers.push_back({Kind::kSend, t.rankOf(t.rel + d), all});
    } else if (t.rel >= d && t.rel < 2 * d) {
      st.transfers.push_back({Kind::kRecvCopy, t.rankOf(t.rel - d), all});
    }
  }
}

Schedule steps(const char* name, int n, Range result) {
  return Schedule{name, std::vector<Step>(static_cast<size_t>(n)), result};
}

Schedule treeReduce(const Params& prm) {
  const Tree t(prm, prm.root);
  Schedule s = steps("tree-reduce", std::max(t.levels, 1),
                     t.rel == 0 ? Range{0, prm.n} : Range{});
  reduceUp(s, 0, t, Range{0, prm.n});
  return s;
}

Schedule treeBroadcast(const Params& prm) {
  const Tree t(prm, prm.root);
  Schedule s = steps("tree-broadcast", t.levels, Range{0, prm.n});
  broadcastDown(s, 0, t, Range{0, prm.n});
  return s;
}

Schedule treeAllReduce(const Params& prm) {
  const Tree t(prm, 0);
  const Range all{0, prm.n};
  Schedule s = steps("tree-all-reduce", std::max(2 * t.levels, 1), all);
  reduceUp(s, 0, t, all);
  broadcastDown(s, t.levels, t, all);
  return s;
}

}  // namespace

Algorithm treeAlgorithm() {
  Algorithm a;
  a.name = "tree";
  a.summary = "binomial tree: broadcast, reduce to the root, all-reduce as reduce to "
              "rank 0 then broadcast";
  a.allreduce = treeAllReduce;
  a.broadcast = treeBroadcast;
  a.reduce = treeReduce;
  return a;
}

}  // namespace ringcoll::algo
