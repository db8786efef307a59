// ringcoll's c10d::Work: one per collective, point-to-point or coalesced call.
//
// Contract (c10d's Work.hpp): wait() blocks until the collective finished and
// rethrows its error; it honours a timeout (the call's, else the group's) and then
// throws a DistBackendError naming the op, its sequence number, this rank and the
// peer the collective was waiting for. getFuture() returns a Future of List[Tensor]
// completed with the output tensors, as DDP's comm hooks expect.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <ostream>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "common/callbacks.h"

namespace ringcoll {

// A failure one rank saw, left in the group's store under `key` for the others
// (both paths: the CPU worker and the CUDA watchdog). Best effort: the store's host
// may be the rank that died, and then the others' own timeouts end their waits.
void postFailureReport(const c10::intrusive_ptr<c10d::Store>& store, const std::string& key,
                       const std::string& text);
// The report under `key`, "" if none (or the store is unreachable).
std::string readFailureReport(const c10::intrusive_ptr<c10d::Store>& store,
                              const std::string& key);

// "ringcoll::allreduce #7 (rank 1 of 4)": the prefix of every runtime error of a
// call. Every call has one and few print it, so it is formatted only when printed
// (c10::str(label, ...) or str()). `op` is a string literal.
struct CallLabel {
  const char* op;
  uint64_t seq;
  int rank;
  int size;
  std::string str() const;
};
std::ostream& operator<<(std::ostream& os, const CallLabel& label);

class RingcollWork final : public c10d::Work {
 public:
  // `describeWait` is called only on timeout, to say whom the op waits for.
  // `label`: see label() below; it prefixes the timeout error.
  RingcollWork(int rank, c10d::OpType type, CallLabel label, uint64_t seq,
               std::chrono::milliseconds timeout, std::vector<at::Tensor> outputs,
               std::function<std::string()> describeWait);
  // A Work for a call that already ended well (backend: runSmallNow): completed,
  // its future made completed when asked for.
  static c10::intrusive_ptr<RingcollWork> completed(int rank, c10d::OpType type, CallLabel label,
                                                    std::chrono::milliseconds timeout,
                                                    std::vector<at::Tensor> outputs);
  // Its outputs may be the last references to Python-owned tensors.
  ~RingcollWork() override;

  // isCompleted/isSuccess/exception: c10d::Work's, over its completed_/exception_.
  std::vector<at::Tensor> result() override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  void synchronize() override {}
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  uint64_t getSequencenumber() const override { return seq_; }
  // A receive's sender (recv from any source); -1 otherwise.
  int sourceRank() const override { return sourceRank_.load(); }
  void setSourceRank(int rank) { sourceRank_.store(rank); }
  // Whom the op waits for ("it was waiting for rank 2"): what its timeout says.
  std::string describeWait() const { return describeWait_ ? describeWait_() : std::string(); }
  const CallLabel& label() const { return label_; }

  // Called once, by whoever ran it, with no ringcoll lock held: the future's
  // callbacks run inside (common/locks.h), or, with `callbacks`, on its threads
  // (common/callbacks.h: the caller is a thread the callbacks may wait for). Either
  // way the future is completed before wait() returns and is_completed() is true.
  void finish(CallbackRunner* callbacks = nullptr);
  void finishWithError(std::exception_ptr error, CallbackRunner* callbacks = nullptr);


 private:
  const CallLabel label_;
  const uint64_t seq_;
  const std::chrono::milliseconds timeout_;
  std::vector<at::Tensor> outputs_;
  std::function<std::string()> describeWait_;
  std::atomic<int> sourceRank_{-1};
  void end(std::exception_ptr error, CallbackRunner* callbacks);
  // The end's second half: the future, then completed_ (what wait() waits for).
  void complete(const c10::intrusive_ptr<c10::ivalue::Future>& future, std::exception_ptr error);

  bool ended_ = false;  // the outputs are final (under mutex_)
  c10::intrusive_ptr<c10::ivalue::Future> future_;  // made by getFuture()
};

}  // namespace ringcoll
