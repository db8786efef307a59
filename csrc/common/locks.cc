#include "common/locks.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace ringcoll {
namespace locks {

namespace {
// The names of the locks this thread holds, innermost last; only the first
// kNamed are remembered (the count is exact).
constexpr int kNamed = 8;
// initial-exec: a fixed offset from the thread pointer, not a __tls_get_addr call
// per access (this library is dlopened, so the default is the general dynamic model);
// the check runs at every lock and unlock. 72 bytes of the static TLS reserve.
__attribute__((tls_model("initial-exec"))) thread_local int held = 0;
__attribute__((tls_model("initial-exec"))) thread_local const char* names[kNamed];
}  // namespace

void noteLocked(const char* name) {
  if (held < kNamed) names[held] = name;
  ++held;
}

void noteUnlocked(const char* name) {
  (void)name;
  if (held > 0) --held;
}

int heldByThisThread() { return held; }

void violated(const char* what) {
  std::fprintf(stderr,
               "ringcoll: RINGCOLL_CHECKS: %s while this thread holds %d ringcoll "
               "lock(s):",
               what, held);
  for (int i = 0; i < held && i < kNamed; ++i) std::fprintf(stderr, " %s", names[i]);
  std::fprintf(stderr,
               " (csrc/common/locks.h: no ringcoll lock is held while Python may run, a "
               "tensor may be freed or a future's callbacks run)\n");
  std::fflush(stderr);
  std::abort();
}

}  // namespace locks

namespace {
__attribute__((tls_model("initial-exec"))) thread_local bool ownThread = false;
}  // namespace

bool checksOn() {
  static const bool on = [] {
    const char* v = std::getenv("RINGCOLL_CHECKS");
    return v != nullptr && (std::strcmp(v, "1") == 0 || std::strcmp(v, "true") == 0);
  }();
  return on;
}

void checkFailed(const std::string& what) {
  std::fprintf(stderr, "ringcoll: RINGCOLL_CHECKS: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

void markOwnThread() { ownThread = true; }
bool onOwnThread() { return ownThread; }

}  // namespace ringcoll
