// CpuStream: a CUDA stream's ordering contract on the host, for the CPU emulation
// of the GPU path (RINGCOLL_TRANSPORT=stream; transport/cpu_stream_transport.h,
// reduce/stream_reducer.h). Tasks run later, one at a time, in enqueue order, on
// the stream's own thread; enqueue() never waits for them. A marker completes
// once every task enqueued before it ran; waitFor() makes this stream wait for a
// marker of another stream (cudaStreamWaitEvent). A task that throws leaves the
// stream failed: the error is kept (error()) and every later task is skipped, as
// a CUDA stream after a fault. abort() makes a waiting task give up and skips the
// rest (ncclCommAbort makes stuck kernels exit).
//
// `maxDelayUs` > 0: every task starts after a random pause of up to that long, so
// the races a real device would show (a send read after its source was reused, a
// reduction before its bytes arrived) show here too.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/locks.h"

namespace ringcoll {

class CpuStream {
 public:
  // Completes once every task enqueued before it ran (or was skipped).
  class Marker {
   public:
    bool done() const { return done_.load(std::memory_order_acquire); }
    // Once done: whether the stream had failed (or was aborted) by this point, so
    // that the work before the marker may not have run.
    bool failed() const { return failed_.load(std::memory_order_acquire); }

   private:
    friend class CpuStream;
    std::atomic<bool> done_{false};
    std::atomic<bool> failed_{false};
  };
  using MarkerPtr = std::shared_ptr<Marker>;
  using Task = std::function<void()>;

  CpuStream(std::string name, uint32_t maxDelayUs);
  // Aborts what is left and joins the thread.
  ~CpuStream();
  CpuStream(const CpuStream&) = delete;
  CpuStream& operator=(const CpuStream&) = delete;

  void enqueue(Task task);
  MarkerPtr mark();
  // This stream runs nothing enqueued after this call before `m` completed.
  void waitFor(MarkerPtr m);
  // The host waits until every task enqueued so far ran, or until `until`; true if
  // they did.
  bool sync(std::chrono::steady_clock::time_point until = std::chrono::steady_clock::time_point::max());

  // The first task's exception, or null.
  std::exception_ptr error() const;
  // Skip every task not yet run; a task waiting in waitFor() (or polling aborted())
  // returns at once.
  void abort();
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }

 private:
  void loop();

  const std::string name_;
  const uint32_t maxDelayUs_;
  // Never held while a task runs or is destroyed: a task may hold the last
  // reference to a tensor (common/locks.h), and error(), which takes this lock, is
  // what a program polling Work.is_completed() asks.
  mutable Mutex mutex_{"CpuStream::mutex_"};
  std::condition_variable_any cv_;
  struct Item {
    Task task;          // or
    MarkerPtr marker;   // completed when reached, even on a failed stream
  };
  std::deque<Item> queue_;
  bool running_ = false;  // a task is being run
  bool stop_ = false;
  std::atomic<bool> aborted_{false};
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace ringcoll
