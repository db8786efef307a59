// The ring, step by step.
//
// World size p = 3, buffer split into chunks c0 c1 c2. Phase 1, share-reduce
// (ringReduceScatter, shift 1); at step s rank r sends chunk (r - s) mod p to r+1
// and receives chunk (r - s - 1) mod p from r-1, reducing it into its own copy:
//
//   step 0:  r0 sends c0 -> r1 (r1: c0 = a0+b0)   r1 sends c1 -> r2   r2 sends c2 -> r0
//   step 1:  r0 sends c2 -> r1 (r1: c2 = all)     r1 sends c0 -> r2   r2 sends c1 -> r0
//   after:   r0 owns c1, r1 owns c2, r2 owns c0   (rank r owns chunk (r + 1) mod p)
//
// Phase 2, share-only (ringAllGather, shift 1); at step s rank r sends the reduced
// chunk (r + 1 - s) mod p and receives chunk (r - s) mod p, which it copies in place:
//
//   step 2:  r0 sends c1 -> r1   r1 sends c2 -> r2   r2 sends c0 -> r0
//   step 3:  r0 sends c0 -> r1   r1 sends c1 -> r2   r2 sends c2 -> r0
//
// Reduce to a root: phase 1 with shift 0 (rank r owns chunk r), then one step in
// which every other rank sends its chunk to the root, which copies it in place
// (p = 3, root 0: step 2: r1 sends c1 -> r0, r2 sends c2 -> r0). Each rank sends
// about n of data in all, the root receives 2(p-1)/p of it.
//
// Every rank sends (p-1)/p of the buffer per phase, 2(p-1)/p in all: the bandwidth
// lower bound for all-reduce. Reduce-scatter and all-gather use the same phases with
// shift 0, so that rank r ends with (or starts from) chunk r.
//
// What a step sends at s+1 is what it reduced at s: the executor starts segment k
// of step s+1 as soon as segment k of step s is reduced (no barrier between steps),
// and on a copying transport it writes the reduction straight into the outgoing
// message (receive-reduce-forward).
//
// With Params::order (ranks of one host adjacent) "r+1" and "r-1" are the next
// and previous positions of the order, and the chunk of position j is chunk
// order[j]; the example above is the identity order.
#include "schedules/ring.h"

#include <algorithm>

#include "common/errors.h"
#include "schedules/registry.h"

namespace ringcoll::algo {

namespace {

// Positions of the ring and the chunk each one stands for.
struct Ring {
  explicit Ring(const Params& prm) : prm(prm), p(prm.size) {
    RC_ASSERT(p >= 1 && prm.rank >= 0 && prm.rank < p, "rank ", prm.rank, " of ", p);
    RC_ASSERT(prm.order.empty() || static_cast<int>(prm.order.size()) == p,
              "ring order of ", prm.order.size(), " ranks for ", p);
    me = prm.order.empty()
        ? prm.rank
        : static_cast<int>(std::find(prm.order.begin(), prm.order.end(), prm.rank) -
                           prm.order.begin());
    RC_ASSERT(me < p, "rank ", prm.rank, " missing from the ring order");
  }
  int rankAt(int pos) const {
    const int q = mod(pos, p);
    return prm.order.empty() ? q : prm.order[q];
  }
  Range chunkOf(int pos) const { return blockRange(prm.n, p, rankAt(pos)); }
  int next() const { return rankAt(me + 1); }
  int prev() const { return rankAt(me - 1); }

  const Params& prm;
  const int p;
  int me;  // this rank's position
};

void append(Schedule& to, Schedule&& from) {
  for (auto& st : from.steps) to.steps.push_back(std::move(st));
}
}  // namespace

Range split(Range r, int k, int i) {
  RC_ASSERT(k > 0 && i >= 0 && i < k, "part ", i, " of ", k);
  const size_t n = r.size();
  const size_t base = n / static_cast<size_t>(k);
  const size_t extra = n % static_cast<size_t>(k);
  const size_t ui = static_cast<size_t>(i);
  const size_t begin = r.begin + ui * base + std::min(ui, extra);
  return Range{begin, begin + base + (ui < extra ? 1 : 0)};
}

Schedule ringReduceScatter(const Params& prm, int shift) {
  const Ring ring(prm);
  Schedule out{"ring-reduce-scatter", {}, ring.chunkOf(ring.me + shift)};
  for (int s = 0; s < ring.p - 1; ++s) {
    Step st;
    st.transfers = {{Kind::kSend, ring.next(), ring.chunkOf(ring.me + shift - 1 - s)},
                    {Kind::kRecvReduce, ring.prev(), ring.chunkOf(ring.me + shift - 2 - s)}};
    out.steps.push_back(std::move(st));
  }
  // The last receive completes the owned chunk (with p = 1, there is nothing to
  // receive: an empty step says the rank's own data is the reduction).
  if (out.steps.empty()) out.steps.emplace_back();
  out.steps.back().reduced.push_back(out.result);
  return out;
}

Schedule ringAllGather(const Params& prm, int shift) {
  const Ring ring(prm);
  Schedule out{"ring-all-gather", {}, Range{0, prm.n}};
  for (int s = 0; s < ring.p - 1; ++s) {
    Step st;
    st.transfers = {{Kind::kSend, ring.next(), ring.chunkOf(ring.me + shift - s)},
                    {Kind::kRecvCopy, ring.prev(), ring.chunkOf(ring.me + shift - 1 - s)}};
    out.steps.push_back(std::move(st));
  }
  return out;
}

Schedule ringAllReduce(const Params& prm) {
  Schedule out = ringReduceScatter(prm, 1);
  out.name = "ring-all-reduce";
  out.result = Range{0, prm.n};
  append(out, ringAllGather(prm, 1));
  return out;
}

// The rank at distance d from the root receives the whole buffer at step d-1 and
// passes it on at step d; the executor cuts it into segments, so segment k moves on
// as soon as it has arrived and the chain is a pipeline.
Schedule chainBroadcast(const Params& prm) {
  const Ring ring(prm);
  int rootPos = 0;
  while (ring.rankAt(rootPos) != prm.root) ++rootPos;
  const int d = mod(ring.me - rootPos, ring.p);
  Schedule out{"chain-broadcast", std::vector<Step>(std::max(ring.p - 1, 0)),
               Range{0, prm.n}};
  const Range all{0, prm.n};
  if (d > 0) out.steps[d - 1].transfers.push_back({Kind::kRecvCopy, ring.prev(), all});
  if (d < ring.p - 1) out.steps[d].transfers.push_back({Kind::kSend, ring.next(), all});
  return out;
}

Schedule ringReduce(const Params& prm) {
  Schedule out = ringReduceScatter(prm, 0);
  out.name = "ring-reduce";
  Step gather;
  for (int q = 0; q < prm.size; ++q) {
    if (q == prm.root || (prm.rank != prm.root && q != prm.rank)) continue;
    const Range chunk = blockRange(prm.n, prm.size, q);
    if (prm.rank == prm.root) {
      gather.transfers.push_back({Kind::kRecvCopy, q, chunk});
    } else {
      gather.transfers.push_back({Kind::kSend, prm.root, chunk});
    }
  }
  if (prm.size > 1) out.steps.push_back(std::move(gather));
  out.result = prm.rank == prm.root ? Range{0, prm.n} : Range{};
  return out;
}

Algorithm ringAlgorithm() {
  Algorithm a;
  a.name = "ring";
  a.summary = "ring: reduce-scatter (share-reduce) then all-gather (share-only); chain "
              "broadcast; reduce-scatter then gather to the root";
  a.allreduce = ringAllReduce;
  a.reduceScatter = [](const Params& prm) { return ringReduceScatter(prm, 0); };
  a.allgather = [](const Params& prm) { return ringAllGather(prm, 0); };
  a.broadcast = chainBroadcast;
  a.reduce = ringReduce;
  return a;
}

}  // namespace ringcoll::algo
