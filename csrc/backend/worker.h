// One thread per backend that runs its CPU collectives in issue order. Async ops
// therefore never reorder, and every rank runs the same sequence of collectives in
// the same order, which is what pairs their messages.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

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

 private:
  void loop();

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ringcoll
