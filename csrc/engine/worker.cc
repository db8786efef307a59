#include "engine/worker.h"

namespace ringcoll {

Worker::Worker() : thread_([this] { loop(); }) {}

Worker::~Worker() {
  {
    std::lock_guard<Mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Worker::enqueue(std::function<void()> task) {
  {
    std::lock_guard<Mutex> lock(mutex_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
}

bool Worker::tryClaim() {
  std::lock_guard<Mutex> lock(mutex_);
  if (busy_ || !queue_.empty()) return false;
  busy_ = true;
  return true;
}

void Worker::release() {
  bool queued;
  {
    std::lock_guard<Mutex> lock(mutex_);
    busy_ = false;
    queued = !queue_.empty();
  }
  // Wake the worker only for a task queued behind the claim: a wake-up for nothing
  // costs a context switch on every small collective, often on the caller's core.
  if (queued) cv_.notify_one();
}

void Worker::handOff(std::function<void()> rest) {
  {
    std::lock_guard<Mutex> lock(mutex_);
    queue_.push_front(std::move(rest));
    busy_ = false;
  }
  cv_.notify_one();
}

void Worker::loop() {
  markOwnThread();
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<Mutex> lock(mutex_);
      cv_.wait(lock, [this] { return (stopping_ && !busy_) || (!busy_ && !queue_.empty()); });
      if (queue_.empty()) return;  // stopping and drained
      task = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    task();
    {
      std::lock_guard<Mutex> lock(mutex_);
      busy_ = false;
    }
  }
}

}  // namespace ringcoll
