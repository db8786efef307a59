#include "schedules/registry.h"

#include <stdexcept>

#include "common/errors.h"

namespace ringcoll::algo {

// The algorithms, one file each, each defining its entry.
Algorithm ringAlgorithm();     // ring.cc
Algorithm rhdAlgorithm();      // rhd.cc
Algorithm treeAlgorithm();     // tree.cc
Algorithm twoshotAlgorithm();  // twoshot.cc
Algorithm oneshotAlgorithm();  // oneshot.cc
Algorithm directAlgorithm();   // direct.cc
Algorithm biringAlgorithm();   // biring.cc

namespace {
const std::vector<Algorithm>& registry() {
  static const std::vector<Algorithm> algorithms = {
      ringAlgorithm(),    rhdAlgorithm(),    treeAlgorithm(), twoshotAlgorithm(),
      oneshotAlgorithm(), directAlgorithm(), biringAlgorithm()};
  return algorithms;
}
}  // namespace

namespace {
// torch.distributed's name where it differs from c10d's.
const char* torchName(Collective c) {
  switch (c) {
    case Collective::kAllreduce: return "all_reduce";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kAllgather: return "all_gather";
    case Collective::kAlltoall: return "all_to_all";
    default: return nullptr;
  }
}
}  // namespace

bool collectiveFromName(const std::string& name, Collective* out) {
  for (Collective c : kCollectives) {
    const char* alt = torchName(c);
    if (name == collectiveName(c) || (alt != nullptr && name == alt)) {
      *out = c;
      return true;
    }
  }
  return false;
}

std::string collectiveNames() {
  std::string out;
  for (Collective c : kCollectives) {
    out += (out.empty() ? "" : ", ") + std::string(collectiveName(c));
    if (const char* alt = torchName(c)) out += RC_STR(" (", alt, ")");
  }
  return out;
}

const char* torchCollectiveName(Collective c) {
  const char* t = torchName(c);
  return t != nullptr ? t : collectiveName(c);
}

const char* collectiveName(Collective c) {
  switch (c) {
    case Collective::kAllreduce: return "allreduce";
    case Collective::kReduceScatter: return "reducescatter";
    case Collective::kAllgather: return "allgather";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kReduce: return "reduce";
    case Collective::kBarrier: return "barrier";
    case Collective::kGather: return "gather";
    case Collective::kScatter: return "scatter";
    case Collective::kAlltoall: return "alltoall";
  }
  return "?";
}

const Builder& Algorithm::builder(Collective c) const {
  switch (c) {
    case Collective::kAllreduce: return allreduce;
    case Collective::kReduceScatter: return reduceScatter;
    case Collective::kAllgather: return allgather;
    case Collective::kBroadcast: return broadcast;
    case Collective::kReduce: return reduce;
    case Collective::kBarrier: return allreduce;
    case Collective::kGather: return gather;
    case Collective::kScatter: return scatter;
    case Collective::kAlltoall: return alltoall;
  }
  RC_ASSERT(false, "collective ", static_cast<int>(c));
}

std::string Algorithm::provided() const {
  std::string out;
  for (Collective c : kCollectives) {
    if (provides(c)) out += (out.empty() ? "" : ", ") + std::string(collectiveName(c));
  }
  return out.empty() ? "nothing" : out;
}

void Algorithm::require(Collective c) const {
  RC_CHECK_ARG(provides(c), "algorithm '", name, "' does not provide ", collectiveName(c),
               " (", name, " provides: ", provided(), ")");
}

const Algorithm& findAlgorithm(const std::string& name) {
  for (const auto& a : registry()) {
    if (a.name == name) return a;
  }
  std::string known;
  for (const auto& n : algorithmNames()) known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument(
      RC_STR("RINGCOLL_ALGO: unknown algorithm '", name, "' (known: ", known, ")"));
}

std::vector<std::string> algorithmNames() {
  std::vector<std::string> names;
  for (const auto& a : registry()) names.push_back(a.name);
  return names;
}

const Algorithm& defaultAlgorithm(Collective c) {
  const bool exchange =
      c == Collective::kGather || c == Collective::kScatter || c == Collective::kAlltoall;
  return findAlgorithm(exchange ? "direct" : "ring");
}

}  // namespace ringcoll::algo
