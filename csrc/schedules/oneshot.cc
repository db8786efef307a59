// One-shot all-reduce: every rank sends its whole input to every peer and reduces
// all p inputs itself. One message hop, no block ever forwarded: for small buffers,
// where the hops matter more than the bytes.
//
// A rank must keep sending its input after it has begun reducing the peers' into
// place, so its schedule asks for n elements of scratch (schedules/schedule.h): [n, 2n)
// holds a copy of the input, taken before step 0, and every send is from there.
// Step by step, p = 3, inputs a (r0), b (r1), c (r2), buffer [0, n) and keep
// [n, 2n) on every rank:
//
//   before:  r0 [0,n) = a, keep = a;  r1 [0,n) = b, keep = b;  r2 [0,n) = c, keep = c
//   step 0:  r0 sends keep -> r1   r1 sends keep -> r2   r2 sends keep -> r0
//            r1: [0,n) = b+a       r2: [0,n) = c+b       r0: [0,n) = a+c
//   step 1:  r0 sends keep -> r2   r1 sends keep -> r0   r2 sends keep -> r1
//            r2: [0,n) = c+b+a     r0: [0,n) = a+c+b     r1: [0,n) = b+a+c
//
// In general at step s < p-1 rank r sends its input to r+1+s and reduces the input
// of r-1-s (mod p) into [0, n): every step is a permutation of the ranks. The keep
// is never written, so the executor posts all p-1 sends at once: every input is
// one hop from every rank, and what is serialised is the p-1 reductions into
// [0, n) (a step writes a range once). Each rank sends and receives (p-1) n
// elements: p/2 times the ring's traffic, in p-1 messages each way instead of
// the ring's 2(p-1) hops.
//
// Each rank reduces in its own order (rank r: its input, then r-1, r-2, ...), so
// for floating-point SUM/AVG/PREMUL_SUM with p >= 3 the ranks may differ in the
// last bits (every other algorithm reduces each block on one rank and copies it);
// integer ops, MIN/MAX and p <= 2 agree exactly. The scratch is memory of the
// tensors' device (engine/collectives.h).
#include <algorithm>

#include "common/errors.h"
#include "schedules/registry.h"

namespace ringcoll::algo {

namespace {

Schedule oneshotAllReduce(const Params& prm) {
  const int p = prm.size, r = prm.rank;
  RC_ASSERT(p >= 1 && r >= 0 && r < p, "rank ", r, " of ", p);
  const Range all{0, prm.n}, keep{prm.n, 2 * prm.n};
  Schedule s{"oneshot-all-reduce", std::vector<Step>(static_cast<size_t>(std::max(p - 1, 1))),
             all};
  s.scratch = p > 1 ? prm.n : 0;
  for (int i = 0; i < p - 1; ++i) {
    s.steps[static_cast<size_t>(i)].transfers = {{Kind::kSend, mod(r + 1 + i, p), keep},
                                                 {Kind::kRecvReduce, mod(r - 1 - i, p), all}};
  }
  // Complete after the last receive (p = 1: an empty step, own data is all).
  s.steps.back().reduced.push_back(all);
  return s;
}

}  // namespace

Algorithm oneshotAlgorithm() {
  Algorithm a;
  a.name = "oneshot";
  a.summary = "one-shot: every rank sends its whole input to every peer and reduces all "
              "p inputs itself (all-reduce, barrier)";
  a.allreduce = oneshotAllReduce;
  return a;
}

}  // namespace ringcoll::algo
