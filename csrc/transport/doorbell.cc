#include "transport/doorbell.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <ctime>

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
}  // namespace

WaitPolicy WaitPolicy::forRanksPerCore(int localRanks, int cores) {
  WaitPolicy p;
  if (cores > 0 && localRanks > cores) {
    p.spin = std::chrono::nanoseconds(0);
    p.yields = 2;
  } else {
    // A futex wake-up costs about 5 us here (more when the vCPU went idle); a peer
    // that answers within this comes back without one.
    p.spin = std::chrono::microseconds(100);
    p.yields = 0;
  }
  return p;
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

void Doorbell::wait(uint32_t token, Clock::time_point until) const {
  auto rung = [&] { return word_->seq.load(std::memory_order_seq_cst) != token; };
  if (policy_.spin.count() > 0) {
    // Every 16th look yields: with the peer on another core the call returns at once
    // (nothing else wants this core); sharing a core with it (other load took the
    // second one), it lets the peer run instead of spinning out the whole budget.
    const auto spinUntil = Clock::now() + policy_.spin;
    for (unsigned i = 1;; ++i) {
      if (rung()) return;
      if ((i & 15) == 0) {
        sched_yield();
        if (Clock::now() >= spinUntil) break;
      } else {
        RC_CPU_RELAX();
      }
    }
  }
  for (int y = 0; y < policy_.yields; ++y) {
    sched_yield();
    if (rung()) return;
  }
  // Announce the sleeper before the last look, so a ring() after that look sees it
  // and wakes us (both sides use sequentially consistent operations).
  word_->sleepers.fetch_add(1, std::memory_order_seq_cst);
  for (;;) {
    if (rung()) break;
    const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(
        until - Clock::now()).count();
    if (left <= 0) break;
    futexWait(word_, shared_, token, left);
  }
  word_->sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

}  // namespace ringcoll
