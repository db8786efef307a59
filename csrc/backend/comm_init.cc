#include "backend/comm_init.h"

#include <algorithm>
#include <thread>

#include "common/errors.h"

namespace ringcoll {

namespace {
using Clock = std::chrono::steady_clock;

// Polls `ready()` with a pause that grows from 100 us to 10 ms (a FileStore answers
// check() from its file; a TCPStore with one round trip), until it is true, the
// group stops, or `timeout` passed; `missing()` says whom it waits for then.
void pollUntil(const std::function<bool()>& ready, std::chrono::milliseconds timeout,
               const Stopping& stopping, const std::string& what,
               const std::function<std::string()>& missing) {
  const auto deadline = Clock::now() + timeout;
  auto pause = std::chrono::microseconds(100);
  for (;;) {
    if (ready()) return;
    if (const char* why = stopping ? stopping() : nullptr) {
      throw PeerError(-1, RC_STR(what, ": ", why, " while it waited for ", missing()));
    }
    if (Clock::now() > deadline) {
      throw PeerError(-1,
                      RC_STR("Timed out after ", timeout.count(), " ms ", what,
                             ", waiting for ", missing(),
                             " (every rank of the group must make its first call on this path)"),
                      /*timedOut=*/true);
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(10000));
  }
}
}  // namespace

std::vector<uint8_t> shareCommId(c10d::Store& store, const std::string& key, int rank,
                                 const std::function<std::vector<uint8_t>()>& makeId,
                                 std::chrono::milliseconds timeout, const Stopping& stopping,
                                 const std::string& what) {
  if (rank == 0) {
    std::vector<uint8_t> id = makeId();
    store.set(key, id);
    return id;
  }
  pollUntil([&] { return store.check({key}); }, timeout, stopping, what,
            [] { return std::string("rank 0's id"); });
  return store.get(key);
}

void joinEveryRank(c10d::Store& store, const std::string& prefix, int rank, int size,
                   std::chrono::milliseconds timeout, const Stopping& stopping,
                   const std::string& what) {
  store.set(prefix + "/" + std::to_string(rank), std::vector<uint8_t>{1});
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(prefix + "/" + std::to_string(r));
  pollUntil([&] { return store.check(keys); }, timeout, stopping, what, [&] {
    std::string out;
    for (int r = 0; r < size; ++r) {
      if (!store.check({keys[r]})) out += (out.empty() ? "rank " : ", ") + std::to_string(r);
    }
    return out.empty() ? std::string("the other ranks") : out;
  });
}

}  // namespace ringcoll
