#include "engine/executor.h"

#include <algorithm>

#include "common/errors.h"

namespace ringcoll::algo {

Execution::Execution(Transport& transport, Reducer& reducer, Job job,
                     std::shared_ptr<const Plan> plan, Fingerprint* header, Tracer* tracer)
    : transport_(transport),
      reducer_(reducer),
      job_(std::move(job)),
      header_(header),
      prologueDone_(!job_.prologue),
      elemSize_(elementSize(job_.dtype)),
      streaming_(job_.n * elemSize_ > reducer.streamingBytes()),
      planHold_(std::move(plan)),
      plan_(*planHold_),
      state_(plan_.ops.size(), 0),
      chan_(plan_.channels.size()),
      remaining_(plan_.ops.size()),
      lastMove_(Clock::now()),
      tracer_(tracer) {
  streamOrdered_ = transport_.streamOrdered();
  const bool checked = job_.checked && !streamOrdered_;
  if (checked) {
    const bool pairwise = !job_.sendCounts.empty();
    RC_ASSERT(!pairwise || (job_.sendCounts.size() == static_cast<size_t>(transport_.size()) &&
                            job_.recvCounts.size() == job_.sendCounts.size()),
              "pairwise counts for ", job_.sendCounts.size(), " and ", job_.recvCounts.size(),
              " ranks in a group of ", transport_.size());
    auto add = [this, pairwise](int peer) {
      if (peer < 0 || peer == transport_.rank()) return;
      for (const auto& h : headers_) {
        if (h.peer == peer) return;
      }
      Fingerprint& fp = header_[peer];
      fp = job_.fingerprint;
      if (pairwise) {
        fp.pairwise = 1;
        fp.count = job_.sendCounts[peer];
        fp.countBack = job_.recvCounts[peer];
      }
      HeaderState h;
      h.peer = peer;
      h.base = transport_.sendsDone(peer);
      headers_.push_back(h);
    };
    headers_.reserve(plan_.channels.size() + job_.neighbours.size());
    for (const auto& c : plan_.channels) add(c.peer);  // headers_[ci] is channel ci
    for (int peer : job_.neighbours) add(peer);
    headersOpen_ = 2 * headers_.size();
    headersChecked_ = headers_.empty();
  }
  if (job_.checked && transport_.streamOrdered()) {
    // The device check (executor.h): the same peers, headers in the first batch.
    auto add = [this](int peer) {
      if (peer < 0 || peer == transport_.rank() ||
          std::find(devPeers_.begin(), devPeers_.end(), peer) != devPeers_.end()) {
        return;
      }
      devPeers_.push_back(peer);
    };
    for (const auto& c : plan_.channels) add(c.peer);
    for (int peer : job_.neighbours) add(peer);
    const bool perPeer = !job_.peerFingerprints.empty();
    RC_ASSERT(!perPeer || job_.peerFingerprints.size() == static_cast<size_t>(transport_.size()),
              "per-peer fingerprints for ", job_.peerFingerprints.size(),
              " ranks in a group of ", transport_.size());
    for (int peer : devPeers_) {
      const Fingerprint& fp = perPeer ? job_.peerFingerprints[peer] : job_.fingerprint;
      devHeaders_.push_back(canonical(fp));
      devWants_.push_back(expectedFrom(fp));
    }
  }
  for (const PlanOp& op : plan_.ops) {
    if (job_.regions.empty() || op.count == 0) continue;
    const Region& r = region(op.begin);
    RC_ASSERT(op.begin >= r.begin && op.begin + op.count <= r.end, job_.schedule.name,
              ": elements [", op.begin, ", ", op.begin + op.count, ") of step ", op.step,
              " are not within one region");
  }
  for (size_t ci = 0; ci < plan_.channels.size(); ++ci) {
    // Every earlier collective's sends completed before it did, so the transport's
    // count of completed sends restarts from here for this one (after the header).
    chan_[ci].transportBase = transport_.sendsDone(plan_.channels[ci].peer) + (checked ? 1 : 0);
  }
  if (tracer_) {
    trace_ = Tracer::open(job_.tag, job_.schedule, plan_, job_.n,
                          static_cast<uint32_t>(elemSize_), transport_.streamOrdered());
    // In headers_ order, send then receive (tracedHeader).
    for (const auto& h : headers_) {
      for (OpKind kind : {OpKind::kSend, OpKind::kRecvCopy}) {
        OpTrace o;
        o.kind = kind;
        o.peer = h.peer;
        o.step = -1;
        o.bytes = sizeof(Fingerprint);
        trace_->headers.push_back(o);
      }
    }
  }
}

Execution::~Execution() {
  if (trace_) commitTrace(false);
}

OpTrace* Execution::tracedHeader(const HeaderState& h, bool recv) const {
  // headers_[k]'s send is trace_->headers[2k], its receive [2k + 1].
  return trace_ ? &trace_->headers[2 * static_cast<size_t>(&h - headers_.data()) + recv]
                : nullptr;
}

void Execution::commitTrace(bool completed) {
  trace_->completed = completed;
  trace_->end = Tracer::now();
  tracer_->commit(std::move(trace_));
}

bool Execution::ready(const PlanOp& op) const {
  for (uint32_t d = op.depBegin; d < op.depEnd; ++d) {
    if (state_[plan_.deps[d]] != 2) return false;
  }
  return true;
}

const Region& Execution::region(size_t begin) const {
  // The last region that starts at or before `begin`.
  auto it = std::upper_bound(job_.regions.begin(), job_.regions.end(), begin,
                             [](size_t b, const Region& r) { return b < r.begin; });
  RC_ASSERT(it != job_.regions.begin(), "element ", begin, " before the first region");
  return *(it - 1);
}

char* Execution::at(size_t elem) const {
  if (job_.regions.empty()) return static_cast<char*>(job_.buf) + elem * elemSize_;
  const Region& r = region(elem);
  return static_cast<char*>(r.ptr) + (elem - r.begin) * elemSize_;
}

size_t Execution::bytes(const PlanOp& op) const { return op.count * elemSize_; }

void Execution::setDone(uint32_t i) {
  state_[i] = 2;
  --remaining_;
}

void Execution::blocked(int peer, int step, const char* what) {
  if (waitPeer_ >= 0) return;  // keep the first thing this pass waited for
  waitPeer_ = peer;
  waitStep_ = step;
  waitWhat_ = what;
}

std::string Execution::waitingWhat() const {
  if (waitPeer_ < 0) return "its peers";
  if (waitStep_ < 0) {
    return RC_STR(waitWhat_, " rank ", waitPeer_, " (the header that opens ",
                  job_.schedule.name, ")");
  }
  return RC_STR(waitWhat_, " rank ", waitPeer_, " (step ", waitStep_, " of ",
                job_.schedule.name, ")");
}

// The fingerprint exchange (executor.h): our header out to every peer, theirs in
// and compared. Throws MismatchError on the first header that disagrees.
bool Execution::exchangeHeaders() {
  bool moved = false;
  for (auto& h : headers_) {
    if (h.sent) continue;
    OpTrace* t = tracedHeader(h, false);
    const int64_t t0 = t ? Tracer::now() : 0;  // before: a send may leave during the call
    if (!transport_.trySend(h.peer, &header_[h.peer], sizeof(Fingerprint))) {
      blocked(h.peer, -1, "room for a message at");
      if (t && !t->want) t->want = t0;
      continue;
    }
    if (t) t->post = t0;
    h.sent = true;
    moved = true;
  }
  for (auto& h : headers_) {
    if (h.posted) continue;
    OpTrace* t = tracedHeader(h, true);
    const int64_t t0 = t ? Tracer::now() : 0;
    if (!transport_.tryPostRecv(h.peer, nullptr, sizeof(Fingerprint))) {
      blocked(h.peer, -1, "room to receive from");
      continue;
    }
    if (t) t->post = t0;
    h.posted = true;
    moved = true;
  }
  transport_.flush();
  for (auto& h : headers_) {
    if (!h.posted || h.checked) continue;
    OpTrace* t = tracedHeader(h, true);
    // Any size: openingError (engine/fingerprint.h) reads the header first.
    size_t got = sizeof(Fingerprint);
    const void* view = transport_.recvViewAny(h.peer, &got);
    if (view == nullptr) {
      blocked(h.peer, -1, "a message from");
      if (t && !t->want) t->want = Tracer::now();
      continue;
    }
    if (t) t->arrive = Tracer::now();
    const std::exception_ptr error =
        openingError(&header_[h.peer], view, got, sizeof(Fingerprint), h.peer);
    transport_.releaseRecv(h.peer);
    if (error) std::rethrow_exception(error);
    if (t) t->done = Tracer::now();
    h.checked = true;
    --headersOpen_;
    moved = true;
  }
  bool all = true;
  for (auto& h : headers_) {
    all = all && h.checked;
    if (!h.sent || h.sendDone) continue;
    if (transport_.sendsDone(h.peer) > h.base) {
      h.sendDone = true;
      if (OpTrace* t = tracedHeader(h, false)) t->done = Tracer::now();
      --headersOpen_;
      moved = true;
    } else {
      // Sent, not yet taken: a peer that stopped receiving is the one to name.
      blocked(h.peer, -1, "the delivery of a message to");
    }
  }
  headersChecked_ = all;
  return moved;
}

bool Execution::postSends(const Channel& c, size_t ci) {
  ChannelState& cs = chan_[ci];
  bool moved = false;
  if (!prologueDone_) return false;
  if (!headers_.empty() && !headers_[ci].sent) return false;  // the header goes first
  while (cs.sendNext < c.sends.size()) {
    const uint32_t i = c.sends[cs.sendNext];
    const PlanOp& op = plan_.ops[i];
    if (!ready(op)) break;
    OpTrace* t = traced(i);
    // Read before the call: a transport may move the bytes before it returns.
    const int64_t t0 = t ? Tracer::now() : 0;
    if (!transport_.trySend(c.peer, at(op), bytes(op))) {
      blocked(c.peer, op.step, "room for a message at");
      if (t && !t->want) t->want = t0;
      break;
    }
    if (t) t->post = t0;
    state_[i] = 1;
    ++cs.sendNext;
    moved = true;
  }
  return moved;
}

bool Execution::postRecvs(const Channel& c, size_t ci) {
  ChannelState& cs = chan_[ci];
  bool moved = false;
  while (cs.recvPosted < c.recvs.size()) {
    const PlanOp& op = plan_.ops[c.recvs[cs.recvPosted]];
    // A copy may land in place once nothing still reads or writes its elements.
    void* dst = op.kind == OpKind::kRecvCopy && ready(op) ? at(op) : nullptr;
    OpTrace* t = traced(c.recvs[cs.recvPosted]);
    const int64_t t0 = t ? Tracer::now() : 0;
    if (!transport_.tryPostRecv(c.peer, dst, bytes(op))) break;
    if (t) t->post = t0;
    ++cs.recvPosted;
    moved = true;
  }
  return moved;
}

bool Execution::consumeRecvs(const Channel& c, size_t ci) {
  ChannelState& cs = chan_[ci];
  bool moved = false;
  while (cs.recvConsumed < cs.recvPosted) {
    const uint32_t i = c.recvs[cs.recvConsumed];
    const PlanOp& op = plan_.ops[i];
    if (!ready(op)) break;
    OpTrace* t = traced(i);
    const void* view = transport_.recvView(c.peer);
    if (view == nullptr) {
      blocked(c.peer, op.step, "a message from");
      if (t && !t->want) t->want = Tracer::now();
      break;
    }
    if (t) t->arrive = Tracer::now();
    consume(op, view);
    transport_.releaseRecv(c.peer);
    if (t) t->done = Tracer::now();
    setDone(i);
    ++cs.recvConsumed;
    moved = true;
  }
  return moved;
}

// Copies or reduces one arrived segment into place (or into the next message).
void Execution::consume(const PlanOp& op, const void* view) {
  char* local = at(op);
  const size_t nb = bytes(op);
  if (op.kind == OpKind::kRecvCopy) {
    if (view != local) reducer_.copy(local, view, nb, streaming_);
    return;
  }
  // Forward: write the reduction into the next message to the forward's peer,
  // when that send is next in its channel and the transport has a slot for it.
  void* out = nullptr;
  size_t fci = 0;
  if (op.forward >= 0) {
    const int fpeer = plan_.ops[op.forward].peer;
    while (plan_.channels[fci].peer != fpeer) ++fci;
    const Channel& fc = plan_.channels[fci];
    if (transport_.copiesSends(fpeer) && (headers_.empty() || headers_[fci].sent) &&
        chan_[fci].sendNext < fc.sends.size() &&
        fc.sends[chan_[fci].sendNext] == static_cast<uint32_t>(op.forward)) {
      out = transport_.sendSlot(fpeer, nb);
    }
  }
  // The operands in the schedule's order (schedule.h): buffer OP incoming, or
  // incoming OP buffer (op.first).
  const void* a = op.first ? view : local;
  const void* b = op.first ? static_cast<const void*>(local) : view;
  if (out == nullptr) {
    reducer_.reduce(local, a, b, op.count, job_.dtype, job_.op);
    return;
  }
  reducer_.reduce2(op.localLive ? local : out, op.localLive ? out : nullptr, a, b,
                   op.count, job_.dtype, job_.op);
  if (OpTrace* t = traced(static_cast<uint32_t>(op.forward))) {
    t->post = Tracer::now();
    t->forwarded = true;
  }
  transport_.commitSlot(plan_.channels[fci].peer, nb);
  state_[op.forward] = 1;
  ++chan_[fci].sendNext;
}

// Local transfers (engine/plan.h), in plan order, each once what it reads and
// writes is ready: a chain of them runs in one pass.
bool Execution::runLocals() {
  bool moved = false;
  const auto& locals = plan_.locals;
  std::vector<uint32_t> run;
  std::vector<const void*> srcs;
  for (size_t a = 0; a < locals.size(); ++a) {
    const uint32_t i = locals[a];
    const PlanOp& op = plan_.ops[i];
    if (state_[i] == 2 || !ready(op)) continue;
    if (op.kind == OpKind::kLocalReduce && !op.first) {
      // The local reduces after it into the same elements, each waiting only for
      // the ones before: one fused reduction in the same order (one-shot's fold of
      // its own input and the parked ones: one kernel). Only buffer OP source ones
      // (reduceMany folds each source in after the buffer).
      run.assign(1, i);
      size_t b = a + 1;
      for (; b < locals.size(); ++b) {
        const PlanOp& nx = plan_.ops[locals[b]];
        if (state_[locals[b]] == 2 || nx.kind != OpKind::kLocalReduce || nx.first ||
            nx.begin != op.begin || nx.count != op.count || !readyAfter(nx, run)) {
          break;
        }
        run.push_back(locals[b]);
      }
      if (run.size() > 1) {
        srcs.clear();
        for (uint32_t j : run) {
          srcs.push_back(at(plan_.ops[j].src));
          if (OpTrace* t = traced(j)) t->arrive = Tracer::now();
        }
        reducer_.reduceMany(at(op), srcs.data(), srcs.size(), op.count, job_.dtype, job_.op);
        for (uint32_t j : run) {
          if (OpTrace* t = traced(j)) t->done = Tracer::now();
          setDone(j);
        }
        a = b - 1;
        moved = true;
        continue;
      }
    }
    OpTrace* t = traced(i);
    if (t) t->arrive = Tracer::now();
    if (op.kind == OpKind::kLocalCopy) {
      reducer_.copy(at(op), at(op.src), bytes(op), streaming_);
    } else if (op.first) {  // source OP buffer (schedule.h: kRecvReduceFirst)
      reducer_.reduce(at(op), at(op.src), at(op), op.count, job_.dtype, job_.op);
    } else {
      reducer_.reduce(at(op), at(op), at(op.src), op.count, job_.dtype, job_.op);
    }
    if (t) t->done = Tracer::now();
    setDone(i);
    moved = true;
  }
  return moved;
}

bool Execution::runFinishes() {
  bool moved = false;
  for (auto& i : plan_.finishes) {
    if (state_[i] == 2 || !ready(plan_.ops[i])) continue;
    if (transport_.streamOrdered()) transport_.fence();
    OpTrace* t = traced(i);
    if (t) t->arrive = Tracer::now();
    reducer_.divide(at(plan_.ops[i]), plan_.ops[i].count, job_.dtype, job_.divideBy);
    if (t) t->done = Tracer::now();
    setDone(i);
    moved = true;
  }
  return moved;
}

void Execution::collectSends(const Channel& c, size_t ci) {
  ChannelState& cs = chan_[ci];
  if (cs.sendComplete == cs.sendNext) return;
  const uint64_t raw = transport_.sendsDone(c.peer);
  if (raw < cs.transportBase) {  // the header's send is not complete yet
    blocked(c.peer, -1, "the delivery of a message to");
    return;
  }
  const uint64_t done = raw - cs.transportBase;
  const int64_t now = trace_ && cs.sendComplete < done ? Tracer::now() : 0;
  while (cs.sendComplete < cs.sendNext && cs.sendComplete < done) {
    if (OpTrace* t = traced(c.sends[cs.sendComplete])) t->done = now;
    setDone(c.sends[cs.sendComplete]);
    ++cs.sendComplete;
  }
  if (cs.sendComplete < cs.sendNext) {
    blocked(c.peer, plan_.ops[c.sends[cs.sendComplete]].step, "the delivery of a message to");
  }
}

bool Execution::runPrologue() {
  if (prologueDone_ || !headersChecked_) return false;
  job_.prologue();
  prologueDone_ = true;
  return true;
}

bool Execution::progress() {
  const size_t before = remaining_;
  waitPeer_ = -1;
  if (transport_.streamOrdered()) {
    // The prologue cannot wait for the device's header check (executor.h).
    runPrologue();
    const bool moved = progressWaves() || remaining_ != before;
    if (moved) lastMove_ = Clock::now();
    if (trace_ && done()) commitTrace(true);
    return moved;
  }
  bool moved = false;
  if (headersOpen_ > 0) moved |= exchangeHeaders();
  moved |= runPrologue();
  for (size_t ci = 0; ci < plan_.channels.size(); ++ci) {
    moved |= postSends(plan_.channels[ci], ci);
  }
  if (headersChecked_) {
    for (size_t ci = 0; ci < plan_.channels.size(); ++ci) {
      moved |= postRecvs(plan_.channels[ci], ci);
    }
    transport_.flush();
    for (size_t ci = 0; ci < plan_.channels.size(); ++ci) {
      moved |= consumeRecvs(plan_.channels[ci], ci);
    }
    moved |= runLocals();
    moved |= runFinishes();
  }
  for (size_t ci = 0; ci < plan_.channels.size(); ++ci) {
    collectSends(plan_.channels[ci], ci);
  }
  moved |= remaining_ != before;
  if (moved) lastMove_ = Clock::now();
  if (trace_ && done()) commitTrace(true);
  return moved;
}

Executor::Executor(Transport& transport, Reducer& reducer, size_t chunkBytes)
    : transport_(transport),
      reducer_(reducer),
      chunkBytes_(chunkBytes),
      headers_(static_cast<size_t>(transport.size())) {
  RC_ASSERT(chunkBytes_ >= 64, "chunk of ", chunkBytes_, " bytes");
}

size_t Executor::segmentElems(DType dtype) const {
  return chunkBytes_ / elementSize(dtype);
}

std::unique_ptr<Execution> Executor::start(Job job) {
  // A run that ends on its first pass never goes through drive(): no stale peer.
  waitingFor_.store(-1, std::memory_order_relaxed);
  auto plan = plans_.get(job.schedule, segmentElems(job.dtype), job.divideBy > 0,
                         transport_.rank());
  return std::make_unique<Execution>(transport_, reducer_, std::move(job), std::move(plan),
                                     headers_.data(), tracer_);
}

RunHandle Executor::startSmall(const SmallJob& job) {
  waitingFor_.store(-1, std::memory_order_relaxed);  // as in start()
  const size_t words = (job.n * elementSize(job.dtype) + 7) / 8;
  if (smallScratch_.size() < words) smallScratch_.resize(words);
  smallViews_.assign(static_cast<size_t>(transport_.size()), nullptr);
  small_.emplace(transport_, reducer_, job, smallScratch_.data(), smallViews_.data());
  return RunHandle(&*small_, RunRelease{false});
}

bool Executor::drive(Run& ex, Clock::time_point until,
                     std::chrono::milliseconds timeout) {
  for (;;) {
    // The token is taken before looking, so whatever arrives after the look wakes
    // the idle wait below.
    const uint32_t token = transport_.idleToken();
    const bool moved = ex.progress();
    if (ex.done()) {
      waitingFor_.store(-1, std::memory_order_relaxed);
      return true;
    }
    if (moved) continue;
    waitingFor_.store(ex.waitingPeer(), std::memory_order_relaxed);
    const auto now = Clock::now();
    const auto deadline = ex.lastMove() + timeout;
    if (now >= deadline) {
      throw PeerError(ex.waitingPeer(),
                      RC_STR("Timed out after ", timeout.count(), " ms waiting for ",
                             ex.waitingWhat()),
                      /*timedOut=*/true);
    }
    if (now >= until) return false;
    transport_.idle(token, std::min(deadline, until));
  }
}

void Executor::run(Job job, std::chrono::milliseconds timeout) {
  auto ex = start(std::move(job));
  drive(*ex, Clock::time_point::max(), timeout);
}

}  // namespace ringcoll::algo
