// The algorithm registry: RINGCOLL_ALGO names entries of it (algo/select.h). An
// algorithm gives, for each collective it provides, a function from Params to this
// rank's Schedule (algo/schedule.h); the executor runs it. Adding an algorithm is
// one schedule file defining its entry and one line in registry.cc.
//
// Contracts the collectives rely on (ringcoll.check proves them):
//   allreduce      every rank ends with the reduction of all inputs over [0, n);
//   reduceScatter  n = p * m; rank r ends with block r reduced, and `result` is it;
//   allgather      n = p * m; rank r starts with block r filled, all end with all;
//   broadcast      the root's [0, n) reaches every rank;
//   reduce         the root ends with the reduction of all inputs over [0, n), and
//                  its `result` is [0, n); other ranks' buffers are clobbered and
//                  their `result` is empty.
// Every reducing schedule marks, on every rank that holds part of the complete
// reduction, where each element of it first does (Step::reduced).
//
// An empty Builder: the algorithm does not provide that collective. Barrier is an
// all-reduce of p bytes, so an algorithm with an all-reduce provides it.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "algo/schedule.h"

namespace ringcoll::algo {

using Builder = std::function<Schedule(const Params&)>;

enum class Collective : uint8_t {
  kAllreduce, kReduceScatter, kAllgather, kBroadcast, kReduce, kBarrier
};
inline constexpr Collective kCollectives[] = {
    Collective::kAllreduce, Collective::kReduceScatter, Collective::kAllgather,
    Collective::kBroadcast, Collective::kReduce,        Collective::kBarrier};

// The names RINGCOLL_ALGO uses: allreduce, reducescatter, allgather, broadcast,
// reduce, barrier.
const char* collectiveName(Collective c);

struct Algorithm {
  std::string name;
  std::string summary;
  Builder allreduce;
  Builder reduceScatter;
  Builder allgather;
  Builder broadcast;
  Builder reduce;

  // The builder of c (barrier: the all-reduce's); empty if not provided.
  const Builder& builder(Collective c) const;
  bool provides(Collective c) const { return static_cast<bool>(builder(c)); }
  // "allreduce, reducescatter, ..." : what it provides, for error messages.
  std::string provided() const;
  // Throws std::invalid_argument naming the algorithm, c and what it provides.
  void require(Collective c) const;
};

// Throws std::invalid_argument naming the unknown value and the known ones.
const Algorithm& findAlgorithm(const std::string& name);
std::vector<std::string> algorithmNames();

}  // namespace ringcoll::algo
