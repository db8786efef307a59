// The executor runs a Job (a schedule over one buffer) through the transport and
// the reducer. It knows how elements are addressed and in what order operations
// may run (engine/plan.h), but not how bytes move.
//
// An Execution is one collective in progress. progress() does everything that can
// be done now without blocking: posts the sends whose elements are ready, announces
// receives, consumes arrived messages (copies them in place, or reduces them in
// place reading the transport's receive view directly, or reduces them straight into
// the next outgoing message), runs local transfers and finishing passes (AVG's
// division). drive()
// alternates progress() with the transport's idle() until the job is done. Because
// an Execution keeps all its state, one thread may start it and another finish it
// (the backend runs small collectives on the caller's thread and hands them to its
// worker if a peer is late).
//
// On a stream-ordered transport (NCCL) progress() posts in waves instead
// (engine/plan.h): all transfers of wave w in one batch once every one of them is
// ready, then it consumes wave w-1 while wave w is in flight, so every rank's
// batches pair with its peers' and the reduction of one segment overlaps the
// transfer of the next; a finishing pass is fenced after all posted transfers.
//
// Fingerprints: a checked job first sends its 64-byte header to each of its peers
// (before any payload to that peer, so it is the first message the peer receives
// from this rank in this collective) and posts a header receive from each (before
// any payload receive). Payload sends may leave before the peers' headers came,
// since they only read; receives are announced, and anything written, only once
// every header matched (a pairwise job sends each peer its own counts). The header
// buffers are the Executor's, not the Execution's, and a job is done only once its
// header sends completed, so a transport that reads them late (gloo) never reads
// freed memory.
//
// Tracing (engine/trace.h): with a Tracer set on the Executor, every Execution records
// when each of its operations was posted, waited for, arrived and was consumed, and
// commits the record to the tracer when it is done or destroyed; without one it
// tests a null pointer at each hook and does nothing else.
//
// Timeout: a collective fails with PeerError when it makes no progress for the
// group's timeout; the error names the peer it was waiting for and what for.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/fingerprint.h"
#include "engine/plan.h"
#include "engine/run.h"
#include "engine/small.h"
#include "engine/trace.h"
#include "reduce/reducer.h"
#include "reduce/types.h"
#include "schedules/schedule.h"
#include "transport/transport.h"

namespace ringcoll::algo {

// A part of a job's buffer that lives at its own address: elements [begin, end)
// of the buffer are at ptr. Gather, scatter and all-to-all address the user's
// tensors (one per block) this way instead of staging them in one buffer. A region
// that the schedule only sends from is only read.
struct Region {
  size_t begin = 0;
  size_t end = 0;
  void* ptr = nullptr;
};

struct Job {
  Schedule schedule;
  void* buf = nullptr;  // schedule.steps address elements of this buffer
  size_t n = 0;         // its elements
  // When not empty, the buffer is these regions instead of buf: sorted, disjoint,
  // and every transfer of the schedule lies within one of them.
  std::vector<Region> regions;
  DType dtype = DType::kUInt8;
  RedOp op = RedOp::kSum;  // for receive-reduce transfers
  int divideBy = 0;        // > 0: divide where the schedule marks elements reduced
  // The fingerprint exchange (engine/fingerprint.h): when `checked`, the job opens
  // by sending `fingerprint` to every peer of its schedule and to `neighbours`
  // (this rank's ring neighbours) and receiving theirs; no payload is received,
  // and nothing is written to buf, before every one of them matched. A mismatch
  // throws MismatchError naming both calls. On a stream-ordered transport (NCCL)
  // the host cannot look at a received header without synchronising: the headers
  // go in the first wave's batch, and the reducer compares them on the device
  // (Reducer::checkHeader) in stream order before any received payload is
  // consumed; a mismatch stops every later kernel of the reducer, and the backend
  // reports it (backend/stream_path.h). There the prologue runs before the check
  // (the first wave may send what it writes).
  bool checked = false;
  Fingerprint fingerprint;
  std::vector<int> neighbours;
  // Pairwise collectives (all-to-all): the elements this rank sends to and expects
  // from each rank (p entries each), which the header to each peer carries in
  // place of one count for all (Fingerprint::pairwise). Empty otherwise.
  std::vector<uint64_t> sendCounts, recvCounts;
  // Stream-ordered transports: when not empty (p entries), the header this rank
  // sends to peer q, and the one it expects from q, is peerFingerprints[q]'s
  // instead of `fingerprint`'s: a batch of point-to-point messages, in which each
  // pair of ranks makes a call of its own (backend/api_p2p.cc).
  std::vector<Fingerprint> peerFingerprints;
  // Local work on buf that must wait for the fingerprint (PREMUL_SUM's scaling,
  // placing this rank's block): run once every header matched (at once when
  // unchecked), before any payload is sent. May be empty.
  std::function<void()> prologue;
  // For the trace only (who called, which call); ignored when not tracing.
  TraceTag tag;
  // Memory the job owns (a schedule's scratch, engine/collectives.h); may be null.
  std::shared_ptr<void> owned;
};

class Execution final : public Run {
 public:
  // `headers`: where the fingerprint to each peer is sent from (the Executor's, one
  // per rank); they must stay valid until the transport completed the sends of this
  // execution's headers. `tracer`: where the record goes, null when not tracing.
  // `plan`: job.schedule compiled for this rank (compilePlan, or the executor's
  // PlanCache).
  Execution(Transport& transport, Reducer& reducer, Job job,
            std::shared_ptr<const Plan> plan, Fingerprint* headers, Tracer* tracer = nullptr);
  ~Execution();
  Execution(const Execution&) = delete;
  Execution& operator=(const Execution&) = delete;

  bool progress() override;
  // A rank that only sends has every op done once its waves are posted; on a
  // stream-ordered transport it is not done before its received headers' check is
  // enqueued too (else that receive is left queued for the next collective).
  // On a stream-ordered transport it is done once the end of its work on the
  // device covers every transfer it posted, sends included (joined_: the fence
  // below), so the caller may reuse its inputs and workspace once that end is
  // reached.
  bool done() const override {
    return remaining_ == 0 && headersOpen_ == 0 && (devPeers_.empty() || devChecked_) &&
           (!streamOrdered_ || joined_);
  }
  int waitingPeer() const override { return waitPeer_; }
  std::string waitingWhat() const override;
  Clock::time_point lastMove() const override { return lastMove_; }
  const std::string& name() const override { return job_.schedule.name; }
  const Schedule& schedule() const { return job_.schedule; }

 private:
  bool ready(const PlanOp& op) const;
  // The region holding element `begin` (job_.regions not empty).
  const Region& region(size_t begin) const;
  // Where element `elem` of the buffer is; at(op): where op's elements are.
  char* at(size_t elem) const;
  char* at(const PlanOp& op) const { return at(op.begin); }
  size_t bytes(const PlanOp& op) const;
  bool postSends(const Channel& c, size_t ci);
  bool postRecvs(const Channel& c, size_t ci);
  bool consumeRecvs(const Channel& c, size_t ci);
  bool runLocals();
  bool runFinishes();
  bool progressWaves();
  // Stream-ordered: consumes one posted wave's receives in plan order, runs of
  // receive-reduces into the same elements fused into one reduceMany.
  void consumeWave(const std::vector<uint32_t>& wave);
  // Whether op may run once the operations of `run` (not yet done) are.
  bool readyAfter(const PlanOp& op, const std::vector<uint32_t>& run) const;
  // Stream-ordered: a receive-copy may land in place (not when checked).
  bool inPlace(const PlanOp& op) const;
  void consume(const PlanOp& op, const void* view);
  void collectSends(const Channel& c, size_t ci);
  bool exchangeHeaders();
  bool runPrologue();
  void blocked(int peer, int step, const char* what);
  void setDone(uint32_t i);
  // The trace of plan op i, null when not tracing (or past Tracer::kMaxOps).
  OpTrace* traced(uint32_t i) const {
    return trace_ && i < trace_->ops.size() ? &trace_->ops[i] : nullptr;
  }
  // Hands the record to the tracer, once (done, or destroyed before that).
  void commitTrace(bool completed);

  struct ChannelState {
    size_t sendNext = 0;       // sends posted (in channel order)
    size_t sendComplete = 0;   // sends whose source is free again
    size_t recvPosted = 0;     // receives announced
    size_t recvConsumed = 0;   // receives consumed
    uint64_t transportBase = 0;  // transport's sendsDone() when this job started
  };

  // One peer's side of the fingerprint exchange.
  struct HeaderState {
    int peer = -1;
    uint64_t base = 0;      // the transport's sendsDone(peer) when this job started
    bool sent = false;      // our header posted to the peer
    bool sendDone = false;  // ... and its source no longer read
    bool posted = false;    // the peer's header receive announced
    bool checked = false;   // ... arrived and matched
  };
  // The trace of a fingerprint header's send or receive, null when not tracing.
  OpTrace* tracedHeader(const HeaderState& h, bool recv) const;

  Transport& transport_;
  Reducer& reducer_;
  Job job_;
  Fingerprint* header_;  // header_[peer]: what this rank sends to peer
  std::vector<HeaderState> headers_;  // channel ci's peer is headers_[ci]
  size_t headersOpen_ = 0;            // unchecked receives + uncompleted sends
  bool headersChecked_ = true;        // every received header matched
  std::vector<int> devPeers_;         // stream-ordered: the peers of the device check
  bool devPosted_ = false;            // ... their headers are in a batch
  bool devChecked_ = false;           // ... and their check is enqueued
  // The bytes sent to the peers and expected from them on the device
  // (engine/fingerprint.h's one rule: canonical and expectedFrom).
  // devHeaders_[i] and devWants_[i] are devPeers_[i]'s.
  std::vector<Fingerprint> devHeaders_;
  std::vector<Fingerprint> devWants_;
  bool prologueDone_;                 // job_.prologue ran (or there is none)
  size_t elemSize_;
  bool streaming_;  // the buffer is larger than the reducer's streamingBytes()
  std::shared_ptr<const Plan> planHold_;  // may be shared with the executor's cache
  const Plan& plan_;                      // *planHold_
  std::vector<uint8_t> state_;  // per op: 0 waiting, 1 posted, 2 done
  std::vector<ChannelState> chan_;
  size_t remaining_;
  bool streamOrdered_;       // the transport is (transport/transport.h)
  bool joined_ = false;      // stream-ordered: the compute stream waits for every batch
  size_t wavePosted_ = 0;    // stream-ordered: waves posted
  size_t waveConsumed_ = 0;  // stream-ordered: waves consumed
  Clock::time_point lastMove_;
  int waitPeer_ = -1;
  int waitStep_ = -1;
  const char* waitWhat_ = "";
  Tracer* tracer_;
  std::unique_ptr<CollectiveTrace> trace_;  // null when not tracing or committed
};

class Executor {
 public:
  using Clock = std::chrono::steady_clock;

  // chunkBytes: the largest single message (RINGCOLL_CHUNK_BYTES, at least 64); a
  // segment is the whole number of elements that fits in it.
  Executor(Transport& transport, Reducer& reducer, size_t chunkBytes);

  Transport& transport() { return transport_; }
  Reducer& reducer() { return reducer_; }
  int rank() const { return transport_.rank(); }
  int size() const { return transport_.size(); }
  size_t segmentElems(DType dtype) const;
  // Executions started from now on record into `tracer` (null: none). The tracer
  // must outlive them.
  void setTracer(Tracer* tracer) { tracer_ = tracer; }

  std::unique_ptr<Execution> start(Job job);
  // The small collective of job (engine/small.h; SmallCollective::runsOn said yes),
  // made in the executor's storage (no allocation per call): valid until the next
  // startSmall or the executor's end.
  RunHandle startSmall(const SmallJob& job);
  // Runs ex until it is done (true) or `until` passes (false). Throws PeerError
  // when it made no progress for `timeout`.
  bool drive(Run& ex, Clock::time_point until, std::chrono::milliseconds timeout);
  void run(Job job, std::chrono::milliseconds timeout);

  // The peer the execution being driven waits for, -1 if none: lets a Work that
  // timed out on another thread say whom the collective was waiting for.
  int waitingFor() const { return waitingFor_.load(std::memory_order_relaxed); }

 private:
  Transport& transport_;
  Reducer& reducer_;
  size_t chunkBytes_;
  std::atomic<int> waitingFor_{-1};
  std::vector<Fingerprint> headers_;  // the running execution's, one per peer
  std::vector<uint64_t> smallScratch_;  // the small collectives' accumulator ...
  std::vector<const char*> smallViews_;  // ... and its received inputs
  std::optional<SmallCollective> small_;  // startSmall's run
  Tracer* tracer_ = nullptr;
  PlanCache plans_;
};

}  // namespace ringcoll::algo
