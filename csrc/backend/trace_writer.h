// RINGCOLL_TRACE: the file side of the executor's timeline (engine/trace.h).
//
// Every rank of a traced group writes <dir>/ringcoll-g<group>-rank<r>.json, a
// Chrome trace (trace event format, JSON array form, which chrome://tracing and
// Perfetto open as they are; `python -m ringcoll.trace <dir>` merges the ranks).
// One process per rank (pid = rank), threads:
//
//   tid 1          collectives: one complete ("X") event per collective, from the
//                  executor's start to its end; args: seq, op, algorithm, bytes,
//                  elements, steps, issued/start/end, completed
//   tid 2          reduce / copy: what the executor thread did with a message once
//                  it arrived (arrive..done), and AVG's division
//   tid 16 + ...   one lane per peer and direction ("send -> r1", "recv <- r1"),
//                  more lanes when several transfers with that peer overlap: a send
//                  spans post..done, a receive post..arrive
//
// Each transfer event carries every raw time of its operation (want, post, arrive,
// done, in microseconds of this rank's clock, null when it did not happen) and its
// place (seq, kind, peer, step, seg, index in the channel, begin, count, bytes), so
// a reader can pair the k-th send from a to b with the k-th receive on b from a.
// Times are this rank's steady_clock; the metadata event "ringcoll_trace" holds the
// offset to rank 0's clock (add it to align), measured at creation by syncClocks.
//
// Writing: records are taken from the tracer and appended (then fflush()ed) when it
// holds kFlushCollectives collectives or kFlushOps operations, at most every
// kFlushInterval otherwise, and when the backend stops, which also closes the JSON
// array. A process that dies leaves the file without its closing bracket and
// without what it had not yet written (at most one flush's worth); readers accept
// the missing bracket.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "engine/trace.h"

namespace ringcoll {

// This rank's steady_clock against rank 0's, through the group's store, NTP style:
// rank r writes a request key and notes t0; rank 0, polling for it, answers with
// its clock T; r notes t1 when it sees the answer. Rank 0 read its clock between
// t0 and t1, so offset = T - (t0 + t1) / 2 is within rtt / 2 (rtt = t1 - t0) of the
// truth; of kRounds rounds the one with the smallest rtt is kept. Polling uses
// check() every few tens of microseconds rather than a blocking get(), whose
// wake-up latency (a FileStore polls every 10 ms) would dominate rtt.
//
// Every rank of the group must call it (tracing is on for all or none of them);
// one that does not answer within kGiveUp leaves the offset unknown, never a hang.
struct ClockSync {
  double offsetUs = 0;  // add to this rank's times to get rank 0's
  double rttUs = 0;     // of the round kept; |error| <= rttUs / 2
  int rounds = 0;
  bool known = false;
};
ClockSync syncClocks(c10d::Store& store, int rank, int size);

class TraceWriter {
 public:
  static constexpr auto kFlushInterval = std::chrono::seconds(1);

  // Creates `dir` if needed and opens this rank's file; std::runtime_error naming
  // the path and the system's reason if it cannot.
  TraceWriter(algo::Tracer& tracer, const std::string& dir, const std::string& group,
              int rank, int size, const ClockSync& clock, const std::string& transport,
              size_t chunkBytes);
  // Writes what is left and closes the array.
  ~TraceWriter();
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  const std::string& path() const { return path_; }
  // After a collective (any thread: the CPU worker, a caller running a collective
  // inline, a stream path's launch): writes the buffered records if the tracer is
  // full or kFlushInterval passed since the last write. Nothing once closed.
  void maybeWrite();
  void write();
  // Writes what is left and closes the array; later writes do nothing. The backend
  // closes its writer when it stops, while a launch in another thread may still
  // call maybeWrite (the writer lives as long as the backend).
  void close();

 private:
  void writeLocked();  // under mutex_, with the file open
  void emit(const algo::CollectiveTrace& c);
  void emitOp(const algo::CollectiveTrace& c, const algo::OpTrace& o);
  int lane(int peer, bool send, int64_t start, int64_t end);
  void event(const std::string& json);

  algo::Tracer& tracer_;
  const int rank_;
  std::string path_;
  std::FILE* file_ = nullptr;
  bool first_ = true;
  std::mutex mutex_;  // everything below, and the file
  std::chrono::steady_clock::time_point lastWrite_;
  // Per (peer, direction): when each lane's last event ends.
  std::vector<std::vector<int64_t>> laneEnd_;
  std::vector<bool> named_;  // thread_name emitted, by lane tid
  std::string buf_;
};

}  // namespace ringcoll
