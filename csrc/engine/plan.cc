#include "engine/plan.h"

#include <algorithm>

#include "common/errors.h"

namespace ringcoll::algo {

namespace {

bool local(OpKind k) { return k == OpKind::kLocalCopy || k == OpKind::kLocalReduce; }
// Of the elements [begin, begin + count): a local op also reads [src, src + count).
bool reads(OpKind k) { return k != OpKind::kRecvCopy && k != OpKind::kLocalCopy; }
bool writes(OpKind k) { return k != OpKind::kSend; }

OpKind opKind(Kind k) {
  switch (k) {
    case Kind::kSend: return OpKind::kSend;
    case Kind::kRecvCopy: return OpKind::kRecvCopy;
    case Kind::kRecvReduce: case Kind::kRecvReduceFirst: return OpKind::kRecvReduce;
  }
  RC_ASSERT(false, "unknown transfer kind");
}

void addSegments(std::vector<PlanOp>& ops, OpKind kind, int peer, int step, Range r,
                 size_t segElems) {
  uint32_t k = 0;
  for (size_t b = r.begin; b < r.end; b += segElems, ++k) {
    PlanOp op;
    op.kind = kind;
    op.peer = peer;
    op.step = step;
    op.seg = k;
    op.begin = b;
    op.count = std::min(segElems, r.end - b);
    ops.push_back(op);
  }
}

// A step's local transfers (schedules/schedule.h): its k-th send to itself pairs
// with its k-th receive from itself; each pair becomes local ops, segment by
// segment, reading the send's range and writing the receive's.
void addLocals(std::vector<PlanOp>& ops, const Step& st, int self, int step, size_t segElems) {
  std::vector<const Transfer*> sends, recvs;
  for (const Transfer& t : st.transfers) {
    if (t.peer != self || t.range.empty()) continue;
    (t.kind == Kind::kSend ? sends : recvs).push_back(&t);
  }
  RC_ASSERT(sends.size() == recvs.size(), "step ", step, ": ", sends.size(),
            " local sends and ", recvs.size(), " local receives");
  for (size_t k = 0; k < sends.size(); ++k) {
    const Range from = sends[k]->range, to = recvs[k]->range;
    RC_ASSERT(from.size() == to.size() && !from.overlaps(to), "step ", step,
              ": local transfer of [", from.begin, ", ", from.end, ") into [", to.begin,
              ", ", to.end, ")");
    const size_t before = ops.size();
    addSegments(ops, recvs[k]->kind == Kind::kRecvCopy ? OpKind::kLocalCopy : OpKind::kLocalReduce,
                -1, step, to, segElems);
    for (size_t i = before; i < ops.size(); ++i) {
      ops[i].src = from.begin + (ops[i].begin - to.begin);
      ops[i].first = recvs[k]->kind == Kind::kRecvReduceFirst;
    }
  }
}

// Element intervals between all operation boundaries: every operation covers a
// run of whole intervals, so "which earlier operations touch these elements" is a
// walk over a few intervals instead of a search over all operations.
struct Intervals {
  explicit Intervals(const std::vector<PlanOp>& ops) {
    for (const auto& op : ops) {
      cuts.push_back(op.begin);
      cuts.push_back(op.begin + op.count);
      if (local(op.kind)) {
        cuts.push_back(op.src);
        cuts.push_back(op.src + op.count);
      }
    }
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    lastWriter.assign(cuts.empty() ? 0 : cuts.size() - 1, -1);
    readers.resize(lastWriter.size());
  }
  std::pair<size_t, size_t> of(size_t begin, size_t count) const {
    const auto lo = std::lower_bound(cuts.begin(), cuts.end(), begin) - cuts.begin();
    const auto hi = std::lower_bound(cuts.begin(), cuts.end(), begin + count) - cuts.begin();
    return {static_cast<size_t>(lo), static_cast<size_t>(hi)};
  }
  std::pair<size_t, size_t> of(const PlanOp& op) const { return of(op.begin, op.count); }
  std::vector<size_t> cuts;
  std::vector<int64_t> lastWriter;              // per interval
  std::vector<std::vector<uint32_t>> readers;  // since the last write, per interval
};

}  // namespace

std::vector<int> stepLayers(const Plan& plan, size_t steps) {
  // A step joins the layer of the step before it unless one of its transfers
  // would have to wait for that layer, or a transfer of either step has more than
  // one segment.
  const auto& ops = plan.ops;
  std::vector<uint8_t> multiSeg(steps, 0);
  std::vector<std::vector<uint32_t>> byStep(steps);
  for (uint32_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind == OpKind::kFinish || local(ops[i].kind)) continue;
    byStep[static_cast<size_t>(ops[i].step)].push_back(i);
    if (ops[i].seg > 0) multiSeg[static_cast<size_t>(ops[i].step)] = 1;
  }
  std::vector<int> layerOf(steps, 0);
  int layer = 0;
  size_t first = 0;  // the current layer's first step
  for (size_t st = 0; st < steps; ++st) {
    bool waits = false;
    for (uint32_t i : byStep[st]) {
      // A receive-reduce lands in staging, wherever it is posted: only its consume
      // waits for what it depends on, and consumes run after the batch.
      if (ops[i].kind == OpKind::kRecvReduce) continue;
      for (uint32_t d = ops[i].depBegin; d < ops[i].depEnd; ++d) {
        if (static_cast<size_t>(ops[plan.deps[d]].step) >= first) waits = true;
      }
    }
    const bool joins = st > first && !waits && !multiSeg[st] && !multiSeg[st - 1];
    if (st > 0 && !joins) {
      ++layer;
      first = st;
    }
    layerOf[st] = layer;
  }
  return layerOf;
}

Plan compilePlan(const Schedule& schedule, size_t segElems, bool finish, int self) {
  RC_ASSERT(segElems > 0);
  Plan plan;
  auto& ops = plan.ops;
  for (size_t s = 0; s < schedule.steps.size(); ++s) {
    const Step& st = schedule.steps[s];
    for (const Transfer& t : st.transfers) {
      if (t.peer == self) continue;
      const size_t before = ops.size();
      addSegments(ops, opKind(t.kind), t.peer, static_cast<int>(s), t.range, segElems);
      for (size_t i = before; i < ops.size(); ++i) ops[i].first = t.kind == Kind::kRecvReduceFirst;
    }
    addLocals(ops, st, self, static_cast<int>(s), segElems);
    if (finish) {
      for (const Range& r : st.reduced) {
        addSegments(ops, OpKind::kFinish, -1, static_cast<int>(s), r, segElems);
      }
    }
  }

  // Dependencies, and who depends on each receive-reduce (for forwarding).
  Intervals iv(ops);
  std::vector<std::vector<uint32_t>> dependents(ops.size());
  for (uint32_t i = 0; i < ops.size(); ++i) {
    const PlanOp& op = ops[i];
    const auto [lo, hi] = iv.of(op);
    std::vector<uint32_t> mine;
    for (size_t e = lo; e < hi; ++e) {
      if (iv.lastWriter[e] >= 0) mine.push_back(static_cast<uint32_t>(iv.lastWriter[e]));
      if (writes(op.kind)) mine.insert(mine.end(), iv.readers[e].begin(), iv.readers[e].end());
    }
    // A local op also reads its source: after its last writer, before its next.
    const auto [srcLo, srcHi] = local(op.kind) ? iv.of(op.src, op.count) : std::pair<size_t, size_t>{0, 0};
    for (size_t e = srcLo; e < srcHi; ++e) {
      if (iv.lastWriter[e] >= 0) mine.push_back(static_cast<uint32_t>(iv.lastWriter[e]));
    }
    std::sort(mine.begin(), mine.end());
    mine.erase(std::unique(mine.begin(), mine.end()), mine.end());
    ops[i].depBegin = static_cast<uint32_t>(plan.deps.size());
    plan.deps.insert(plan.deps.end(), mine.begin(), mine.end());
    ops[i].depEnd = static_cast<uint32_t>(plan.deps.size());
    for (uint32_t d : mine) dependents[d].push_back(i);
    for (size_t e = lo; e < hi; ++e) {
      if (writes(op.kind)) {
        iv.readers[e].clear();
        iv.lastWriter[e] = i;
      } else {
        iv.readers[e].push_back(i);
      }
    }
    for (size_t e = srcLo; e < srcHi; ++e) iv.readers[e].push_back(i);
  }

  // Forwarding candidates: a send of exactly a receive-reduce's elements that
  // waits for nothing else.
  for (uint32_t i = 0; i < ops.size(); ++i) {
    PlanOp& op = ops[i];
    if (op.kind != OpKind::kRecvReduce) continue;
    for (uint32_t d : dependents[i]) {
      const PlanOp& s = ops[d];
      if (s.kind == OpKind::kSend && !s.forwarded && s.begin == op.begin &&
          s.count == op.count && s.depEnd - s.depBegin == 1) {
        op.forward = static_cast<int32_t>(d);
        ops[d].forwarded = true;
        break;
      }
    }
    if (op.forward < 0) continue;
    bool live = false;
    for (uint32_t d : dependents[i]) {
      if (static_cast<int32_t>(d) != op.forward && (reads(ops[d].kind) || local(ops[d].kind))) live = true;
    }
    const auto [lo, hi] = iv.of(op);
    for (size_t e = lo; e < hi && !live; ++e) {
      const Range cell{iv.cuts[e], iv.cuts[e + 1]};
      if (iv.lastWriter[e] == static_cast<int64_t>(i) && cell.overlaps(schedule.result)) {
        live = true;  // part of the output, never overwritten
      }
    }
    op.localLive = live;
  }

  // Channels, in transport order.
  std::vector<int> chanOf;
  for (uint32_t i = 0; i < ops.size(); ++i) {
    const PlanOp& op = ops[i];
    if (op.kind == OpKind::kFinish) {
      plan.finishes.push_back(i);
      continue;
    }
    if (local(op.kind)) {
      plan.locals.push_back(i);
      continue;
    }
    if (op.peer >= static_cast<int>(chanOf.size())) chanOf.resize(op.peer + 1, -1);
    if (chanOf[op.peer] < 0) {
      chanOf[op.peer] = static_cast<int>(plan.channels.size());
      plan.channels.push_back(Channel{op.peer, {}, {}});
    }
    Channel& c = plan.channels[chanOf[op.peer]];
    (op.kind == OpKind::kSend ? c.sends : c.recvs).push_back(i);
  }

  // Waves (plan.h): the transfers by (layer, segment).
  const std::vector<int> layerOf = stepLayers(plan, schedule.steps.size());
  // Ops are in (step, transfer, segment) order; regroup by (layer, segment).
  std::vector<uint32_t> byWave;
  for (uint32_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind != OpKind::kFinish && !local(ops[i].kind)) byWave.push_back(i);
  }
  auto key = [&](uint32_t i) {
    return std::make_pair(layerOf[static_cast<size_t>(ops[i].step)], ops[i].seg);
  };
  std::stable_sort(byWave.begin(), byWave.end(),
                   [&](uint32_t a, uint32_t b) { return key(a) < key(b); });
  for (uint32_t i : byWave) {
    if (plan.waves.empty() || key(plan.waves.back()[0]) != key(i)) plan.waves.emplace_back();
    plan.waves.back().push_back(i);
  }
  return plan;
}

std::shared_ptr<const Plan> PlanCache::get(const Schedule& schedule, size_t segElems,
                                           bool finish, int self) {
  for (const Entry& e : entries_) {
    if (e.segElems == segElems && e.finish == finish && e.self == self &&
        e.result == schedule.result && e.steps == schedule.steps) {
      return e.plan;
    }
  }
  auto plan = std::make_shared<const Plan>(compilePlan(schedule, segElems, finish, self));
  if (plan->ops.size() <= kMaxOps) {
    Entry e{schedule.steps, schedule.result, segElems, finish, self, plan};
    if (entries_.size() < kEntries) {
      entries_.push_back(std::move(e));
    } else {
      entries_[next_] = std::move(e);
      next_ = (next_ + 1) % kEntries;
    }
  }
  return plan;
}

}  // namespace ringcoll::algo
