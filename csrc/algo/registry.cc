#include "algo/registry.h"

#include "algo/ring.h"
#include "common/errors.h"

namespace ringcoll::algo {

namespace {
template <typename... Ps>
Phases phases(Ps... ps) {
  Phases out;
  (out.push_back(std::make_unique<Ps>(ps)), ...);
  return out;
}

const std::vector<Algorithm>& registry() {
  static const std::vector<Algorithm> algorithms = {
      {"ring",
       "ring: reduce-scatter (share-reduce) then all-gather (share-only); chain "
       "broadcast",
       [](int) { return phases(RingReduceScatter(1), RingAllGather(1)); },
       [](int) { return phases(RingReduceScatter(0)); },
       [](int) { return phases(RingAllGather(0)); },
       [](int, int root) { return phases(ChainBroadcast(root)); }},
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
