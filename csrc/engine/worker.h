// One executor per backend, used by one thread at a time, in issue order: either
// the backend's worker thread, which runs queued tasks one after the other, or a
// calling thread that claimed it because nothing was queued or running (a small
// collective then runs without any thread hand-off). A claimed task that cannot
// finish promptly (a late peer) is handed off and runs next on the worker. Async ops
// therefore never reorder, and every rank runs the same sequence of collectives in
// the same order, which is what pairs their messages.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "common/locks.h"

namespace ringcoll {

class Worker {
 public:
  Worker();
  // Runs the tasks already queued, then joins.
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Tasks must not throw: they report failure through their Work.
  void enqueue(std::function<void()> task);

  // True if the caller may run a task itself now (nothing queued or running); it
  // must then call release() or handOff().
  bool tryClaim();
  void release();
  // Releases the claim and queues the rest of the caller's task first in line.
  void handOff(std::function<void()> rest);

 private:
  void loop();

  Mutex mutex_{"Worker::mutex_"};  // never held while a task runs or is destroyed
  std::condition_variable_any cv_;
  std::deque<std::function<void()>> queue_;
  bool busy_ = false;  // a task runs (on the worker or a claiming caller)
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ringcoll
