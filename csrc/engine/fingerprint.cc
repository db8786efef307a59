#include "engine/fingerprint.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

#include "common/errors.h"

namespace ringcoll::algo {

namespace {
constexpr size_t kDigestName = 11;  // characters of a name that has a digest
}  // namespace

void Fingerprint::setAlgorithm(const std::string& name, uint32_t digest) {
  std::memset(algorithm, 0, sizeof(algorithm));
  const size_t room = digest != 0 ? kDigestName : sizeof(algorithm) - 1;
  std::memcpy(algorithm, name.data(), std::min(name.size(), room));
  if (digest != 0) std::memcpy(algorithm + kDigestName + 1, &digest, sizeof(digest));
}

uint32_t Fingerprint::digest() const {
  if (algorithm[kDigestName] != '\0') return 0;
  uint32_t d = 0;
  std::memcpy(&d, algorithm + kDigestName + 1, sizeof(d));
  return d;
}

const char* methodName(Method m) {
  switch (m) {
    case Method::kAllreduce: return "allreduce";
    case Method::kAllreduceCoalesced: return "allreduce_coalesced";
    case Method::kReduce: return "reduce";
    case Method::kBroadcast: return "broadcast";
    case Method::kAllgather: return "allgather";
    case Method::kAllgatherIntoTensor: return "all_gather_into_tensor";
    case Method::kReduceScatter: return "reduce_scatter";
    case Method::kReduceScatterTensor: return "reduce_scatter_tensor";
    case Method::kBarrier: return "barrier";
    case Method::kGather: return "gather";
    case Method::kScatter: return "scatter";
    case Method::kAlltoall: return "alltoall";
    case Method::kAlltoallBase: return "alltoall_base";
    case Method::kAllgatherCoalesced: return "allgather_coalesced";
    case Method::kAllgatherIntoTensorCoalesced: return "allgather_into_tensor_coalesced";
    case Method::kReduceScatterTensorCoalesced: return "reduce_scatter_tensor_coalesced";
    case Method::kPointToPoint: return "send/recv";
  }
  return "?";
}

Fingerprint canonical(Fingerprint fp) {
  fp.rank = -1;
  if (fp.reduces != Reduces::kOp) fp.op = RedOp::kSum;
  return fp;
}

Fingerprint expectedFrom(const Fingerprint& mine) {
  Fingerprint want = canonical(mine);
  if (want.pairwise) std::swap(want.count, want.countBack);
  return want;
}

bool sameCall(const Fingerprint& mine, const Fingerprint& theirs) {
  // The struct has no padding (64 bytes of fields, static_assert above), so equal
  // fields are equal bytes.
  const Fingerprint want = expectedFrom(mine), got = canonical(theirs);
  return std::memcmp(&want, &got, sizeof(Fingerprint)) == 0;
}

std::string describe(const Fingerprint& fp, int to) {
  std::string args;
  auto add = [&args](const std::string& s) { args += (args.empty() ? "" : ", ") + s; };
  const bool p2p = fp.method == Method::kPointToPoint;
  auto elements = [p2p](uint64_t n) {
    return RC_STR(n, p2p ? (n == 1 ? " byte" : " bytes") : (n == 1 ? " element" : " elements"));
  };
  if (p2p) {
    add(RC_STR(elements(fp.count), " to rank ", to));
    add(RC_STR(fp.countBack, " from it"));
  } else if (fp.hasDtype) {
    add(dtypeName(fp.dtype));
    if (fp.pairwise) {
      add(RC_STR(elements(fp.count), " to rank ", to));
      add(RC_STR(fp.countBack, " from it"));
    } else {
      add(elements(fp.count));
    }
  }
  switch (fp.reduces) {
    case Reduces::kNo: break;
    case Reduces::kOp: add(redOpName(fp.op)); break;
    case Reduces::kAvg: add("AVG"); break;
    case Reduces::kPremulSum: add("PREMUL_SUM"); break;
  }
  if (fp.root >= 0) add(RC_STR("root ", fp.root));
  if (fp.layout != 0) {
    char hex[9];
    std::snprintf(hex, sizeof(hex), "%08x", fp.layout);
    add(RC_STR(p2p ? "messages and tags #" : "tensor list #", hex));
  }
  const std::string algo(fp.algorithm, strnlen(fp.algorithm, sizeof(fp.algorithm)));
  if (const uint32_t d = fp.digest()) {
    char hex[9];
    std::snprintf(hex, sizeof(hex), "%08x", d);
    add(RC_STR(algo, " schedule #", hex));
  } else if (!algo.empty()) {
    add(algo);
  }
  return RC_STR("rank ", fp.rank, " called ", methodName(fp.method), "(", args, ") #",
                fp.seq);
}

namespace {
const char* callNoun(const Fingerprint& fp) {
  return fp.method == Method::kPointToPoint ? "point-to-point call" : "collective";
}
}  // namespace

std::string mismatch(const Fingerprint& mine, const void* received, int peer) {
  Fingerprint theirs;
  std::memcpy(&theirs, received, sizeof(theirs));
  if (theirs.magic != Fingerprint::kMagic || theirs.version != Fingerprint::kVersion) {
    return RC_STR("ranks disagree about ", callNoun(mine), " #", mine.seq, ": ", describe(mine),
                  "; rank ", peer, " sent a message that is not a collective's header "
                  "(it is in another collective, or another version of ringcoll)");
  }
  if (sameCall(mine, theirs)) return "";
  theirs.rank = peer;  // the transport's word, not the message's
  const std::string me = describe(mine, peer), them = describe(theirs, mine.rank);
  const bool first = mine.rank < peer;
  return RC_STR("ranks disagree about ", callNoun(mine), " #", std::min(mine.seq, theirs.seq), ": ",
                first ? me : them, "; ", first ? them : me);
}

std::exception_ptr openingError(const Fingerprint* mine, const void* received, size_t got,
                                size_t want, int peer) {
  if (mine != nullptr) {
    const std::string disagreement =
        got >= sizeof(Fingerprint) ? mismatch(*mine, received, peer) : std::string();
    if (!disagreement.empty()) return std::make_exception_ptr(MismatchError(peer, disagreement));
  }
  if (got != want) return std::make_exception_ptr(wrongSize(peer, got, want));
  return nullptr;
}

}  // namespace ringcoll::algo
