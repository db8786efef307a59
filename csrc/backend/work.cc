#include "backend/work.h"

#include <c10/util/Exception.h>

#include "common/locks.h"

namespace ringcoll {

void postFailureReport(const c10::intrusive_ptr<c10d::Store>& store, const std::string& key,
                       const std::string& text) {
  try {
    store->set(key, std::vector<uint8_t>(text.begin(), text.end()));
  } catch (const std::exception&) {
  }
}

std::string readFailureReport(const c10::intrusive_ptr<c10d::Store>& store,
                              const std::string& key) {
  try {
    if (store->check({key})) {
      const std::vector<uint8_t> v = store->get(key);
      return std::string(v.begin(), v.end());
    }
  } catch (const std::exception&) {
  }
  return "";
}

RingcollWork::RingcollWork(int rank, c10d::OpType type, CallLabel label, uint64_t seq,
                           std::chrono::milliseconds timeout,
                           std::vector<at::Tensor> outputs,
                           std::function<std::string()> describeWait)
    : c10d::Work(rank, type),
      label_(std::move(label)),
      seq_(seq),
      timeout_(timeout),
      outputs_(std::move(outputs)),
      describeWait_(std::move(describeWait)) {}

c10::intrusive_ptr<RingcollWork> RingcollWork::completed(int rank, c10d::OpType type,
                                                        CallLabel label,
                                                        std::chrono::milliseconds timeout,
                                                        std::vector<at::Tensor> outputs) {
  const uint64_t seq = label.seq;
  auto work = c10::make_intrusive<RingcollWork>(rank, type, label, seq, timeout,
                                                std::move(outputs), nullptr);
  // Nobody else has it yet: no lock, and nobody to notify.
  work->ended_ = true;
  work->completed_ = true;
  return work;
}

RingcollWork::~RingcollWork() { checkNoLockHeld("destroying a Work (its tensors)"); }

std::string CallLabel::str() const { return c10::str(*this); }

std::ostream& operator<<(std::ostream& os, const CallLabel& l) {
  return os << "ringcoll::" << l.op << " #" << l.seq << " (rank " << l.rank << " of " << l.size
            << ")";
}

std::vector<at::Tensor> RingcollWork::result() { return outputs_; }

// Made on first request (most calls never ask; DDP's hooks do, before the call
// ends): a future made after the call ended is made completed.
c10::intrusive_ptr<c10::ivalue::Future> RingcollWork::getFuture() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!future_) {
    future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors());
    if (ended_) {
      if (exception_) {
        future_->setError(exception_);
      } else {
        future_->markCompleted(c10::IValue(outputs_));
      }
    }
  }
  return future_;
}

bool RingcollWork::wait(std::chrono::milliseconds timeout) {
  const auto limit = timeout == kNoTimeout ? timeout_ : timeout;
  std::unique_lock<std::mutex> lock(mutex_);
  // Most small calls have ended by the time they are waited for: no clock read then.
  if (!completed_ && !cv_.wait_for(lock, limit, [this] { return completed_; })) {
    lock.unlock();
    C10_THROW_ERROR(DistBackendError,
                    c10::str(label_, ": Timed out after ", limit.count(), " ms in wait(); ",
                             describeWait()));
  }
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

// The future, if made, is completed before wait() is released, so a caller that
// returns from wait() always finds getFuture().value() set. DDP's comm-hook
// callbacks run inside markCompleted, on the thread that ran the collective.
void RingcollWork::finish(CallbackRunner* callbacks) { end(nullptr, callbacks); }

void RingcollWork::finishWithError(std::exception_ptr error, CallbackRunner* callbacks) {
  end(std::move(error), callbacks);
}

void RingcollWork::end(std::exception_ptr error, CallbackRunner* callbacks) {
  checkNoLockHeld("completing a Work (its future's callbacks)");
  c10::intrusive_ptr<c10::ivalue::Future> future;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ended_ = true;  // from here getFuture() makes a completed future
    exception_ = error;
    future = future_;
  }
  if (future && callbacks) {
    // A future made before the end may have callbacks: they run on the runner's
    // threads, and wait() is released there too, once the future is completed.
    auto self = c10::intrusive_ptr<RingcollWork>::reclaim_copy(this);
    callbacks->post([self, future, error] { self->complete(future, error); });
    return;
  }
  complete(future, error);
}

void RingcollWork::complete(const c10::intrusive_ptr<c10::ivalue::Future>& future,
                            std::exception_ptr error) {
  if (future) {
    if (error) {
      future->setError(error);
    } else {
      future->markCompleted(c10::IValue(outputs_));
    }
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    completed_ = true;
  }
  cv_.notify_all();
}
}  // namespace ringcoll
