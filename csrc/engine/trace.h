// The executor's timeline (RINGCOLL_TRACE): what an Execution records about each
// operation of its plan when a Tracer is attached. Memory only: no files, no torch.
// The backend's writer (backend/trace_writer.h) takes the records out and
// serialises them.
//
// Free when off: an Execution without a tracer holds a null record and tests it at
// its few hook points; it reads no clock and allocates nothing.
//
// Times are this rank's steady_clock in nanoseconds since the clock's epoch (the
// same clock on every process of one host); 0 means "did not happen". They are
// taken by the executor when it sees something, so a completion is the pass that
// observed it, not the instant the transport finished. Per operation:
//
//   send     want    first pass that had it ready but the transport had no room
//                    (0: it was taken at once)
//            post    the call to trySend that took it began (a transport may move
//                    the bytes before the call returns); forwarded: the reduction
//                    written into the transport's slot, about to be committed
//            done    first pass that saw the transport done with its source
//   receive  post    the call to tryPostRecv that announced it began
//            want    first pass that could consume it but its bytes were not there
//                    (0: they were): the rank waited on its peer from here
//            arrive  first pass that saw its bytes
//            done    copied or reduced into place (arrive..done is the reduce/copy)
//   finish   arrive..done: AVG's division over a range the schedule marks reduced
//
// Fingerprint headers (engine/fingerprint.h) are recorded as operations of step -1,
// one send to and one receive from each peer they go to, so a rank that waited at
// the start of a collective for a late peer shows it.
//
// On a stream-ordered transport (NCCL) every time is a host time: when a wave was
// enqueued (post; a send is done once enqueued) and when the reduce or copy of a
// receive was enqueued (arrive..done). When the bytes really moved on the device is
// not recorded (that would need CUDA events per wave).
//
// Memory is bounded: at most kMaxOps operations of one collective are recorded
// (the rest are counted, not kept), and the backend writes the records out after
// at most kFlushCollectives collectives or kFlushOps buffered operations, so a
// tracer holds at most about (kFlushOps + kMaxOps) * sizeof(OpTrace) bytes
// (about 11 MiB).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/plan.h"
#include "schedules/schedule.h"

namespace ringcoll::algo {

// What the backend knows of a collective that the executor does not: set on the
// Job, read only when tracing.
struct TraceTag {
  const char* op = "";  // the call by torch's name, e.g. "all_reduce" (a string literal)
  uint64_t seq = 0;     // the group's sequence number
  int64_t issued = 0;   // when the call was made (Tracer::now()), 0 unknown
};

struct OpTrace {
  OpKind kind = OpKind::kSend;
  bool forwarded = false;  // a send that was written by the reduction of a receive
  int peer = -1;
  int step = 0;            // -1: the fingerprint header
  uint32_t seg = 0;        // segment within its transfer
  uint32_t index = 0;      // position in its channel and direction (pairs with the peer's)
  uint64_t begin = 0;      // elements
  uint64_t count = 0;
  uint64_t bytes = 0;
  int64_t want = 0, post = 0, arrive = 0, done = 0;
};

struct CollectiveTrace {
  std::string op;
  uint64_t seq = 0;
  std::string algorithm;  // the schedule's name
  uint64_t n = 0;         // elements of the buffer
  uint32_t elemSize = 0;
  int steps = 0;
  bool streamOrdered = false;
  bool completed = false;  // false: it failed (or was abandoned) part way
  int64_t issued = 0, start = 0, end = 0;
  uint64_t planOps = 0;        // operations in the plan; ops may hold fewer (kMaxOps)
  std::vector<OpTrace> ops;    // plan order; index i is plan op i
  std::vector<OpTrace> headers;
};

class Tracer {
 public:
  static constexpr size_t kMaxOps = size_t{1} << 16;
  static constexpr size_t kFlushOps = size_t{1} << 16;
  static constexpr size_t kFlushCollectives = 256;

  static int64_t now() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  // A record for one execution of `plan`, its operations described and untimed.
  static std::unique_ptr<CollectiveTrace> open(const TraceTag& tag, const Schedule& schedule,
                                               const Plan& plan, uint64_t n, uint32_t elemSize,
                                               bool streamOrdered);

  // Hands a finished (or failed) record over; callable from any thread.
  void commit(std::unique_ptr<CollectiveTrace> record);
  // The committed records, oldest first, and forgets them.
  std::vector<std::unique_ptr<CollectiveTrace>> take();
  // Whether the buffer reached kFlushCollectives or kFlushOps.
  bool full() const;

 private:
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<CollectiveTrace>> done_;
  size_t ops_ = 0;
};

}  // namespace ringcoll::algo
