// One NCCL communicator, used only under its lock (as torch's NCCLComm does): the
// transport enqueues under it, the backend's watchdog polls and aborts under it,
// so no thread ever calls NCCL on a communicator another thread has aborted.
//
// By default the communicator is non-blocking (ncclConfig_t.blocking = 0): init,
// connection set-up and ncclGroupEnd return at once with ncclInProgress (NCCL
// finishes them on a thread of its own), and waitReady() polls
// ncclCommGetAsyncError until the call finished, failed, or `limit` passed. It
// releases the lock between polls, so abort() from another thread (the watchdog,
// ProcessGroup abort()) never waits behind a connection, and a dead or missing
// peer never holds the caller forever: past the limit the communicator is aborted
// and the caller gets a PeerError.
//
// The price of non-blocking is a thread NCCL starts at every ncclGroupEnd (NCCL
// 2.28's group.cc: a non-blocking group always launches from a thread of its own),
// 150-300 us per batch. So once every peer is connected, blockFromNowOn() splits a
// blocking communicator off this one (ncclCommSplit, itself non-blocking and
// bounded as above) that shares its resources, among them the point-to-point
// connections (splitShare: NCCL keeps one send/recv connector per peer for a parent
// and its sharing children), and every later call goes to it: ncclGroupEnd then
// launches on the calling thread and returns done, and since nothing is left to
// connect it never waits for a peer. A peer that dies later shows as an NCCL error
// or as a transfer that never completes, which the watchdog times out and aborts
// (both communicators) as before. `blocking` (RINGCOLL_NCCL_BLOCKING=1) makes the
// communicator blocking from its creation. No torch here.
//
// A blocking communicator's ncclGroupEnd launches on the calling thread, under this
// lock, and a launch blocks when the stream's launch queue is full behind a kernel
// that waits for a dead peer; abort() would then wait for the lock that only the
// abort could free. So the transport never enqueues a batch while
// RINGCOLL_MAX_BATCHES_IN_FLIGHT are in flight: it waits for room first, holding no
// lock, and gives up when the communicator is aborted (stream_transport.h's
// in-flight bound; tests/test_stream.py runs it on the emulation).
#pragma once

#include <nccl.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>

namespace ringcoll {

class NcclComm {
 public:
  using Clock = std::chrono::steady_clock;

  // Creates the communicator and waits for it, at most `limit`; throws PeerError
  // (peer -1) naming the rank and the wait on failure or timeout. `stopping`
  // (optional): polled by every wait (waitReady) until creationDone(); when it
  // returns a reason (the group is being aborted or shut down), the communicator is
  // aborted and the wait throws it, so a creation (the init, the connections, the
  // split) that waits for a missing rank ends at once.
  NcclComm(const ncclUniqueId& id, int rank, int size, std::chrono::milliseconds limit,
           bool blocking = false, std::function<const char*()> stopping = nullptr);
  // Aborts if still alive: never waits on a peer.
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  std::unique_lock<std::mutex> lock() { return std::unique_lock<std::mutex>(mutex_); }

  // Under lock(): the handle for an NCCL call (the blocking child once split);
  // throws PeerError if aborted.
  ncclComm_t get(const std::string& what) const;
  // With `lk` (this communicator's lock) held: after a non-blocking call, waits
  // until it is done (ncclSuccess), at most `limit` from now, releasing `lk` between
  // polls (held again on return). It polls without sleeping for the first
  // kSpinPolls (an ncclGroupEnd of connected peers is done within tens of
  // microseconds), then sleeps, doubling the pause up to 1 ms. A failure or the
  // limit aborts the communicator and throws PeerError(peer) naming `what`; so does
  // an abort() by another thread meanwhile.
  void waitReady(std::unique_lock<std::mutex>& lk, const std::string& what, int peer) {
    waitReady(lk, what, peer, limit_);
  }
  void waitReady(std::unique_lock<std::mutex>& lk, const std::string& what, int peer,
                 std::chrono::milliseconds limit);
  static constexpr int kSpinPolls = 200;
  // With `lk` (this communicator's lock) held, on every rank of the group once its
  // peers are connected (it is a collective): later calls use a blocking
  // communicator split off this one, sharing its connections (above). At most the
  // limit; on failure or timeout both are aborted and it throws PeerError.
  void blockFromNowOn(std::unique_lock<std::mutex>& lk);
  bool blocking() const { return steady_ != nullptr || createdBlocking_; }
  // Under lock(): ncclSuccess, ncclInProgress or the error of the last operations.
  ncclResult_t asyncError();
  // Under lock(): aborts (idempotent); kernels stuck in NCCL then exit.
  void abort();
  // Under lock(): the orderly end (ncclCommFinalize, then ncclCommDestroy): what
  // this rank already enqueued is flushed, so a peer still receiving from it gets
  // its data rather than a closed connection. At most `limit`; past it, or on an
  // error, it aborts instead. Returns whether it ended in order. Idempotent.
  bool finalize(std::unique_lock<std::mutex>& lk, std::chrono::milliseconds limit);
  bool aborted() const { return aborted_.load(); }
  // Under lock(): the creation's waits are over; `stopping` is no longer polled (a
  // shutdown's orderly finalize must not be cut short by it).
  void creationDone() { stopping_ = nullptr; }
  std::chrono::milliseconds limit() const { return limit_; }

 private:
  // Until blockFromNowOn(), every call goes to comm_; after it, to steady_ (its
  // blocking child). Both are aborted together, the child first (NCCL frees shared
  // resources with the last communicator that holds them).
  ncclComm_t comm_ = nullptr;
  ncclComm_t steady_ = nullptr;
  const bool createdBlocking_;
  const int rank_;
  const std::chrono::milliseconds limit_;
  std::function<const char*()> stopping_;  // under mutex_
  std::mutex mutex_;
  std::atomic<bool> aborted_{false};
};

}  // namespace ringcoll
