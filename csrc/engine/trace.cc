#include "engine/trace.h"

#include <algorithm>
#include <utility>

namespace ringcoll::algo {

std::unique_ptr<CollectiveTrace> Tracer::open(const TraceTag& tag, const Schedule& schedule,
                                              const Plan& plan, uint64_t n, uint32_t elemSize,
                                              bool streamOrdered) {
  auto rec = std::make_unique<CollectiveTrace>();
  rec->op = tag.op;
  rec->seq = tag.seq;
  rec->issued = tag.issued;
  rec->start = now();
  rec->algorithm = schedule.name;
  rec->n = n;
  rec->elemSize = elemSize;
  rec->steps = static_cast<int>(schedule.steps.size());
  rec->streamOrdered = streamOrdered;
  rec->planOps = plan.ops.size();
  const size_t kept = std::min(plan.ops.size(), kMaxOps);
  rec->ops.resize(kept);
  for (size_t i = 0; i < kept; ++i) {
    const PlanOp& p = plan.ops[i];
    OpTrace& o = rec->ops[i];
    o.kind = p.kind;
    o.peer = p.peer;
    o.step = p.step;
    o.seg = p.seg;
    o.begin = p.begin;
    o.count = p.count;
    o.bytes = p.count * elemSize;
  }
  // Channel order: the k-th send to a peer pairs with the peer's k-th receive.
  for (const Channel& c : plan.channels) {
    for (size_t k = 0; k < c.sends.size(); ++k) {
      if (c.sends[k] < kept) rec->ops[c.sends[k]].index = static_cast<uint32_t>(k);
    }
    for (size_t k = 0; k < c.recvs.size(); ++k) {
      if (c.recvs[k] < kept) rec->ops[c.recvs[k]].index = static_cast<uint32_t>(k);
    }
  }
  return rec;
}

void Tracer::commit(std::unique_ptr<CollectiveTrace> record) {
  std::lock_guard<std::mutex> lock(mutex_);
  ops_ += record->ops.size() + record->headers.size();
  done_.push_back(std::move(record));
}

std::vector<std::unique_ptr<CollectiveTrace>> Tracer::take() {
  std::lock_guard<std::mutex> lock(mutex_);
  ops_ = 0;
  return std::exchange(done_, {});
}

bool Tracer::full() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_.size() >= kFlushCollectives || ops_ >= kFlushOps;
}

}  // namespace ringcoll::algo
