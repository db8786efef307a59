// The algorithm registry: RINGCOLL_ALGO names one entry. An algorithm gives, for
// each collective it provides, a function from Params to this rank's Schedule
// (algo/schedule.h); the executor runs it. Adding an algorithm is a schedule file
// and one entry in registry.cc.
//
// Contracts the collectives rely on (ringcoll.check proves them):
//   allreduce      every rank ends with the reduction of all inputs over [0, n);
//   reduceScatter  n = p * m; rank r ends with block r reduced, and `result` is it;
//   allgather      n = p * m; rank r starts with block r filled, all end with all;
//   broadcast      the root's [0, n) reaches every rank.
// Every reducing schedule marks, on every rank, where each element of its result
// first holds the complete reduction (Step::reduced).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "algo/schedule.h"

namespace ringcoll::algo {

using Builder = std::function<Schedule(const Params&)>;

struct Algorithm {
  std::string name;
  std::string summary;
  Builder allreduce;
  Builder reduceScatter;
  Builder allgather;
  Builder broadcast;
};

// Throws std::invalid_argument naming the unknown value and the known ones.
const Algorithm& findAlgorithm(const std::string& name);
std::vector<std::string> algorithmNames();

}  // namespace ringcoll::algo
