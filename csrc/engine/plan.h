// A plan: one rank's schedule compiled into segment-sized operations with their
// dependencies, which the executor walks with no barrier between steps.
//
// Every transfer (and every range a reducing schedule marks complete, when the
// collective finishes its reduction there) is cut into segments of at most
// `segElems` elements, in the order (step, transfer, segment); the k-th segment of
// a send pairs with the k-th segment of the matching receive, since both ranks cut
// equal ranges the same way. An operation depends only on the earlier operations
// that touch overlapping elements and conflict with it:
//
//   read after write   a send (or a reduce) of elements an earlier receive wrote;
//   write after read   a receive into elements an earlier send still reads;
//   write after write  two receives into the same elements keep their order.
//
// So segment k of step s+1 leaves as soon as segment k of step s is reduced, while
// segment k+1 of step s is still on its way.
//
// A local transfer's two ranges are cut the same way into local operations, which
// read one range and write the other; they are in no channel and no wave.
//
// Waves: what a stream-ordered transport (NCCL) gets as one batch, in wave order.
// Steps are grouped into layers: a step joins the layer of the step before it when
// none of its sends and in-place receives depends on an operation of that layer
// (a receive-reduce lands in staging and only its consume waits) and every
// transfer of both steps is one segment. A wave is the transfers of one layer with
// the same segment index: a one-hop collective (one-shot; two-shot's reduce-scatter,
// then its all-gather; all-to-all) posts each phase as one batch, a ring one per
// step and segment. Why a rank may group steps its peers do not, and still never
// wait forever: messages pair within a step (schedule.h); each rank's batches run
// in order and hold ascending (step, segment) ranges, a grouped batch only steps of
// one segment; NCCL progresses the operations of one group independently. So the
// first operation that never started would have to sit behind an earlier batch
// that never completed, whose operations pair with peers' operations that come
// before it in (step, segment) order and so did start: there is none.
// tests/test_schedule.py checks these properties on every algorithm's plans.
//
// Forwarding: when a send carries exactly the elements a receive-reduce just
// produced and depends on nothing else, the executor may write the reduction
// straight into the outgoing message (a copying transport's send slot) instead of
// reducing in place and copying out again. `localLive` says whether the in-place
// result is still needed (read later, or part of the result and never
// overwritten); if not, the reduction is written to the message only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "schedules/schedule.h"

namespace ringcoll::algo {

// kLocalCopy / kLocalReduce: a local transfer (schedules/schedule.h), elements
// [src, src + count) copied or reduced into [begin, begin + count) on this rank.
enum class OpKind : uint8_t { kSend, kRecvCopy, kRecvReduce, kFinish, kLocalCopy, kLocalReduce };

struct PlanOp {
  OpKind kind = OpKind::kSend;
  int peer = -1;     // kFinish, kLocal*: -1
  int step = 0;
  uint32_t seg = 0;  // segment index within its transfer (or marked range)
  size_t begin = 0;  // elements
  size_t count = 0;
  size_t src = 0;    // kLocal*: the first element read
  uint32_t depBegin = 0, depEnd = 0;  // into Plan::deps
  int32_t forward = -1;               // kRecvReduce: the send it may be written into
  bool localLive = true;              // kRecvReduce with forward: keep the in-place result
  bool forwarded = false;             // kSend: the forward of some receive-reduce
  bool first = false;  // kRecvReduce, kLocalReduce: incoming OP buffer (Kind::kRecvReduceFirst)
};

// The operations with one peer, in the order the transport carries them.
struct Channel {
  int peer = -1;
  std::vector<uint32_t> sends;
  std::vector<uint32_t> recvs;
};

struct Plan {
  std::vector<PlanOp> ops;
  std::vector<uint32_t> deps;
  std::vector<Channel> channels;
  std::vector<uint32_t> finishes;  // kFinish ops, in order
  std::vector<uint32_t> locals;    // kLocal* ops, in order
  std::vector<std::vector<uint32_t>> waves;  // transfers by (layer, segment), in order
};

// The layer of each of a schedule's `steps` steps (Waves, above), from its plan's
// operations and dependencies: what compilePlan groups waves by, and what the cost
// model counts a stream-ordered transport's batches by (bindings: schedule_layers).
std::vector<int> stepLayers(const Plan& plan, size_t steps);

// `finish`: also plan a kFinish op on every range the schedule marks reduced.
// `self`: the rank the schedule is for (its transfers with peer `self` are local).
// Precondition: segElems > 0.
Plan compilePlan(const Schedule& schedule, size_t segElems, bool finish, int self);

// The plans of the last few schedules compiled, for calls that repeat (a training
// step's all-reduces, a decoder's per-layer ones): compiling costs more than a
// small collective's transfers. A plan is reused only for a schedule with the
// same steps (transfers and reduced ranges), result range and arguments: all
// compilePlan reads, so it is the plan compilePlan would return. Plans over kMaxOps operations are not kept.
// Not thread-safe: one per executor, which one thread uses at a time.
class PlanCache {
 public:
  std::shared_ptr<const Plan> get(const Schedule& schedule, size_t segElems, bool finish,
                                  int self);

  static constexpr size_t kEntries = 8;
  static constexpr size_t kMaxOps = 4096;

 private:
  struct Entry {
    std::vector<Step> steps;
    Range result;
    size_t segElems = 0;
    bool finish = false;
    int self = -1;
    std::shared_ptr<const Plan> plan;
  };
  std::vector<Entry> entries_;
  size_t next_ = 0;  // the entry replaced next, once all are taken
};

}  // namespace ringcoll::algo
