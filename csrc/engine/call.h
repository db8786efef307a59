// A collective call as the backend runs it, on either path (CPU worker or CUDA
// stream): the body prepares the working buffer (a contiguous copy, the input
// placed in its block, PREMUL_SUM's scaling) and returns the job for the executor,
// plus what to do once the job is done (copy the result out). The finish closure
// also keeps the working buffer alive while the job runs.
#pragma once

#include <functional>
#include <optional>

#include "engine/executor.h"

namespace ringcoll {

struct Staged {
  algo::Job job;
  std::function<void()> finish;  // may be empty
  // When set, the call runs as this small collective instead of `job` (CPU path
  // only; engine/small.h); the backend fills in its fingerprint.
  std::optional<algo::SmallJob> small;
};

using Body = std::function<Staged(algo::Executor&)>;

}  // namespace ringcoll
