// The two kinds of failure ringcoll distinguishes (see DESIGN.md):
//
//  * PeerError: a peer or transport failed or did not answer in time. It is
//    recoverable for the caller and carries the peer's rank; the backend adds the
//    collective's name and sequence number before it reaches Python (as a
//    torch.distributed.DistBackendError).
//  * an invariant of ringcoll's own broke: RC_ASSERT throws std::logic_error with
//    file:line. That is a bug in ringcoll, never the user's fault.
//
// User argument errors are checked once at the backend boundary with TORCH_CHECK;
// the layers below it (schedules, executor, transports, reducers) do not include
// torch and use only these.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace ringcoll {

class PeerError : public std::runtime_error {
 public:
  PeerError(int peer, const std::string& what, bool timedOut = false)
      : std::runtime_error(what), peer_(peer), timedOut_(timedOut) {}
  int peer() const { return peer_; }
  bool timedOut() const { return timedOut_; }

 private:
  int peer_;
  bool timedOut_;
};

// Ranks disagree about a collective (engine/fingerprint.h): what() names both calls,
// peer() the rank whose header disagreed. Detected before any payload was touched.
class MismatchError : public PeerError {
 public:
  MismatchError(int peer, const std::string& what) : PeerError(peer, what) {}
};

namespace detail {
template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace ringcoll

#define RC_STR(...) ::ringcoll::detail::cat(__VA_ARGS__)

// Internal invariant; a failure is a ringcoll bug.
#define RC_ASSERT(cond, ...)                                              \
  do {                                                                    \
    if (!(cond)) {                                                        \
      throw std::logic_error(RC_STR("ringcoll internal error at ",        \
                                    __FILE__, ":", __LINE__, ": ", #cond, \
                                    " ", ##__VA_ARGS__));                  \
    }                                                                     \
  } while (0)

// A user-facing configuration error below the torch boundary (bad knob value).
#define RC_CHECK_ARG(cond, ...)                              \
  do {                                                       \
    if (!(cond)) {                                           \
      throw std::invalid_argument(RC_STR(__VA_ARGS__));      \
    }                                                        \
  } while (0)

// A failure of the system or environment below the torch boundary (shm_open,
// mmap, a peer's segment that does not match): std::runtime_error with the text.
#define RC_REQUIRE(cond, ...)                                \
  do {                                                       \
    if (!(cond)) {                                           \
      throw std::runtime_error(RC_STR(__VA_ARGS__));         \
    }                                                        \
  } while (0)

#include <exception>

namespace ringcoll {
// The text of a stored exception (its what(), or "unknown error").
inline std::string describe(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown error";
  }
}

// A message of `got` bytes from `peer` where this rank expected `want`: the ranks
// are in different collectives (or one of them is broken).
inline PeerError wrongSize(int peer, size_t got, size_t want) {
  return PeerError(peer, RC_STR("rank ", peer, " sent a message of ", got,
                                " bytes where this rank expected ", want,
                                " (the ranks called different collectives?)"));
}
}  // namespace ringcoll
