#include "common/knobs.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <sys/stat.h>
#include <utility>
#include <vector>

#include "common/errors.h"

extern char** environ;

namespace ringcoll {

namespace {
const std::vector<std::string>& knownNames() {
  static const std::vector<std::string> names = {
      "RINGCOLL_ALGO", "RINGCOLL_TRANSPORT", "RINGCOLL_CHUNK_BYTES",
      "RINGCOLL_INLINE_BYTES", "RINGCOLL_SMALL_BYTES", "RINGCOLL_HOST", "RINGCOLL_DEBUG",
      "RINGCOLL_FINGERPRINT", "RINGCOLL_TRACE", "RINGCOLL_GPU_CHUNK_BYTES",
      "RINGCOLL_BLOCKING_WAIT", "RINGCOLL_ASYNC_ERROR_HANDLING", "RINGCOLL_GPU_FINGERPRINT",
      "RINGCOLL_NCCL_BLOCKING", "RINGCOLL_STOP_LATCH_BYTES", "RINGCOLL_STREAM_DELAY_US", "RINGCOLL_STREAM_FAIL_AFTER", "RINGCOLL_GPU_ALGO",
      "RINGCOLL_MAX_BATCHES_IN_FLIGHT", "RINGCOLL_SPIN_US", "RINGCOLL_YIELD"};
  return names;
}

// The project's variables that no backend reads (known, so not reported as unknown):
// the build's (setup.py), Python's (ringcoll.model, the creator), CI's (.ci/run), and
// the process's debug checks (common/locks.h, read once per process).
const std::vector<std::string>& readElsewhere() {
  static const std::vector<std::string> names = {"RINGCOLL_CUDA", "RINGCOLL_SANITIZE",
                                                 "RINGCOLL_MODEL",
                                                 "RINGCOLL_CI_CACHE", "RINGCOLL_ALGO_MODULES",
                                                 "RINGCOLL_CHECKS"};
  return names;
}

bool listed(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Edits (insert, delete, substitute, swap two neighbours) from a to b.
size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1,
                          d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

// A name is a typo of a knob when it is this close to one.
constexpr size_t kTypoEdits = 2;

// (closest known name, its distance), over the knobs and the project's variables.
std::pair<std::string, size_t> closest(const std::string& name) {
  std::pair<std::string, size_t> best{"", static_cast<size_t>(-1)};
  for (const auto* names : {&knownNames(), &readElsewhere()}) {
    for (const auto& n : *names) {
      const size_t e = editDistance(name, n);
      if (e < best.second) best = {n, e};
    }
  }
  return best;
}

std::string unknownMessage(const std::string& name, const std::string& where) {
  std::string known;
  for (const auto* names : {&knownNames(), &readElsewhere()}) {
    for (const auto& n : *names) known += (known.empty() ? "" : ", ") + n;
  }
  return RC_STR("unknown ringcoll knob ", name, where, ": did you mean ",
                closest(name).first, "? (known: ", known, ")");
}

// An unknown name in the environment: an error if it is a typo of a knob, else a
// warning, once per process and name (every group creation reads the environment).
void unknownInEnvironment(const std::string& name) {
  const auto [near, edits] = closest(name);
  if (edits <= kTypoEdits) {
    throw std::invalid_argument(unknownMessage(name, " in the environment"));
  }
  static std::mutex mu;
  static std::set<std::string> warned;
  std::lock_guard<std::mutex> lock(mu);
  if (!warned.insert(name).second) return;
  std::fprintf(stderr,
               "ringcoll: warning: ignoring %s in the environment: not a ringcoll knob "
               "(the closest is %s; docs/KNOBS.md lists them)\n",
               name.c_str(), near.c_str());
}

bool isKnown(const std::string& name) {
  return listed(knownNames(), name) || listed(readElsewhere(), name);
}

// A whole number >= min of `unit` (the error names it).
size_t parseWhole(const std::string& name, const std::string& value, long long min,
                  const char* unit = "bytes") {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(value.c_str(), &end, 10);
  RC_CHECK_ARG(!value.empty() && errno == 0 && end && *end == '\0' && v >= min, name, "='",
               value, "' is not a whole number of ", unit, " >= ", min);
  return static_cast<size_t>(v);
}

bool parseBool(const std::string& name, const std::string& value) {
  if (value == "1" || value == "true") return true;
  if (value == "0" || value == "false" || value.empty()) return false;
  throw std::invalid_argument(RC_STR(name, "='", value, "' is not one of 0, 1, true, false"));
}

void apply(Knobs& k, const std::string& name, const std::string& value) {
  if (name == "RINGCOLL_ALGO") {
    RC_CHECK_ARG(!value.empty(), name, " is empty");
    k.algo = value;
    k.algoSet = true;
  } else if (name == "RINGCOLL_TRANSPORT") {
    RC_CHECK_ARG(value == "auto" || value == "shm" || value == "gloo" || value == "stream",
                 name, "='", value, "' is not a known transport (known: auto, shm, gloo, stream)");
    k.transport = value;
  } else if (name == "RINGCOLL_CHUNK_BYTES") {
    // Below 64 bytes a segment would not hold one float64 pair of 16-byte packs.
    k.chunkBytes = parseWhole(name, value, static_cast<long long>(Knobs::kMinChunkBytes));
  } else if (name == "RINGCOLL_GPU_CHUNK_BYTES") {
    k.gpuChunkBytes = parseWhole(name, value, static_cast<long long>(Knobs::kMinChunkBytes));
  } else if (name == "RINGCOLL_STOP_LATCH_BYTES") {
    k.stopLatchBytes = parseWhole(name, value, 0);
  } else if (name == "RINGCOLL_GPU_FINGERPRINT") {
    k.gpuFingerprint = parseBool(name, value);
  } else if (name == "RINGCOLL_NCCL_BLOCKING") {
    if (value == "connected" || value.empty()) {
      k.ncclBlocking = Knobs::NcclBlocking::kOnceConnected;
    } else if (value == "1" || value == "true") {
      k.ncclBlocking = Knobs::NcclBlocking::kAlways;
    } else if (value == "0" || value == "false") {
      k.ncclBlocking = Knobs::NcclBlocking::kNever;
    } else {
      throw std::invalid_argument(
          RC_STR(name, "='", value, "' is not one of connected, 0, 1 (true, false)"));
    }
  } else if (name == "RINGCOLL_BLOCKING_WAIT") {
    k.blockingWait = parseBool(name, value);
  } else if (name == "RINGCOLL_ASYNC_ERROR_HANDLING") {
    RC_CHECK_ARG(value == "teardown" || value == "raise", name, "='", value,
                 "' is not one of teardown, raise");
    k.asyncErrorHandling = value;
  } else if (name == "RINGCOLL_GPU_ALGO") {
    k.gpuAlgo = value;
  } else if (name == "RINGCOLL_MAX_BATCHES_IN_FLIGHT") {
    k.maxBatchesInFlight = parseWhole(name, value, 0, "batches");
  } else if (name == "RINGCOLL_STREAM_FAIL_AFTER") {
    k.streamFailAfter = parseWhole(name, value, 0, "batches");
  } else if (name == "RINGCOLL_STREAM_DELAY_US") {
    k.streamDelayUs = static_cast<uint32_t>(parseWhole(name, value, 0, "microseconds"));
  } else if (name == "RINGCOLL_INLINE_BYTES") {
    k.inlineBytes = parseWhole(name, value, 0);
  } else if (name == "RINGCOLL_SMALL_BYTES") {
    k.smallBytes = parseWhole(name, value, 0);
  } else if (name == "RINGCOLL_SPIN_US") {
    k.spinUs = static_cast<uint32_t>(parseWhole(name, value, 0, "microseconds"));
  } else if (name == "RINGCOLL_YIELD") {
    RC_CHECK_ARG(value == "peers" || value == "never" || value == "always", name, "='", value,
                 "' (expected peers, never or always)");
    k.yield = value;
  } else if (name == "RINGCOLL_HOST") {
    k.host = value;
  } else if (name == "RINGCOLL_DEBUG") {
    k.debug = parseBool(name, value);
  } else if (name == "RINGCOLL_FINGERPRINT") {
    k.fingerprint = parseBool(name, value);
  } else if (name == "RINGCOLL_TRACE") {
    // The directory is created (and its files opened) with the backend; a path that
    // exists already must be a directory.
    struct stat st;
    RC_CHECK_ARG(value.empty() || stat(value.c_str(), &st) != 0 || S_ISDIR(st.st_mode), name,
                 "='", value, "' exists and is not a directory (expected a directory for "
                 "the trace files, or empty for no trace)");
    k.trace = value;
  } else if (listed(readElsewhere(), name)) {
    // read elsewhere (above)
  } else {
    throw std::invalid_argument(unknownMessage(name, ""));
  }
}
}  // namespace

Knobs Knobs::load(const std::map<std::string, std::string>& overrides) {
  Knobs k;
  for (char** e = environ; e && *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (!eq || std::strncmp(*e, "RINGCOLL_", 9) != 0) continue;
    std::string name(*e, static_cast<size_t>(eq - *e));
    if (!isKnown(name)) {
      unknownInEnvironment(name);
      continue;
    }
    apply(k, name, std::string(eq + 1));
  }
  for (const auto& [name, value] : overrides) apply(k, name, value);
  return k;
}

std::string Knobs::shared() const {
  return RC_STR("RINGCOLL_ALGO=", algo, " RINGCOLL_GPU_ALGO=", gpuAlgo,
                " RINGCOLL_TRANSPORT=", transport,
                " RINGCOLL_CHUNK_BYTES=", chunkBytes, " RINGCOLL_GPU_CHUNK_BYTES=", gpuChunkBytes,
                " RINGCOLL_FINGERPRINT=", fingerprint ? 1 : 0,
                " RINGCOLL_GPU_FINGERPRINT=", gpuFingerprint ? 1 : 0,
                // Whether the CUDA communicator is split (a collective) must agree.
                " RINGCOLL_NCCL_BLOCKING=", ncclBlockingName(),
                " RINGCOLL_SMALL_BYTES=", smallLimit(),
                // A named algorithm turns the small path off: say so, or a rank that
                // sets RINGCOLL_ALGO to the default's value would be told only that
                // the limits differ.
                algoSet && smallBytes > 0 ? " (off: RINGCOLL_ALGO is set)" : "");
}

const char* Knobs::ncclBlockingName() const {
  switch (ncclBlocking) {
    case NcclBlocking::kNever:
      return "0";
    case NcclBlocking::kAlways:
      return "1";
    case NcclBlocking::kOnceConnected:
      break;
  }
  return "connected";
}

std::string Knobs::describe() const {
  return RC_STR("RINGCOLL_ALGO=", algo, " RINGCOLL_GPU_ALGO=", gpuAlgo,
                " RINGCOLL_TRANSPORT=", transport,
                " RINGCOLL_CHUNK_BYTES=", chunkBytes, " RINGCOLL_INLINE_BYTES=", inlineBytes,
                " RINGCOLL_SMALL_BYTES=", smallBytes,
                " RINGCOLL_SPIN_US=", spinUs, " RINGCOLL_YIELD=", yield,
                " RINGCOLL_HOST=", host.empty() ? "(auto)" : host,
                " RINGCOLL_DEBUG=", debug ? 1 : 0, " RINGCOLL_FINGERPRINT=", fingerprint ? 1 : 0,
                " RINGCOLL_GPU_CHUNK_BYTES=", gpuChunkBytes,
                " RINGCOLL_GPU_FINGERPRINT=", gpuFingerprint ? 1 : 0,
                " RINGCOLL_NCCL_BLOCKING=", ncclBlockingName(),
                " RINGCOLL_STOP_LATCH_BYTES=", stopLatchBytes,
                " RINGCOLL_MAX_BATCHES_IN_FLIGHT=", maxBatchesInFlight,
                " RINGCOLL_BLOCKING_WAIT=", blockingWait ? 1 : 0,
                " RINGCOLL_ASYNC_ERROR_HANDLING=", asyncErrorHandling,
                " RINGCOLL_STREAM_DELAY_US=", streamDelayUs,
                " RINGCOLL_STREAM_FAIL_AFTER=", streamFailAfter,
                " RINGCOLL_TRACE=", trace);  // last: empty when off
}

}  // namespace ringcoll
