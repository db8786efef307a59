// The executor's view of a collective in progress (engine/executor.h).
#pragma once

#include <chrono>
#include <memory>
#include <string>

namespace ringcoll::algo {

// One collective in progress, as Executor::drive() runs it: an Execution of a
// schedule, or a small collective (engine/small.h). progress() never blocks;
// done() once every transfer is complete and the caller may use the buffer.
class Run {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~Run() = default;
  // One pass over everything that can move; true if anything did.
  virtual bool progress() = 0;
  virtual bool done() const = 0;
  // The peer this run waits for (-1 if none known) and what for.
  virtual int waitingPeer() const = 0;
  virtual std::string waitingWhat() const = 0;
  virtual Clock::time_point lastMove() const = 0;
  // The schedule's name (logs, RINGCOLL_DEBUG).
  virtual const std::string& name() const = 0;
};

// A run as the executor hands it out: owned by the handle (an Execution), or living
// in the executor's own storage and only borrowed (a small collective, remade in
// place for each call: the executor runs one collective at a time).
struct RunRelease {
  bool owned = true;
  void operator()(Run* r) const {
    if (owned) delete r;
  }
};
using RunHandle = std::unique_ptr<Run, RunRelease>;

}  // namespace ringcoll::algo
