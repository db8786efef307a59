// Schedules: pure functions that say, for one rank of a collective, which element
// ranges it sends to and receives from which peers at every step, and whether a
// received range is copied or reduced into place.
//
// Vocabulary (fixed here, used everywhere):
//   buffer   - the n elements a collective works on in place, on every rank;
//   range    - a half-open element range [begin, end) of the buffer;
//   block    - one of k near-equal parts of a range (split() below). Parts of parts
//              nest: the quarters of [0, n) are the halves of its halves, which
//              recursive halving needs and the ring's chunks (k = p) use;
//   transfer - one send, or one receive that is copied or reduced into place, of
//              one range with one peer (or with the rank itself: local, below);
//   step     - the transfers a rank does in one round, with any number of peers;
//   segment  - the executor's slice of a transfer, at most RINGCOLL_CHUNK_BYTES,
//              so staging memory stays bounded. Schedules never see segments.
//
// Semantics, which the executor implements and ringcoll.check proves for every
// schedule (tests/test_schedule.py, world sizes 1..64):
//   * a send at step s carries the range as it is after all of this rank's steps
//     before s; a receive at step s lands after them. Within one step no range is
//     written twice and no range is both sent and written, so the order of a
//     step's transfers does not change what they carry;
//   * the k-th send from a to b in step s pairs with the k-th receive on b from a
//     in step s, and the two ranges have the same size (the executor cuts both
//     into the same segments and the transport keeps them in order);
//   * `reduced` marks where a rank holds the complete reduction of a range: a
//     collective that finishes a reduction (AVG's division by p) does it there,
//     once per element, before the range is sent on;
//   * `result` is the range that holds the collective's output on this rank;
//   * a transfer whose peer is the rank itself is local: the k-th such send of a
//     step pairs with the k-th such receive of the same step, and the receive
//     copies or reduces the sent range into its own (the same size, not
//     overlapping) without a message. It lets a schedule fix the order in which a
//     rank folds its own input in with the ones it received (one-shot);
//   * a receive-reduce folds the incoming range into the one in place in a fixed
//     operand order, which every rank of an all-reduce must keep alike (the same
//     bits: max(+0, -0) and NaN payloads depend on it): kRecvReduce computes
//     buffer = buffer OP incoming, kRecvReduceFirst buffer = incoming OP buffer. So
//     both partners of an exchange can compute lower OP upper (recursive doubling);
//   * `scratch` > 0 extends the buffer past n: elements [n, n + scratch) are memory
//     the job provides; unless `scratchCopy` is false (scratch starts empty), the
//     first min(scratch, n) of them hold a copy of [0, n) taken before step 0 (once
//     the ranks agreed, after PREMUL_SUM's scaling); the rest are written before
//     they are read. An algorithm that must still send its input after it began
//     reducing into it (one-shot) sends from the copy. Transfers and `reduced` may
//     address [0, n + scratch), each range within [0, n) or within the scratch;
//     `result` lies in [0, n) (ringcoll.schedules moves a result that a Python
//     algorithm leaves in its scratch with a local copy step at the end).
//
// A schedule knows no tensors, devices, streams or sockets, so it can be checked
// and simulated with none. A new algorithm is a new file producing these plus one
// line in registry.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ringcoll::algo {

struct Range {
  size_t begin = 0;
  size_t end = 0;
  size_t size() const { return end - begin; }
  bool empty() const { return end == begin; }
  bool overlaps(const Range& o) const { return begin < o.end && o.begin < end; }
  bool operator==(const Range& o) const { return begin == o.begin && end == o.end; }
};

// Part i of r cut into k near-equal parts: the first r.size() % k parts have one
// element more; parts may be empty when r.size() < k. Precondition: 0 <= i < k.
Range split(Range r, int k, int i);

// Block i of [0, n) cut into k blocks.
inline Range blockRange(size_t n, int k, int i) { return split(Range{0, n}, k, i); }

// a mod p in [0, p) for any a (C++'s % keeps the sign of a): the rank at ring
// distance a from rank 0. Precondition: p > 0.
inline int mod(int a, int p) { return ((a % p) + p) % p; }

enum class Kind : uint8_t {
  kSend,        // send the range to peer
  kRecvCopy,    // receive the range from peer and store it in place
  kRecvReduce,  // receive the range from peer and reduce it into place: buffer OP incoming
  kRecvReduceFirst,  // the same with the incoming operand first: incoming OP buffer
};
inline bool reduces(Kind k) { return k == Kind::kRecvReduce || k == Kind::kRecvReduceFirst; }

struct Transfer {
  Kind kind = Kind::kSend;
  int peer = -1;
  Range range;
  // Written out, not defaulted: torch <= 2.11 builds extensions as C++17.
  bool operator==(const Transfer& o) const {
    return kind == o.kind && peer == o.peer && range == o.range;
  }
};

struct Step {
  std::vector<Transfer> transfers;
  std::vector<Range> reduced;  // complete on this rank once this step is done
  bool operator==(const Step& o) const {
    return transfers == o.transfers && reduced == o.reduced;
  }
};

// What a schedule is computed for.
struct Params {
  int rank = 0;
  int size = 1;
  size_t n = 0;   // elements of the buffer
  int root = 0;   // broadcast, reduce
  // Ring order, position -> rank, with the ranks of one host next to each other
  // so that a ring crosses each host boundary once. Empty means 0, 1, ..., p-1.
  std::vector<int> order;
  // All-to-all: the elements this rank sends to and receives from each rank (p
  // entries each; n is their total). Empty for the other collectives.
  std::vector<size_t> sendCounts, recvCounts;
  // The host of each rank (p entries): ranks with the same number share memory;
  // hosts are numbered 0, 1, ... in ring order. Empty means one host. Only
  // algorithms that care where ranks live read it (twolevel).
  std::vector<int> hosts;

  bool operator==(const Params& o) const {
    return rank == o.rank && size == o.size && n == o.n && root == o.root &&
           order == o.order && sendCounts == o.sendCounts && recvCounts == o.recvCounts &&
           hosts == o.hosts;
  }
};

struct Schedule {
  std::string name;
  std::vector<Step> steps;
  Range result;
  size_t scratch = 0;  // elements past n, the first n of them a copy of [0, n) (above)
  bool scratchCopy = true;  // false: the scratch starts empty (no copy is made)
  // 0, or a hash of every rank's schedule of this call (Python algorithms: their
  // definition may differ between processes, where a built-in's cannot). The
  // fingerprint carries it (engine/fingerprint.h), so ranks whose definitions of
  // one name differ disagree before any payload moves.
  uint32_t digest = 0;
};

}  // namespace ringcoll::algo
