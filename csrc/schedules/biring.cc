// The bidirectional ring all-reduce, step by step: the ring of ring.cc run twice at
// once, on the two halves of every chunk, one clockwise and one counter-clockwise,
// so that both directions of every link carry data in every step.
//
// World size p = 3, buffer cut into chunks c0 c1 c2, each cut in halves: c0 = L0 R0,
// and so on. The left halves go clockwise (r -> r+1) as on the ring; the right
// halves go counter-clockwise (r -> r-1), mirrored. Phase 1, share-reduce: at step
// s rank r sends L(r - s) to r+1 and R(r + s) to r-1, and reduces L(r - s - 1)
// from r-1 and R(r + s + 1) from r+1 into its own copy:
//
//   step 0:  r0 sends L0 -> r1, R0 -> r2   r1 sends L1 -> r2, R1 -> r0
//            r2 sends L2 -> r0, R2 -> r1   (r1: L0 = a+b, R2 = b+c; and so on)
//   step 1:  r0 sends L2 -> r1, R1 -> r2   r1 sends L0 -> r2, R2 -> r0
//            r2 sends L1 -> r0, R0 -> r1
//   after:   rank r owns L(r + 1) and R(r - 1) fully reduced:
//            r0 owns L1 R2, r1 owns L2 R0, r2 owns L0 R1
//
// Phase 2, share-only: at step s rank r sends L(r + 1 - s) to r+1 and R(r - 1 + s)
// to r-1, and copies in L(r - s) from r-1 and R(r + s) from r+1:
//
//   step 2:  r0 sends L1 -> r1, R2 -> r2   r1 sends L2 -> r2, R0 -> r0
//            r2 sends L0 -> r0, R1 -> r1
//   step 3:  r0 sends L0 -> r1, R0 -> r2   r1 sends L1 -> r2, R1 -> r0
//            r2 sends L2 -> r0, R2 -> r1   (every rank holds every half)
//
// The two rings never touch the same elements (left and right halves are
// disjoint), so a step writes each range once and never sends what it writes.
// Each rank sends 2(p-1)/p of the buffer in all, as on the ring, in 2(p-1) steps,
// but every step is two messages of half the size, one each way: on links that
// carry both directions at once (full duplex) a step takes about half as long for
// large buffers, and twice the messages cost more for small ones. With p = 2 both
// halves go to the one peer, in the order left then right on both sides, which is
// how the executor pairs them.
//
// With Params::order (ranks of one host adjacent) "r+1" and "r-1" are the next and
// previous positions of the order, and the chunk of position j is chunk order[j].
// Every half is reduced on one rank and copied to the others: all ranks end with
// the same bits whatever the op.
#include <algorithm>

#include "common/errors.h"
#include "schedules/registry.h"

namespace ringcoll::algo {

namespace {

// Ring positions, and the halves of the chunk each position stands for.
struct BiRing {
  explicit BiRing(const Params& prm) : prm(prm), p(prm.size) {
    RC_ASSERT(p >= 1 && prm.rank >= 0 && prm.rank < p, "rank ", prm.rank, " of ", p);
    RC_ASSERT(prm.order.empty() || static_cast<int>(prm.order.size()) == p,
              "ring order of ", prm.order.size(), " ranks for ", p);
    const auto it = std::find(prm.order.begin(), prm.order.end(), prm.rank);
    me = prm.order.empty() ? prm.rank : static_cast<int>(it - prm.order.begin());
    RC_ASSERT(me < p, "rank ", prm.rank, " missing from the ring order");
  }
  int rankAt(int pos) const { return prm.order.empty() ? mod(pos, p) : prm.order[mod(pos, p)]; }
  Range left(int pos) const { return split(blockRange(prm.n, p, rankAt(pos)), 2, 0); }
  Range right(int pos) const { return split(blockRange(prm.n, p, rankAt(pos)), 2, 1); }

  const Params& prm;
  const int p;
  int me;  // this rank's position
};

Schedule biringAllReduce(const Params& prm) {
  const BiRing ring(prm);
  const int p = ring.p, me = ring.me;
  const int next = ring.rankAt(me + 1), prev = ring.rankAt(me - 1);
  Schedule out{"biring-all-reduce", {}, Range{0, prm.n}};
  // Phase 1: share-reduce, both directions. Sends first, left before right, on
  // both sides: with p = 2 next == prev and the executor pairs the k-th send to a
  // peer with the peer's k-th receive from this rank.
  for (int s = 0; s < p - 1; ++s) {
    Step st;
    st.transfers = {{Kind::kSend, next, ring.left(me - s)},
                    {Kind::kSend, prev, ring.right(me + s)},
                    {Kind::kRecvReduce, prev, ring.left(me - s - 1)},
                    {Kind::kRecvReduce, next, ring.right(me + s + 1)}};
    out.steps.push_back(std::move(st));
  }
  // The last receives complete the owned halves (p = 1: an empty step, own data
  // is all).
  if (out.steps.empty()) out.steps.emplace_back();
  out.steps.back().reduced = {ring.left(me + 1), ring.right(me - 1)};
  // Phase 2: share-only, both directions.
  for (int s = 0; s < p - 1; ++s) {
    Step st;
    st.transfers = {{Kind::kSend, next, ring.left(me + 1 - s)},
                    {Kind::kSend, prev, ring.right(me - 1 + s)},
                    {Kind::kRecvCopy, prev, ring.left(me - s)},
                    {Kind::kRecvCopy, next, ring.right(me + s)}};
    out.steps.push_back(std::move(st));
  }
  return out;
}

}  // namespace

Algorithm biringAlgorithm() {
  Algorithm a;
  a.name = "biring";
  a.summary = "bidirectional ring: half of every chunk goes clockwise, half "
              "counter-clockwise (all-reduce, barrier)";
  a.allreduce = biringAllReduce;
  return a;
}

}  // namespace ringcoll::algo
