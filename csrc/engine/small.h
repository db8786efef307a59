// Small collectives (RINGCOLL_SMALL_BYTES): all-reduce, reduce-scatter, all-gather
// and broadcast for calls so small that the executor's bookkeeping (a schedule,
// its plan, per-step state, a header message of its own) costs more than moving
// the bytes.
//
// On a copying transport (shared memory, every peer): each rank writes one message
// into the next slot of every peer's mailbox, its 64-byte fingerprint followed by
// what that peer needs of it, and posts one receive from every peer. Once every
// peer's message is there and every header matched its own, it combines them
// locally. Nothing is written to the buffer before every header matched. Exactly
// one message each way per pair of ranks, the header folded into it:
//
//   kind            sends to q                        combines
//   all-reduce      its input (n)                     folds the p inputs
//   reduce-scatter  block q of its input (n each)     folds the p copies of block r
//                                                     into `out`
//   all-gather      its block (n)                     places the p blocks
//   broadcast       the root: the buffer (n);         copies the root's
//                   the others: the header alone
//
// Folds go in rank order, ((x0 op x1) op x2) op ..., as oneshot does, so that
// every rank ends with the same bits whatever the op (schedules/oneshot.cc); AVG
// then divides by p. Every rank exchanges headers with every other one, so every
// rank sees a disagreement itself.
//
// A peer in another call is still caught by its header: its message starts with
// one, whatever its size (a peer in a scheduled collective sends a header alone);
// the receive takes a message of any size (Transport::recvViewAny) and compares
// the header before the size, so two ranks that disagree report both calls.
// Without the fingerprint (RINGCOLL_FINGERPRINT=0) a message is its payload alone,
// and pairs with no payload either way exchange nothing.
//
// Every rank must take this path for the same calls, so the choice depends only on
// what every rank shares: the call (collective, bytes, reduction) and the group's
// knobs and links (backend: small()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/fingerprint.h"
#include "engine/run.h"
#include "reduce/reducer.h"
#include "reduce/types.h"
#include "transport/transport.h"

namespace ringcoll::algo {

enum class SmallKind : uint8_t { kAllreduce, kReduceScatter, kAllgather, kBroadcast };

struct SmallJob {
  SmallKind kind = SmallKind::kAllreduce;
  // all-reduce, broadcast: n elements, the input (the root's for broadcast), then
  // the result. reduce-scatter: p blocks of n, the input, only read (`out` may be
  // block r). all-gather: p blocks of n, the output; `in` goes to block r (it may
  // be block r).
  void* buf = nullptr;
  const void* in = nullptr;  // all-gather: this rank's block (n elements)
  void* out = nullptr;       // reduce-scatter: the result (n elements)
  size_t n = 0;
  DType dtype = DType::kUInt8;
  RedOp op = RedOp::kSum;
  int divideBy = 0;  // > 0: AVG, divide the folded result by this
  int root = 0;      // broadcast
  bool checked = false;  // send and compare `fingerprint` with every message
  Fingerprint fingerprint;
};

class SmallCollective final : public Run {
 public:
  // The name each kind goes by (fingerprints, logs): 15 characters at most.
  static const std::string& name(SmallKind kind);

  // Whether `transport` runs small collectives: every peer's link copies sends.
  // The caller keeps each collective's buffer (an upper bound on every message's
  // payload) within the transport's slot less the header.
  static bool runsOn(const Transport& transport);

  // `scratch`: n elements, 8-byte aligned (the accumulator of ranks other than 0
  // that fold in place);
  // `views`: one null pointer per rank. Both the caller's (the executor keeps them
  // from call to call), and this run's alone until it is done.
  SmallCollective(Transport& transport, Reducer& reducer, const SmallJob& job, void* scratch,
                  const char** views);
  SmallCollective(const SmallCollective&) = delete;
  SmallCollective& operator=(const SmallCollective&) = delete;

  bool progress() override;
  bool done() const override { return done_; }
  int waitingPeer() const override { return waitPeer_; }
  std::string waitingWhat() const override;
  Clock::time_point lastMove() const override { return lastMove_; }
  const std::string& name() const override { return name(job_.kind); }

 private:
  // Payload bytes this rank sends to q, and receives from q.
  size_t sendBytes(int q) const;
  size_t recvBytes(int q) const;
  const char* sendFrom(int q) const;
  // Whether a message goes to (comes from) q at all.
  bool talks(int q, bool send) const {
    return header_ > 0 || (send ? sendBytes(q) : recvBytes(q)) > 0;
  }
  bool send();
  bool receive();
  void combine();
  // dst = x0 op x1 op ... in rank order, x(rank) = mine (dst may be mine).
  void fold(const void* mine, void* dst);

  Transport& transport_;
  Reducer& reducer_;
  const SmallJob job_;
  void* scratch_;
  const size_t bytes_;   // n elements
  const size_t header_;  // 64 when checked, else 0
  const int rank_;
  const int size_;
  int sendNext_ = 1;  // next peer to send to: rank + sendNext_ (mod p)
  int expected_ = 0;  // messages to receive
  int arrived_ = 0;   // ... here and matched
  bool posted_ = false;  // the receives are announced
  const char** views_;   // by rank: the peer's payload, once here
  bool done_ = false;
  int waitPeer_ = -1;
  const char* waitWhat_ = "";
  Clock::time_point lastMove_{};  // set by the first pass that does not finish
};

}  // namespace ringcoll::algo
