#include "transport/nccl_comm.h"

#include <thread>

#include "common/errors.h"

namespace ringcoll {

NcclComm::NcclComm(const ncclUniqueId& id, int rank, int size, std::chrono::milliseconds limit,
                   bool blocking, std::function<const char*()> stopping)
    : createdBlocking_(blocking), rank_(rank), limit_(limit), stopping_(std::move(stopping)) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = blocking ? 1 : 0;
  // Read from the parent at ncclCommSplit: the child blockFromNowOn() makes shares
  // this communicator's connections instead of making its own.
  config.splitShare = 1;
  auto lk = lock();
  const ncclResult_t r = ncclCommInitRankConfig(&comm_, size, id, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    throw PeerError(-1, RC_STR("ncclCommInitRankConfig failed on rank ", rank, " of ", size,
                               ": ", ncclGetErrorString(r)));
  }
  waitReady(lk, RC_STR("creating the NCCL communicator (rank ", rank, " of ", size,
                   "; every rank of the group must make its first CUDA collective)"),
            -1);
}

NcclComm::~NcclComm() {
  auto lk = lock();
  abort();
}

ncclComm_t NcclComm::get(const std::string& what) const {
  if (aborted_.load()) {
    throw PeerError(-1, RC_STR(what, ": the NCCL communicator was aborted after an earlier "
                                     "failure"));
  }
  return steady_ != nullptr ? steady_ : comm_;
}

ncclResult_t NcclComm::asyncError() {
  if (aborted_.load() || comm_ == nullptr) return ncclSuccess;
  ncclResult_t state = ncclSuccess;
  const ncclResult_t r = ncclCommGetAsyncError(steady_ != nullptr ? steady_ : comm_, &state);
  return r != ncclSuccess ? r : state;
}

void NcclComm::blockFromNowOn(std::unique_lock<std::mutex>& lk) {
  if (blocking()) return;
  const std::string what =
      RC_STR("splitting a blocking NCCL communicator off the connected one (rank ", rank_,
             "; every rank does at its first CUDA collective)");
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 1;
  ncclComm_t child = nullptr;
  // Non-blocking like its parent (NCCL runs the split as the parent's job): the
  // parent's state says when it is done, and `child` is written by NCCL's thread
  // at the end, so it is read only after that.
  const ncclResult_t r = ncclCommSplit(get(what), /*color=*/0, /*key=*/rank_, &child, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    abort();
    throw PeerError(-1, RC_STR(what, ": ncclCommSplit failed: ", ncclGetErrorString(r),
                               "; communicator aborted"));
  }
  try {
    waitReady(lk, what, -1);  // aborts the parent on failure or timeout
  } catch (const PeerError&) {
    // NCCL writes the child even when its initialisation failed, and the parent's
    // abort waited for the split's thread: abort the child too, or it keeps the
    // shared resources (connections, buffers, proxy) alive.
    ncclComm_t orphan = __atomic_load_n(&child, __ATOMIC_ACQUIRE);
    if (orphan != nullptr) ncclCommAbort(orphan);
    throw;
  }
  // The split's failures show on the parent (polled above); a child still missing
  // here would be NCCL not keeping its word.
  child = __atomic_load_n(&child, __ATOMIC_ACQUIRE);
  if (child == nullptr) {
    abort();
    throw PeerError(-1, RC_STR(what, ": ncclCommSplit finished without a communicator; "
                                     "communicator aborted"));
  }
  steady_ = child;
}

void NcclComm::waitReady(std::unique_lock<std::mutex>& lk, const std::string& what, int peer,
                         std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  auto pause = std::chrono::microseconds(1);
  for (int polls = 0;; ++polls) {
    if (aborted_.load()) {
      throw PeerError(peer, RC_STR(what, ": the NCCL communicator was aborted meanwhile"));
    }
    if (const char* why = stopping_ ? stopping_() : nullptr) {
      abort();
      throw PeerError(peer, RC_STR(what, ": ", why, "; communicator aborted"));
    }
    const ncclResult_t state = asyncError();
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) {
      abort();
      throw PeerError(peer, RC_STR(what, ": NCCL error: ", ncclGetErrorString(state),
                                   "; communicator aborted"));
    }
    if (Clock::now() > deadline) {
      abort();
      throw PeerError(peer, RC_STR("Timed out after ", limit.count(), " ms ", what,
                                   "; communicator aborted"),
                      /*timedOut=*/true);
    }
    lk.unlock();
    if (polls < kSpinPolls) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
    lk.lock();
  }
}

bool NcclComm::finalize(std::unique_lock<std::mutex>& lk, std::chrono::milliseconds limit) {
  if (aborted_.load() || comm_ == nullptr) return false;
  if (steady_ != nullptr) {
    // Blocking: it returns once the child's operations are done. Its callers
    // (the stream path's orderly end) come here only after every collective
    // completed, so nothing is left to wait for a peer.
    if (ncclCommFinalize(steady_) != ncclSuccess) {
      abort();
      return false;
    }
    ncclCommDestroy(steady_);
    steady_ = nullptr;
  }
  const ncclResult_t r = ncclCommFinalize(comm_);
  if (r != ncclSuccess && r != ncclInProgress) {
    abort();
    return false;
  }
  try {
    waitReady(lk, "finalizing the NCCL communicator", -1, limit);  // aborts on failure
  } catch (const PeerError&) {
    return false;
  }
  ncclCommDestroy(comm_);  // local resources only, after a finalize: does not block
  aborted_.store(true);    // nothing may call it any more
  comm_ = nullptr;
  return true;
}

void NcclComm::abort() {
  if (aborted_.exchange(true) || comm_ == nullptr) return;
  // ncclCommAbort returns once the communicator's resources are gone; it does not
  // wait for peers, and kernels spinning on a dead peer exit. The child first: it
  // shares the parent's resources (and its abort flag).
  if (steady_ != nullptr) ncclCommAbort(steady_);
  steady_ = nullptr;
  ncclCommAbort(comm_);
  comm_ = nullptr;
}

}  // namespace ringcoll
