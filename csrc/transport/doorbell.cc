#include "transport/doorbell.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <ctime>
#include <stdexcept>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define RC_CPU_RELAX() _mm_pause()
#else
#define RC_CPU_RELAX() ((void)0)
#endif

namespace ringcoll {

namespace {
uint32_t* futexWord(DoorbellWord* w) {
  return reinterpret_cast<uint32_t*>(&w->seq);
}

// Sleeps while *word == expected, at most `ns`. Spurious returns are fine: the
// caller re-checks.
void futexWait(DoorbellWord* w, bool shared, uint32_t expected, long long ns) {
  timespec ts;
  ts.tv_sec = static_cast<time_t>(ns / 1000000000LL);
  ts.tv_nsec = static_cast<long>(ns % 1000000000LL);
  const int op = shared ? FUTEX_WAIT : FUTEX_WAIT_PRIVATE;
  syscall(SYS_futex, futexWord(w), op, expected, &ts, nullptr, 0);
}

uint64_t nanosBetween(Doorbell::Clock::time_point a, Doorbell::Clock::time_point b) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count());
}

// The spin looks at the clock, its CPU and its peers once every this many looks
// (about half a microsecond of pauses here), and at the bell at every look.
constexpr unsigned kLooksPerCheck = 16;
}  // namespace

WaitPolicy::Yield WaitPolicy::yieldNamed(const std::string& name) {
  if (name == "peers") return Yield::kToPeers;
  if (name == "never") return Yield::kNever;
  if (name == "always") return Yield::kAlways;
  throw std::invalid_argument("'" + name + "' (expected peers, never or always)");
}

const char* WaitPolicy::yieldName(Yield y) {
  switch (y) {
    case Yield::kNever: return "never";
    case Yield::kAlways: return "always";
    case Yield::kToPeers: break;
  }
  return "peers";
}

WaitStats& WaitStats::get() {
  static WaitStats stats;
  return stats;
}

void WaitStats::reset() {
  for (auto* c : {&waits, &spun, &yields, &parks, &spinNs, &parkNs, &moves}) {
    c->store(0, std::memory_order_relaxed);
  }
}

Doorbell::Doorbell(DoorbellWord* word, bool shared, WaitPolicy policy)
    : word_(word), shared_(shared), policy_(policy) {}

void Doorbell::ring() { ring(word_, shared_); }

void Doorbell::ring(DoorbellWord* word, bool shared) {
  word->seq.fetch_add(1, std::memory_order_seq_cst);
  if (word->sleepers.load(std::memory_order_seq_cst) != 0) {
    const int op = shared ? FUTEX_WAKE : FUTEX_WAKE_PRIVATE;
    syscall(SYS_futex, futexWord(word), op, INT_MAX, nullptr, nullptr, 0);
  }
}

int64_t Doorbell::nowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             Clock::now().time_since_epoch()).count();
}

void Doorbell::publish(int cpu, int64_t now) const {
  word_->cpu.store(cpu, std::memory_order_relaxed);
  word_->stampUs.store(now, std::memory_order_relaxed);
}

bool Doorbell::peerWaitsFor(int cpu, int64_t now) const {
  for (const DoorbellWord* w : peers_) {
    if (w->cpu.load(std::memory_order_relaxed) != cpu) continue;
    if (now - w->stampUs.load(std::memory_order_relaxed) > kPresenceUs) continue;
    // Awake, or asleep but rung since: runnable here, and not running (we are).
    if (w->sleepers.load(std::memory_order_relaxed) == 0 ||
        w->seq.load(std::memory_order_relaxed) != w->parkedOn.load(std::memory_order_relaxed)) {
      return true;
    }
  }
  return false;
}

void Doorbell::moveAway(int cpu, int64_t now) const {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0) return;
  // Fewer CPUs than ranks: sharing is the only placement there is.
  if (CPU_COUNT(&mask) < static_cast<int>(peers_.size()) + 1) return;
  // Of two ranks on one CPU, the one with the higher index moves; the other stays.
  for (size_t i = 0; i < peers_.size(); ++i) {
    const int index = static_cast<int>(i) < localIndex_ ? static_cast<int>(i) : static_cast<int>(i) + 1;
    if (index > localIndex_ && peers_[i]->cpu.load(std::memory_order_relaxed) == cpu) return;
  }
  // To a CPU of its mask that no peer was seen on lately, else any other of its mask.
  int target = -1;
  for (int c = 0; c < CPU_SETSIZE && target < 0; ++c) {
    if (c == cpu || !CPU_ISSET(c, &mask)) continue;
    bool taken = false;
    for (const DoorbellWord* w : peers_) {
      taken = taken || (w->cpu.load(std::memory_order_relaxed) == c &&
                        now - w->stampUs.load(std::memory_order_relaxed) <= kPresenceUs);
    }
    if (!taken) target = c;
  }
  for (int c = 0; c < CPU_SETSIZE && target < 0; ++c) {
    if (c != cpu && CPU_ISSET(c, &mask)) target = c;
  }
  if (target < 0) return;
  // The kernel moves the thread when its mask excludes the CPU it is on; the mask is
  // then given back as it was, so the move is all that remains of it.
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(target, &one);
  if (sched_setaffinity(0, sizeof(one), &one) != 0) return;
  sched_setaffinity(0, sizeof(mask), &mask);
  WaitStats::get().moves.fetch_add(1, std::memory_order_relaxed);
}

void Doorbell::wait(uint32_t token, Clock::time_point until) const {
  auto rung = [&] { return word_->seq.load(std::memory_order_seq_cst) != token; };
  if (rung()) return;
  WaitStats& stats = WaitStats::get();
  stats.waits.fetch_add(1, std::memory_order_relaxed);
  const auto start = Clock::now();
  if (policy_.spin.count() > 0) {
    const auto spinUntil = std::min(until, start + policy_.spin);
    int cpu = sched_getcpu();
    publish(cpu, nowUs());
    bool sharedThisWait = false;  // a peer waited for this CPU during this wait
    for (unsigned i = 1;; ++i) {
      if (rung()) {
        if (!sharedThisWait) sharedWaits_ = 0;
        stats.spun.fetch_add(1, std::memory_order_relaxed);
        stats.spinNs.fetch_add(nanosBetween(start, Clock::now()), std::memory_order_relaxed);
        return;
      }
      if (i % kLooksPerCheck != 0) {
        RC_CPU_RELAX();
        continue;
      }
      // The scheduler may have moved this rank: what its peers see follows it.
      const auto now = Clock::now();
      const int64_t us = std::chrono::duration_cast<std::chrono::microseconds>(
                             now.time_since_epoch()).count();
      cpu = sched_getcpu();
      publish(cpu, us);
      const bool peerHere =
          policy_.yield == WaitPolicy::Yield::kToPeers && peerWaitsFor(cpu, us);
      if (peerHere || policy_.yield == WaitPolicy::Yield::kAlways) {
        stats.yields.fetch_add(1, std::memory_order_relaxed);
        sched_yield();
      }
      if (peerHere && !sharedThisWait) {
        sharedThisWait = true;
        if (++sharedWaits_ >= kMoveAfter) {
          sharedWaits_ = 0;
          moveAway(cpu, us);
        }
      }
      if (now >= spinUntil) break;
    }
    stats.spinNs.fetch_add(nanosBetween(start, Clock::now()), std::memory_order_relaxed);
  }
  const auto parked = Clock::now();
  // Announce the sleeper before the last look, so a ring() after that look sees it
  // and wakes us (both sides use sequentially consistent operations). Peers see it
  // too: a sleeping rank needs no core until it is rung.
  word_->parkedOn.store(token, std::memory_order_relaxed);
  word_->sleepers.fetch_add(1, std::memory_order_seq_cst);
  bool slept = false;
  for (;;) {
    if (rung()) break;
    const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(
        until - Clock::now()).count();
    if (left <= 0) break;
    slept = true;
    futexWait(word_, shared_, token, left);
  }
  word_->sleepers.fetch_sub(1, std::memory_order_seq_cst);
  if (slept) {
    stats.parks.fetch_add(1, std::memory_order_relaxed);
    stats.parkNs.fetch_add(nanosBetween(parked, Clock::now()), std::memory_order_relaxed);
    publish(sched_getcpu(), nowUs());  // it runs again, perhaps elsewhere
  }
}

}  // namespace ringcoll
