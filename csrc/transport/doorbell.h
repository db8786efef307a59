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
// published between the look and the wait is never slept through; ring() makes the
// futex system call only when someone sleeps.
//
// The waiting policy (WaitPolicy; measured in docs/WAITING.md). A waiter spins
// first, with the CPU's pause, because a peer that runs answers within microseconds
// and a futex wake-up costs more than that (5-10 us here idle, up to a scheduler
// slice under load). The spin does not yield the core to whoever else is runnable
// on it: beside a busy process, Linux's sched_yield() hands that process the rest
// of a slice (up to a 4 ms tick here). It yields only to a peer of its own group
// that waits for this very core: every rank shows its peers, on a line of its
// segment (presence), the CPU it last ran on while it waited and when it said so,
// and a waiter that finds a recent peer on its own CPU, not asleep (or rung since
// it went to sleep), knows that peer is runnable and not running (this waiter is):
// it yields to it. That is the case of ranks outnumbering cores, and of two ranks
// the scheduler put on one core; a presence older than kPresenceUs is not trusted
// (the peer left the collective and may run elsewhere by now). Two ranks that the
// scheduler keeps on one core although their threads may run on more (it balances
// task counts, and two ranks beside two busy processes are balanced however they
// sit) hand the core back and forth at every call: after kMoveAfter such waits in a
// row the higher of the two moves itself to another CPU of its mask (the mask is set
// to that CPU and given back, which leaves only the move). After the spin budget the
// waiter sleeps on the futex, so a peer that is late (computing, not yet in the
// collective) costs the machine no CPU.
#pragma once

#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace ringcoll {

// What a rank shows the ranks that ring it. `seq` and `sleepers` are the
// eventcount; its presence is on a line of its own (written by the owner, read by
// the peers that may share its core).
struct alignas(64) DoorbellWord {
  std::atomic<uint32_t> seq{0};       // bumped by every ring()
  std::atomic<uint32_t> sleepers{0};  // waiters inside the futex wait
  // Presence: the CPU the owner last ran on while it waited here (-1: never), when
  // it said so (steady clock, microseconds), and the `seq` it went to sleep on while
  // it sleeps (a ring since then makes it runnable again before it has run).
  alignas(64) std::atomic<int32_t> cpu{-1};
  std::atomic<uint32_t> parkedOn{0};
  std::atomic<int64_t> stampUs{0};
};
static_assert(std::atomic<uint32_t>::is_always_lock_free, "futex word must be lock-free");
static_assert(std::atomic<int64_t>::is_always_lock_free, "presence words must be lock-free");
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "futex word is 32 bits");

struct WaitPolicy {
  // Whom the spin hands the core to (RINGCOLL_YIELD, common/knobs.h):
  //   kToPeers  a rank of its group that waits for this core (above): the default
  //   kNever    nobody: it spins out its budget (what MPI libraries do by default)
  //   kAlways   whoever is runnable here, at every check (ringcoll's policy before
  //             it was measured under load; kept to measure it against)
  enum class Yield { kToPeers, kNever, kAlways };
  // How long a waiter spins before it sleeps (0: it sleeps at once).
  std::chrono::nanoseconds spin{0};
  Yield yield = Yield::kToPeers;
  // "peers", "never", "always": RINGCOLL_YIELD's values; throws std::invalid_argument.
  static Yield yieldNamed(const std::string& name);
  static const char* yieldName(Yield y);
};

// Counters of this process's waits (every doorbell), for the measurements that
// chose the policy (benchmarks/cpu_wait.py). Relaxed: approximate under races.
struct WaitStats {
  std::atomic<uint64_t> waits{0};    // wait() calls that had to wait
  std::atomic<uint64_t> spun{0};     // ... that ended while spinning
  std::atomic<uint64_t> yields{0};   // sched_yield() calls, to a peer on this CPU
  std::atomic<uint64_t> parks{0};    // futex sleeps
  std::atomic<uint64_t> spinNs{0};   // time spent spinning
  std::atomic<uint64_t> parkNs{0};   // time spent in the futex sleep
  std::atomic<uint64_t> moves{0};    // moves to another CPU, away from a peer
  static WaitStats& get();
  void reset();
};

class Doorbell {
 public:
  using Clock = std::chrono::steady_clock;

  // `word` must outlive the doorbell; `shared`: other processes map it.
  Doorbell(DoorbellWord* word, bool shared, WaitPolicy policy);

  // The words of the ranks this one may share a core with (its host's other ranks
  // of the group), whose presence the spin watches. They must outlive the doorbell.
  // `index`: this rank's among its host's ranks of the group (peers are the others,
  // in that order).
  void watch(std::vector<const DoorbellWord*> peers, int index) {
    peers_ = std::move(peers);
    localIndex_ = index;
  }

  uint32_t token() const { return word_->seq.load(std::memory_order_seq_cst); }
  void ring();
  // Returns once the bell was rung after `token` was taken, or at `until`.
  void wait(uint32_t token, Clock::time_point until) const;
  static void ring(DoorbellWord* word, bool shared);
  // Shows this rank's peers where it runs now (it has work: it sent a message).
  void present() const { publish(sched_getcpu(), nowUs()); }

 private:
  // A watched peer that is runnable on `cpu` but cannot run (this rank does).
  bool peerWaitsFor(int cpu, int64_t nowUs) const;
  void publish(int cpu, int64_t nowUs) const;
  // Two ranks the scheduler keeps on one CPU (kMoveAfter waits in a row found the
  // peer waiting for this CPU) while the thread's mask has a CPU for each: the
  // higher of the two moves itself to another CPU of its mask.
  void moveAway(int cpu, int64_t nowUs) const;
  static constexpr int kMoveAfter = 32;
  static int64_t nowUs();
  // How long a peer's presence is trusted: about a scheduler slice (a peer
  // preempted between two calls shows the CPU it waits on for that long).
  static constexpr int64_t kPresenceUs = 5000;

  DoorbellWord* word_;
  bool shared_;
  WaitPolicy policy_;
  std::vector<const DoorbellWord*> peers_;
  int localIndex_ = 0;
  mutable int sharedWaits_ = 0;  // waits in a row in which a peer waited for this CPU
};

}  // namespace ringcoll
