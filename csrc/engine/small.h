// The small all-reduce (RINGCOLL_SMALL_BYTES): for calls so small that the
// executor's bookkeeping (a schedule, its plan, per-step state, a header message
// of its own) costs more than moving the bytes.
//
// On a copying transport (shared memory, every peer): each rank writes one message
// into the next slot of every peer's mailbox, its 64-byte fingerprint followed by
// its whole input, and posts one receive from every peer. Once every peer's
// message is there and every header matched its own, it folds the p inputs in rank
// order, ((x0 op x1) op x2) op ..., as oneshot does, so that every rank ends with
// the same bits whatever the op (schedules/oneshot.cc); AVG then divides by p.
// Nothing is written to the buffer before every header matched. One message each
// way per pair of ranks, the header folded into it.
//
//   rank r:   send [fp | x_r] to every q != r      receive [fp_q | x_q] from every q
//             all arrived, every fp_q == fp: buf = fold(x_0 .. x_{p-1}); release
//
// A peer in another call is still caught by its header: its message starts with
// one, whatever its size (a peer in a scheduled collective sends a header alone);
// the receive takes a message of any size (Transport::recvViewAny) and compares
// the header before the size, so two ranks that disagree report both calls.
// Without the fingerprint (RINGCOLL_FINGERPRINT=0) the message is the input alone.
//
// Every rank must take this path for the same calls, so the choice depends only on
// what every rank shares: the call (all-reduce, its bytes, the reduction) and the
// group's knobs and links (backend: smallAllreduce).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/fingerprint.h"
#include "engine/run.h"
#include "reduce/reducer.h"
#include "reduce/types.h"
#include "transport/transport.h"

namespace ringcoll::algo {

struct SmallJob {
  void* buf = nullptr;  // n elements, the input, then the result
  size_t n = 0;
  DType dtype = DType::kUInt8;
  RedOp op = RedOp::kSum;
  int divideBy = 0;  // > 0: AVG, divide the folded result by this
  bool checked = false;  // send and compare `fingerprint` with the input
  Fingerprint fingerprint;
};

class SmallAllreduce final : public Run {
 public:
  // The schedule name it goes by (fingerprints, logs); 15 characters at most.
  static const std::string kName;

  // Whether `transport` runs a small all-reduce of `bytes` bytes of input: every
  // peer's link copies sends, and the header and the input fit one message of at
  // most `maxMessage` bytes (the transport's slot).
  static bool fits(Transport& transport, size_t bytes, size_t maxMessage);

  // `scratch`: n elements, 8-byte aligned (the accumulator of ranks other than 0);
  // `views`: one null pointer per rank. Both the caller's (the executor keeps them
  // from call to call), and this run's alone until it is done.
  SmallAllreduce(Transport& transport, Reducer& reducer, const SmallJob& job, void* scratch,
                 const char** views);
  SmallAllreduce(const SmallAllreduce&) = delete;
  SmallAllreduce& operator=(const SmallAllreduce&) = delete;

  bool progress() override;
  bool done() const override { return done_; }
  int waitingPeer() const override { return waitPeer_; }
  std::string waitingWhat() const override;
  Clock::time_point lastMove() const override { return lastMove_; }
  const std::string& name() const override { return kName; }

 private:
  bool send();
  bool receive();
  void fold();

  Transport& transport_;
  Reducer& reducer_;
  const SmallJob job_;
  void* scratch_;
  const size_t bytes_;    // of the input
  const size_t header_;   // 64 when checked, else 0
  const size_t message_;  // header_ + bytes_
  int sent_ = 0;          // peers sent to, in order rank+1, rank+2, ...
  int arrived_ = 0;       // peers whose message is here and matched
  bool posted_ = false;   // the receives are announced
  const char** views_;  // by rank: the peer's input, once here
  bool done_ = false;
  int waitPeer_ = -1;
  const char* waitWhat_ = "";
  Clock::time_point lastMove_;
};

}  // namespace ringcoll::algo
