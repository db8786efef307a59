// The executor walks a schedule (algo/schedule.h) over one buffer, calling only the
// transport's start/wait and the reducer. It knows how bytes are addressed (block
// ranges, segments, the staging area) but not how they move.
#pragma once

#include <cstddef>

#include "algo/schedule.h"
#include "reduce/reducer.h"
#include "reduce/types.h"
#include "transport/transport.h"

namespace ringcoll::algo {

// Device memory the executor may use to receive blocks that are reduced: two
// segments, so segment k+1 is in flight while segment k is reduced.
struct Staging {
  void* ptr = nullptr;
  size_t bytes = 0;
};

class Executor {
 public:
  // segmentBytes: the largest single transfer (RINGCOLL_CHUNK_BYTES); staging must
  // hold 2 * segmentBytes.
  Executor(Transport& transport, Reducer& reducer, Staging staging, size_t segmentBytes);

  int rank() const { return transport_.rank(); }
  int size() const { return transport_.size(); }
  Reducer& reducer() { return reducer_; }

  // Elements per segment for this dtype (at least one).
  size_t segmentElems(DType dtype) const;

  // Runs every step of `phase` in place on `buf` (n elements of dtype). For a
  // reducing phase, received data is combined into the local block with `op`.
  // Returns the number of blocks the phase split the buffer into.
  int run(const Phase& phase, void* buf, size_t n, DType dtype, RedOp op);

 private:
  Transport& transport_;
  Reducer& reducer_;
  Staging staging_;
  size_t segmentBytes_;
};

}  // namespace ringcoll::algo
