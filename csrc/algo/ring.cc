// The ring, step by step.
//
// World size p = 3, buffer split into chunks c0 c1 c2. Phase 1, share-reduce
// (RingReduceScatter{1}); at step s rank r sends chunk (r - s) mod p to r+1 and
// receives chunk (r - s - 1) mod p from r-1, reducing it into its own copy:
//
//   step 0:  r0 sends c0 -> r1 (r1: c0 = a0+b0)   r1 sends c1 -> r2   r2 sends c2 -> r0
//   step 1:  r0 sends c2 -> r1 (r1: c2 = all)     r1 sends c0 -> r2   r2 sends c1 -> r0
//   after:   r0 owns c1, r1 owns c2, r2 owns c0   (rank r owns chunk (r + 1) mod p)
//
// Phase 2, share-only (RingAllGather{1}); at step s rank r sends the reduced chunk
// (r + 1 - s) mod p and receives chunk (r - s) mod p, which it copies in place:
//
//   step 0:  r0 sends c1 -> r1   r1 sends c2 -> r2   r2 sends c0 -> r0
//   step 1:  r0 sends c0 -> r1   r1 sends c1 -> r2   r2 sends c2 -> r0
//
// Every rank sends (p-1)/p of the buffer per phase, 2(p-1)/p in all: the bandwidth
// lower bound for all-reduce. Reduce-scatter and all-gather use the same phases with
// shift 0, so that rank r ends with (or starts from) chunk r.
#include "algo/ring.h"

#include <algorithm>

#include "common/errors.h"

namespace ringcoll::algo {

namespace {
int mod(int a, int p) { return ((a % p) + p) % p; }
}  // namespace

Range blockRange(size_t n, int k, int i) {
  RC_ASSERT(k > 0 && i >= 0 && i < k, "block ", i, " of ", k);
  const size_t base = n / static_cast<size_t>(k);
  const size_t extra = n % static_cast<size_t>(k);
  const size_t ui = static_cast<size_t>(i);
  const size_t begin = ui * base + std::min(ui, extra);
  return Range{begin, begin + base + (ui < extra ? 1 : 0)};
}

std::string RingReduceScatter::name() const {
  return RC_STR("ring-reduce-scatter(shift=", shift_, ")");
}

Step RingReduceScatter::step(int rank, int p, int, int s) const {
  Step st;
  st.send = {mod(rank + 1, p), mod(rank + shift_ - 1 - s, p)};
  st.recv = {mod(rank - 1, p), mod(rank + shift_ - 2 - s, p)};
  st.action = Action::kReduce;
  return st;
}

int RingReduceScatter::ownedBlockAfter(int rank, int p) const {
  return mod(rank + shift_, p);
}

std::string RingAllGather::name() const {
  return RC_STR("ring-all-gather(shift=", shift_, ")");
}

Step RingAllGather::step(int rank, int p, int, int s) const {
  Step st;
  st.send = {mod(rank + 1, p), mod(rank + shift_ - s, p)};
  st.recv = {mod(rank - 1, p), mod(rank + shift_ - 1 - s, p)};
  st.action = Action::kCopy;
  return st;
}

std::string ChainBroadcast::name() const {
  return RC_STR("chain-broadcast(root=", root_, ")");
}

int ChainBroadcast::numBlocks(int, int pipelineBlocks) const {
  return std::max(1, pipelineBlocks);
}

// Block j leaves the root at step j and reaches the rank at distance d from the
// root at step j + d - 1, so the last rank (d = p-1) has all B blocks after
// B + p - 2 steps.
int ChainBroadcast::numSteps(int p, int blocks) const {
  return p <= 1 ? 0 : blocks + p - 2;
}

Step ChainBroadcast::step(int rank, int p, int blocks, int s) const {
  const int d = mod(rank - root_, p);  // distance from the root along the ring
  Step st;
  st.action = Action::kCopy;
  const int sendBlock = s - d;  // root: block s; others forward what they got last step
  if (d < p - 1 && sendBlock >= 0 && sendBlock < blocks) {
    st.send = {mod(rank + 1, p), sendBlock};
  }
  const int recvBlock = s - d + 1;
  if (d > 0 && recvBlock >= 0 && recvBlock < blocks) {
    st.recv = {mod(rank - 1, p), recvBlock};
  }
  return st;
}

}  // namespace ringcoll::algo
