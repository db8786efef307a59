// One-shot all-reduce: every rank sends its whole input to every peer and reduces
// all p inputs itself. One message hop, no block ever forwarded: for small buffers,
// where the hops matter more than the bytes.
//
// Every rank must end with the same bits, so every rank folds the inputs in rank
// order, ((x0 + x1) + x2) + ... (floating-point sums are not associative: a rank
// that summed in its own order would drift from its peers, and DDP's replicas with
// it). Messages: at step i < p-1 rank r sends its input to r-1-i and receives the
// input of q = r+1+i (mod p); every step is a permutation of the ranks, so each
// rank sends and receives (p-1) n elements in p-1 messages each way. Inputs reach
// rank r in the order r+1, ..., p-1, 0, ..., r-1, so:
//   * rank 0 reduces each arrival into place as it comes (x0 is already there);
//   * rank r >= 1 copies x0 over its input, adds x1 .. x(r-1) as they come, then
//     its own input, then the inputs that came too early (r+1 .. p-1, parked in
//     slots), in rank order, with local transfers (schedules/schedule.h).
// Every rank applies the op to the same operands in the same order (the
// accumulator first), so no property of the op is assumed: MAX with a NaN or
// signed zeros is not commutative, and the ranks still agree.
// Memory: a copy of the input ("keep", every send is from there, since the input
// is overwritten while it is still being sent) and p-1-r slots on rank r >= 1:
// scratch = (p - r) n elements on rank r >= 1, n on rank 0. Step by step, p = 3,
// inputs a (r0), b (r1), c (r2):
//
//   step 0:  r0 sends keep -> r2   r1 sends keep -> r0   r2 sends keep -> r1
//            r0: [0,n) = a+b       r1: slot = c          r2: [0,n) = a (copy)
//   step 1:  r0 sends keep -> r1   r1 sends keep -> r2   r2 sends keep -> r0
//            r0: [0,n) = a+b+c     r1: [0,n) = a (copy)  r2: [0,n) = a+b
//   step 2:  -                     r1: [0,n) += keep     r2: [0,n) += keep
//   step 3:  -                     r1: [0,n) += slot     -
//
// All three hold (a+b)+c, bit for bit. The keep is never written, so the executor posts all p-1
// sends at once: what is serialised is the reductions into [0, n). The scratch is
// memory of the tensors' device (engine/collectives.h).
#include <algorithm>

#include "common/errors.h"
#include "schedules/registry.h"

namespace ringcoll::algo {

namespace {

Schedule oneshotAllReduce(const Params& prm) {
  const int p = prm.size, r = prm.rank;
  RC_ASSERT(p >= 1 && r >= 0 && r < p, "rank ", r, " of ", p);
  const size_t n = prm.n;
  const Range all{0, n}, keep{n, 2 * n};
  const int slots = r == 0 ? 0 : p - 1 - r;
  auto slot = [n](int k) { return Range{(2 + k) * n, (3 + k) * n}; };
  Schedule s{"oneshot-all-reduce", {}, all};
  if (p == 1) {
    s.steps.resize(1);  // an empty step: own data is all
    s.steps.back().reduced.push_back(all);
    return s;
  }
  s.scratch = (1 + static_cast<size_t>(slots)) * n;
  for (int i = 0; i < p - 1; ++i) {
    const int q = mod(r + 1 + i, p);
    Step st;
    st.transfers.push_back({Kind::kSend, mod(r - 1 - i, p), keep});
    if (q > r) {
      st.transfers.push_back(r == 0 ? Transfer{Kind::kRecvReduce, q, all}
                                    : Transfer{Kind::kRecvCopy, q, slot(q - r - 1)});
    } else if (q == 0) {
      st.transfers.push_back({Kind::kRecvCopy, q, all});
    } else {
      st.transfers.push_back({Kind::kRecvReduce, q, all});
    }
    s.steps.push_back(std::move(st));
  }
  // Local steps (peer r): the own input after x0 .. x(r-1), then the parked ones.
  auto local = [&](Range from) {
    Step st;
    st.transfers = {{Kind::kSend, r, from}, {Kind::kRecvReduce, r, all}};
    s.steps.push_back(std::move(st));
  };
  if (r >= 1) local(keep);
  for (int k = 0; k < slots; ++k) local(slot(k));
  s.steps.back().reduced.push_back(all);
  return s;
}

}  // namespace

Algorithm oneshotAlgorithm() {
  Algorithm a;
  a.name = "oneshot";
  a.summary = "one-shot: every rank sends its whole input to every peer and reduces all "
              "p inputs itself, in rank order (all-reduce, barrier)";
  a.allreduce = oneshotAllReduce;
  return a;
}

}  // namespace ringcoll::algo
