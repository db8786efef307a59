#include "algo/registry.h"

#include <stdexcept>

#include "algo/ring.h"
#include "common/errors.h"

namespace ringcoll::algo {

namespace {
const std::vector<Algorithm>& registry() {
  static const std::vector<Algorithm> algorithms = {
      {"ring",
       "ring: reduce-scatter (share-reduce) then all-gather (share-only); chain "
       "broadcast",
       ringAllReduce, [](const Params& prm) { return ringReduceScatter(prm, 0); },
       [](const Params& prm) { return ringAllGather(prm, 0); }, chainBroadcast},
  };
  return algorithms;
}
}  // namespace

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
