#include "common/cpu_stream.h"

#include <random>

namespace ringcoll {

CpuStream::CpuStream(std::string name, uint32_t maxDelayUs)
    : name_(std::move(name)), maxDelayUs_(maxDelayUs), thread_([this] { loop(); }) {}

CpuStream::~CpuStream() {
  abort();
  {
    std::lock_guard<Mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CpuStream::enqueue(Task task) {
  {
    std::lock_guard<Mutex> lock(mutex_);
    queue_.push_back(Item{std::move(task), nullptr});
  }
  cv_.notify_all();
}

CpuStream::MarkerPtr CpuStream::mark() {
  auto m = std::make_shared<Marker>();
  // Markers complete even on a failed or aborted stream: whoever waits for one
  // learns of the failure from error()/aborted(), not by waiting forever.
  std::lock_guard<Mutex> lock(mutex_);
  queue_.push_back(Item{nullptr, m});
  cv_.notify_all();
  return m;
}

void CpuStream::waitFor(MarkerPtr m) {
  enqueue([this, m] {
    while (!m->done()) {
      if (aborted()) return;
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  });
}

bool CpuStream::sync(std::chrono::steady_clock::time_point until) {
  std::unique_lock<Mutex> lock(mutex_);
  return cv_.wait_until(lock, until, [this] { return queue_.empty() && !running_; });
}

std::exception_ptr CpuStream::error() const {
  std::lock_guard<Mutex> lock(mutex_);
  return error_;
}

void CpuStream::abort() { aborted_.store(true, std::memory_order_release); }

void CpuStream::loop() {
  markOwnThread();
  std::mt19937 rng(std::random_device{}());
  std::unique_lock<Mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_
    Item item = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    const bool skip = error_ != nullptr || aborted();
    lock.unlock();
    std::exception_ptr failed;
    if (item.marker) {
      item.marker->failed_.store(skip, std::memory_order_release);
      item.marker->done_.store(true, std::memory_order_release);
    } else if (!skip) {
      if (maxDelayUs_ > 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % (maxDelayUs_ + 1)));
      }
      try {
        item.task();
      } catch (...) {
        failed = std::current_exception();
      }
    }
    item = Item{};  // what the task captured goes here, unlocked
    lock.lock();
    if (failed && !error_) error_ = failed;
    running_ = false;
    if (queue_.empty()) cv_.notify_all();
  }
}

}  // namespace ringcoll
