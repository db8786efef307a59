#include "algo/executor.h"

#include <algorithm>
#include <memory>

#include "common/errors.h"

namespace ringcoll::algo {

namespace {
size_t ceilDiv(size_t a, size_t b) { return (a + b - 1) / b; }

// Segment k of a block: at most segElems elements, possibly empty.
Range segmentOf(Range block, size_t segElems, size_t k) {
  const size_t begin = std::min(block.end, block.begin + k * segElems);
  const size_t end = std::min(block.end, begin + segElems);
  return Range{begin, end};
}
}  // namespace

Executor::Executor(Transport& transport, Reducer& reducer, Staging staging,
                   size_t segmentBytes)
    : transport_(transport), reducer_(reducer), staging_(staging),
      segmentBytes_(segmentBytes) {
  RC_ASSERT(segmentBytes_ > 0);
  RC_ASSERT(staging_.bytes >= 2 * segmentBytes_, "staging ", staging_.bytes,
            " < 2 x segment ", segmentBytes_);
}

size_t Executor::segmentElems(DType dtype) const {
  return std::max<size_t>(1, segmentBytes_ / elementSize(dtype));
}

int Executor::run(const Phase& phase, void* buf, size_t n, DType dtype, RedOp op) {
  const int p = size();
  const int me = rank();
  const size_t es = elementSize(dtype);
  const size_t segElems = segmentElems(dtype);
  const int blocks = phase.numBlocks(p, static_cast<int>(std::min<size_t>(
                                            ceilDiv(std::max<size_t>(n, 1), segElems), 1 << 20)));
  const int steps = phase.numSteps(p, blocks);
  char* base = static_cast<char*>(buf);
  char* stage[2] = {static_cast<char*>(staging_.ptr),
                    static_cast<char*>(staging_.ptr) + segmentBytes_};

  for (int s = 0; s < steps; ++s) {
    const Step st = phase.step(me, p, blocks, s);
    const Range sendBlock = st.send.active() ? blockRange(n, blocks, st.send.block) : Range{};
    const Range recvBlock = st.recv.active() ? blockRange(n, blocks, st.recv.block) : Range{};
    const bool reduce = st.action == Action::kReduce;
    const size_t segs = std::max(ceilDiv(sendBlock.size(), segElems),
                                 ceilDiv(recvBlock.size(), segElems));
    // Segment k is started before segment k-1 is reduced, so the transfer of one
    // overlaps the arithmetic on the other; a reduced segment lands in staging
    // slot k % 2, a copied one directly in place.
    auto startSegment = [&](size_t k) {
      const Range sr = segmentOf(sendBlock, segElems, k);
      const Range rr = segmentOf(recvBlock, segElems, k);
      void* recvPtr = reduce ? stage[k % 2] : base + rr.begin * es;
      return transport_.start(sr.size() ? st.send.peer : -1, base + sr.begin * es,
                              sr.size() * es, rr.size() ? st.recv.peer : -1, recvPtr,
                              rr.size() * es);
    };
    std::unique_ptr<Transport::Pending> next = segs ? startSegment(0) : nullptr;
    for (size_t k = 0; k < segs; ++k) {
      std::unique_ptr<Transport::Pending> cur = std::move(next);
      if (k + 1 < segs) next = startSegment(k + 1);
      cur->wait();
      const Range rr = segmentOf(recvBlock, segElems, k);
      if (reduce && rr.size()) {
        void* dst = base + rr.begin * es;
        reducer_.reduce(dst, dst, stage[k % 2], rr.size(), dtype, op);
      }
    }
  }
  return blocks;
}

}  // namespace ringcoll::algo
