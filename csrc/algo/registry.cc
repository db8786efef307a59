#include "algo/registry.h"

#include <stdexcept>

#include "common/errors.h"

namespace ringcoll::algo {

// The algorithms, one file each, each defining its entry.
Algorithm ringAlgorithm();     // ring.cc
Algorithm rhdAlgorithm();      // rhd.cc
Algorithm treeAlgorithm();     // tree.cc
Algorithm twoshotAlgorithm();  // twoshot.cc

namespace {
const std::vector<Algorithm>& registry() {
  static const std::vector<Algorithm> algorithms = {
      ringAlgorithm(), rhdAlgorithm(), treeAlgorithm(), twoshotAlgorithm()};
  return algorithms;
}
}  // namespace

const char* collectiveName(Collective c) {
  switch (c) {
    case Collective::kAllreduce: return "allreduce";
    case Collective::kReduceScatter: return "reducescatter";
    case Collective::kAllgather: return "allgather";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kReduce: return "reduce";
    case Collective::kBarrier: return "barrier";
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

}  // namespace ringcoll::algo
