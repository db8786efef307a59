// Where futures' callbacks run when the thread that completed a collective must not
// run them: the CPU worker (it runs the group's collectives), a stream path's
// watchdog (it completes and times out the group's work) and point-to-point's
// progress thread. A callback may wait for another call on its own group (PowerSGD's
// DDP comm hook does: `fut.then(...)` whose callback waits on a new all-reduce's
// future), and that call needs those very threads to run, complete or time out.
//
// Closures start in post order, on threads of their own. One that blocks does not
// hold up the next: when a closure is posted and no thread is idle, one more thread
// starts (up to kMaxThreads; beyond that a post waits its turn, a deadlock only with
// that many callbacks blocked at once). Threads stay until the runner is destroyed,
// which runs what was posted and joins them (from one of its own threads it joins
// the others, and that one ends once its closure returns). No lock is held while a closure runs or is destroyed
// (common/locks.h): closures hold Works and tensors.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "common/locks.h"

namespace ringcoll {

class CallbackRunner {
 public:
  static constexpr int kMaxThreads = 64;

  CallbackRunner();
  ~CallbackRunner();
  CallbackRunner(const CallbackRunner&) = delete;
  CallbackRunner& operator=(const CallbackRunner&) = delete;

  void post(std::function<void()> fn);

 private:
  struct State;
  static void loop(const std::shared_ptr<State>& state);
  const std::shared_ptr<State> state_;
};

}  // namespace ringcoll
