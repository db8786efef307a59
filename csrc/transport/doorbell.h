// A doorbell: how a rank with nothing to do waits for something to do without
// burning a core that another rank needs.
//
// The word lives in memory other processes can map (a rank's shared-memory
// segment, so its peers ring it) or in private memory (gloo-only groups, rung by
// the transport's own threads). Protocol (an eventcount):
//
//   waiter:  token = bell.token(); <look for work>; if none: bell.wait(token, until)
//   ringer:  <publish work>; bell.ring()
//
// wait() returns as soon as the bell was rung after the token was taken, so work
// published between the look and the wait is never slept through. It spins for
// `spin` first (a peer on another core answers within microseconds), then yields
// `yields` times (lets a rank that shares this core run), then sleeps on a futex;
// ring() makes the futex system call only when someone sleeps. The spin yields every
// few looks, so a waiter that shares its core with the peer it waits for (ranks
// outnumbering cores, or other load) hands the core over instead of spinning out.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace ringcoll {

struct alignas(64) DoorbellWord {
  std::atomic<uint32_t> seq{0};       // bumped by every ring()
  std::atomic<uint32_t> sleepers{0};  // waiters inside the futex wait
};
static_assert(std::atomic<uint32_t>::is_always_lock_free, "futex word must be lock-free");
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "futex word is 32 bits");

struct WaitPolicy {
  std::chrono::nanoseconds spin{0};
  int yields = 0;

  // Spinning pays when every rank of this host has a core of its own; when ranks
  // outnumber cores a spinning rank takes the core from the peer it waits for, so
  // it yields at once and then sleeps.
  static WaitPolicy forRanksPerCore(int localRanks, int cores);
};

class Doorbell {
 public:
  using Clock = std::chrono::steady_clock;

  // `word` must outlive the doorbell; `shared`: other processes map it.
  Doorbell(DoorbellWord* word, bool shared, WaitPolicy policy);

  uint32_t token() const { return word_->seq.load(std::memory_order_seq_cst); }
  void ring();
  // Returns once the bell was rung after `token` was taken, or at `until`.
  void wait(uint32_t token, Clock::time_point until) const;

  static void ring(DoorbellWord* word, bool shared);

 private:
  DoorbellWord* word_;
  bool shared_;
  WaitPolicy policy_;
};

}  // namespace ringcoll
