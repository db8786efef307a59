#include "common/callbacks.h"

namespace ringcoll {

// What the threads share with the runner; it outlives the runner when one of its
// own threads destroys it (a callback that dropped the last reference to its
// owner): that thread is detached and finds the state still there.
struct CallbackRunner::State {
  Mutex mutex{"CallbackRunner::mutex"};
  std::condition_variable_any cv;
  std::deque<std::function<void()>> queue;
  std::vector<std::thread> threads;
  int idle = 0;  // threads waiting for a closure
  bool stopping = false;
};

CallbackRunner::CallbackRunner() : state_(std::make_shared<State>()) {}

CallbackRunner::~CallbackRunner() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<Mutex> lock(state_->mutex);
    state_->stopping = true;
    threads.swap(state_->threads);
  }
  state_->cv.notify_all();
  for (auto& t : threads) {
    if (t.get_id() == std::this_thread::get_id()) {
      t.detach();  // this very thread: it drains and ends on its own (State is shared)
    } else {
      t.join();
    }
  }
}

void CallbackRunner::post(std::function<void()> fn) {
  State& s = *state_;
  {
    std::lock_guard<Mutex> lock(s.mutex);
    s.queue.push_back(std::move(fn));
    // Every idle thread may be about to take an earlier closure: start one more
    // whenever the closures waiting outnumber the idle threads. (Not once stopping:
    // the destructor joins the threads it took, which drain the queue first.)
    if (!s.stopping && static_cast<size_t>(s.idle) < s.queue.size() &&
        s.threads.size() < static_cast<size_t>(kMaxThreads)) {
      s.threads.emplace_back([state = state_] { loop(state); });
    }
  }
  s.cv.notify_one();
}

void CallbackRunner::loop(const std::shared_ptr<State>& state) {
  markOwnThread();
  State& s = *state;
  for (;;) {
    std::function<void()> fn;
    {
      std::unique_lock<Mutex> lock(s.mutex);
      ++s.idle;
      s.cv.wait(lock, [&s] { return s.stopping || !s.queue.empty(); });
      --s.idle;
      if (s.queue.empty()) return;  // stopping, and nothing left
      fn = std::move(s.queue.front());
      s.queue.pop_front();
    }
    fn();
    fn = nullptr;  // what it held goes here, unlocked
  }
}

}  // namespace ringcoll
