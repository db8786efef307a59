// The one locking rule of ringcoll, and the check that enforces it.
//
//   No ringcoll lock is held while Python may run: while a tensor may be freed,
//   while a future's callbacks run, or while anything else that can call into
//   Python does.
//
// Why: the last reference to a tensor may belong to a Python object (the caller
// dropped its tensor, or its Work, before the collective ended), and freeing such a
// tensor takes the GIL; a future's callbacks are DDP's comm hooks and users'
// then()s, which are Python and may issue more work on the same group. A program
// that polls Work.is_completed() in a tight loop holds the GIL the whole time and
// asks for the Work's lock on every poll: a thread that holds that lock and waits
// for the GIL deadlocks with it (issue 47's first hang, on the stream path). The
// same holds for every lock a thread holding the GIL may ask for.
//
// How: under the lock, move what must be released (kept tensors, Works, jobs) or
// called (futures to complete) into locals; unlock; then release or call. Objects
// that own tensors or futures are destroyed only where no ringcoll lock is held.
//
// The check: every ringcoll mutex is a ringcoll::Mutex or ringcoll::SharedMutex
// (or, for a mutex that torch owns, held together with a HeldMark), which count the
// ringcoll locks the calling thread holds; the places where Python may run (the
// destructors of what owns user tensors, future completion, a point-to-point
// request's closure) call checkNoLockHeld(what). With RINGCOLL_CHECKS=1 in the
// environment (read once per process; the test suite sets it) a violation prints
// the place and the locks held and aborts the process, so a test fails naming it
// instead of hanging only when the GIL happens to be contended. Otherwise the check
// costs one thread-local read. RINGCOLL_CHECKS also turns on the other debug checks
// of ringcoll's own rules (checkFailed's callers: the stream path's "no memory of an
// unfinished Work is freed while its device may still use it").
#pragma once

#include <mutex>
#include <shared_mutex>
#include <string>

namespace ringcoll {

namespace locks {
// Called by the lock types below; `name` is a string literal.
void noteLocked(const char* name);
void noteUnlocked(const char* name);
// Prints `what` and the locks this thread holds, then aborts.
[[noreturn]] void violated(const char* what);
// How many ringcoll locks this thread holds.
int heldByThisThread();
}  // namespace locks

// Whether RINGCOLL_CHECKS=1 (read once per process).
bool checksOn();
// A debug check of ringcoll's own rules failed: prints `what` and aborts (only
// where checksOn()).
[[noreturn]] void checkFailed(const std::string& what);

// `what` is about to run Python, free a tensor or run a future's callbacks: no
// ringcoll lock may be held (above).
inline void checkNoLockHeld(const char* what) {
  if (locks::heldByThisThread() != 0 && checksOn()) locks::violated(what);
}

// A std::mutex that counts itself among the locks its holder holds. BasicLockable:
// use it with std::lock_guard / std::unique_lock, and std::condition_variable_any.
class Mutex {
 public:
  explicit Mutex(const char* name) : name_(name) {}
  void lock() {
    m_.lock();
    locks::noteLocked(name_);
  }
  bool try_lock() {
    if (!m_.try_lock()) return false;
    locks::noteLocked(name_);
    return true;
  }
  void unlock() {
    locks::noteUnlocked(name_);
    m_.unlock();
  }

 private:
  std::mutex m_;
  const char* const name_;
};

// The same for a std::shared_mutex: shared holders count too.
class SharedMutex {
 public:
  explicit SharedMutex(const char* name) : name_(name) {}
  void lock() {
    m_.lock();
    locks::noteLocked(name_);
  }
  void unlock() {
    locks::noteUnlocked(name_);
    m_.unlock();
  }
  void lock_shared() {
    m_.lock_shared();
    locks::noteLocked(name_);
  }
  void unlock_shared() {
    locks::noteUnlocked(name_);
    m_.unlock_shared();
  }

 private:
  std::shared_mutex m_;
  const char* const name_;
};

// ringcoll's own threads (the CPU worker, the stream paths' watchdogs, the emulated
// streams, point-to-point's progress thread) call markOwnThread() when they start.
// Futures' callbacks run on some of them, and stop() joins them: a callback that
// stops the group must not wait for the thread it runs on (onOwnThread()).
void markOwnThread();
bool onOwnThread();

// Marks a lock this file does not own (c10d::Work's mutex_) as held for a scope:
// declare it right after the guard that takes that lock.
class HeldMark {
 public:
  explicit HeldMark(const char* name) : name_(name) { locks::noteLocked(name_); }
  ~HeldMark() { locks::noteUnlocked(name_); }
  HeldMark(const HeldMark&) = delete;
  HeldMark& operator=(const HeldMark&) = delete;

 private:
  const char* const name_;
};

}  // namespace ringcoll
