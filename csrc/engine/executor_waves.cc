// Progress on a stream-ordered transport (NCCL): waves instead of free-running
// channels (engine/executor.h). Every rank posts the same waves in the same order, one
// batch each, so each batch pairs with the peers' batch of the same wave: NCCL runs
// a batch as one unit on a stream, and a send in one batch waiting for a receive
// in a later batch of its peer could deadlock.
#include "engine/executor.h"

#include <algorithm>

#include "common/errors.h"

namespace ringcoll::algo {

bool Execution::inPlace(const PlanOp& op) const {
  // A checked job stages every receive: the transport writes where it is told
  // whatever the check finds, and only the reducer's copy (skipped on a mismatch)
  // may write the user's memory.
  return op.kind == OpKind::kRecvCopy && devPeers_.empty();
}

bool Execution::progressWaves() {
  const auto& waves = plan_.waves;
  // The fingerprint on the device (executor.h): this rank's header out to every
  // peer and theirs in, ahead of the first wave's transfers and in its batch (a
  // batch of their own when there is no wave).
  if (!devPosted_ && !devPeers_.empty()) {
    // Slot 0 holds the one header of a call that sends every peer the same; slot
    // 1 + p + q the header for peer q when they differ (Job::peerFingerprints).
    const bool perPeer = !job_.peerFingerprints.empty();
    const size_t p = static_cast<size_t>(transport_.size());
    if (!perPeer) reducer_.writeHeader(reducer_.headerSlot(0), &devHeaders_[0], sizeof(Fingerprint));
    for (size_t i = 0; i < devPeers_.size(); ++i) {
      const int peer = devPeers_[i];
      void* mine = reducer_.headerSlot(perPeer ? 1 + p + static_cast<size_t>(peer) : 0);
      if (perPeer) reducer_.writeHeader(mine, &devHeaders_[i], sizeof(Fingerprint));
      const bool posted =
          transport_.trySend(peer, mine, sizeof(Fingerprint)) &&
          transport_.tryPostRecv(peer, reducer_.headerSlot(1 + static_cast<size_t>(peer)),
                                 sizeof(Fingerprint));
      RC_ASSERT(posted, "a stream-ordered transport refused a header");
    }
    devPosted_ = true;
    // A batch of their own: headers always have the same size, so they arrive even
    // when the payloads of ranks that disagree do not pair, and the check runs.
    transport_.flush();
  }
  // Compared before any payload received with them is consumed.
  if (devPosted_ && !devChecked_ && (waves.empty() || waveConsumed_ < wavePosted_)) {
    for (size_t i = 0; i < devPeers_.size(); ++i) {
      const int peer = devPeers_[i];
      const void* view = transport_.recvView(peer);
      RC_ASSERT(view != nullptr, "no view of a posted header receive from rank ", peer);
      reducer_.checkHeader(view, &devWants_[i], sizeof(Fingerprint), peer);
      transport_.releaseRecv(peer);
    }
    devChecked_ = true;
    return true;
  }
  // Post the next wave, at most one ahead of the consumed ones, once every transfer
  // in it is ready: one batch, the same on every rank.
  if (wavePosted_ < waves.size() && wavePosted_ <= waveConsumed_ + 1) {
    const auto& w = waves[wavePosted_];
    bool ready = true;
    for (uint32_t i : w) {
      // A receive-reduce lands in staging: only its consume waits (below).
      ready = ready && (plan_.ops[i].kind == OpKind::kRecvReduce || this->ready(plan_.ops[i]));
    }
    if (ready) {
      // Traced: the host time the wave was enqueued (engine/trace.h).
      const int64_t now = trace_ ? Tracer::now() : 0;
      for (uint32_t i : w) {
        const PlanOp& op = plan_.ops[i];
        const bool posted = op.kind == OpKind::kSend
            ? transport_.trySend(op.peer, at(op), bytes(op))
            : transport_.tryPostRecv(op.peer, inPlace(op) ? at(op) : nullptr, bytes(op));
        RC_ASSERT(posted, "a stream-ordered transport refused a post");
        if (OpTrace* t = traced(i)) {
          t->post = now;
          if (op.kind == OpKind::kSend) t->done = now;  // done once enqueued
        }
        state_[i] = 1;
      }
      transport_.flush();
      // Done once enqueued: whatever later writes these elements is ordered after the
      // batch on the device.
      for (uint32_t i : w) {
        if (plan_.ops[i].kind == OpKind::kSend) setDone(i);
      }
      ++wavePosted_;
      return true;
    }
  }
  if (waveConsumed_ < wavePosted_) {
    consumeWave(waves[waveConsumed_]);
    ++waveConsumed_;
    return true;
  }
  // Local transfers are reducer work, ordered on the device after the consumes
  // they depend on, like a consume.
  if (runLocals()) return true;
  if (runFinishes()) return true;
  // The join: a wave that only sends is never waited for by a receive, so without
  // it the job's end on the compute stream would not cover those sends, and the
  // caller could overwrite what NCCL has yet to read (transport/stream_transport.h).
  if (!joined_ && remaining_ == 0 && (devPeers_.empty() || devChecked_)) {
    transport_.fence();
    joined_ = true;
    return true;
  }
  return false;
}

void Execution::consumeWave(const std::vector<uint32_t>& wave) {
  std::vector<uint32_t> recvs;
  for (uint32_t i : wave) {
    if (plan_.ops[i].kind != OpKind::kSend) recvs.push_back(i);
  }
  std::vector<uint32_t> run;
  std::vector<const void*> views;
  for (size_t k = 0; k < recvs.size();) {
    const PlanOp& op = plan_.ops[recvs[k]];
    // What a receive posted ahead of its dependencies waits for (a receive-reduce,
    // plan.h) is an earlier receive of this wave, consumed above, or a local
    // operation that those made ready.
    if (!ready(op)) runLocals();
    RC_ASSERT(ready(op), job_.schedule.name, ": step ", op.step,
              " consumes a receive before what it depends on");
    // Receive-reduces into the same elements from other peers, each waiting only
    // for the ones before: one fused reduction (one kernel) in the same order.
    // Only buffer OP incoming ones: reduceMany folds each source in after the buffer.
    run.assign(1, recvs[k]);
    size_t e = k + 1;
    const bool fuses = op.kind == OpKind::kRecvReduce && !op.first;
    while (fuses && e < recvs.size()) {
      const PlanOp& nx = plan_.ops[recvs[e]];
      if (nx.kind != OpKind::kRecvReduce || nx.first || nx.begin != op.begin ||
          nx.count != op.count || !readyAfter(nx, run)) {
        break;
      }
      bool samePeer = false;
      for (uint32_t j : run) samePeer = samePeer || plan_.ops[j].peer == nx.peer;
      if (samePeer) break;  // recvView(peer) is the oldest receive from peer
      run.push_back(recvs[e++]);
    }
    // Then the local reduces into the same elements that come next (one-shot's own
    // input and the inputs that came early): the same fold, in the same order.
    size_t received = run.size();
    if (fuses) {
      for (uint32_t j : plan_.locals) {
        if (state_[j] == 2) continue;
        const PlanOp& lo = plan_.ops[j];
        if (lo.kind != OpKind::kLocalReduce || lo.first || lo.begin != op.begin ||
            lo.count != op.count || !readyAfter(lo, run)) {
          break;
        }
        run.push_back(j);
      }
    }
    if (run.size() == 1) {
      const void* view = transport_.recvView(op.peer);
      RC_ASSERT(view != nullptr, "a stream-ordered transport has no view of a posted receive");
      OpTrace* t = traced(recvs[k]);
      if (t) t->arrive = Tracer::now();
      consume(op, view);
      transport_.releaseRecv(op.peer);
      if (t) t->done = Tracer::now();
      setDone(recvs[k]);
    } else {
      views.clear();
      for (size_t x = 0; x < run.size(); ++x) {
        const PlanOp& o = plan_.ops[run[x]];
        const void* view = x < received ? transport_.recvView(o.peer) : at(o.src);
        RC_ASSERT(view != nullptr, "a stream-ordered transport has no view of a posted receive");
        views.push_back(view);
        if (OpTrace* t = traced(run[x])) t->arrive = Tracer::now();
      }
      reducer_.reduceMany(at(op), views.data(), views.size(), op.count, job_.dtype, job_.op);
      for (size_t x = 0; x < run.size(); ++x) {
        if (x < received) transport_.releaseRecv(plan_.ops[run[x]].peer);
        if (OpTrace* t = traced(run[x])) t->done = Tracer::now();
        setDone(run[x]);
      }
    }
    k = e;
  }
}

bool Execution::readyAfter(const PlanOp& op, const std::vector<uint32_t>& run) const {
  for (uint32_t d = op.depBegin; d < op.depEnd; ++d) {
    const uint32_t dep = plan_.deps[d];
    if (state_[dep] == 2) continue;
    if (std::find(run.begin(), run.end(), dep) == run.end()) return false;
  }
  return true;
}

}  // namespace ringcoll::algo
