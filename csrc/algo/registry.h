// The algorithm registry: RINGCOLL_ALGO names one entry. An algorithm says which
// phases make up each collective; the executor runs them. Adding an algorithm is a
// schedule file (a Phase subclass) and one entry in registry.cc.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "algo/schedule.h"

namespace ringcoll::algo {

using Phases = std::vector<std::unique_ptr<Phase>>;

struct Algorithm {
  std::string name;
  std::string summary;
  // Phases over a buffer of p blocks. all-reduce: the last reducing phase's
  // ownedBlockAfter() tells where AVG divides. reduce-scatter: rank r must own block
  // r after its phases. all-gather: rank r starts with block r.
  std::function<Phases(int p)> allreduce;
  std::function<Phases(int p)> reduceScatter;
  std::function<Phases(int p)> allgather;
  std::function<Phases(int p, int root)> broadcast;
};

// Throws std::invalid_argument naming the unknown value and the known ones.
const Algorithm& findAlgorithm(const std::string& name);
std::vector<std::string> algorithmNames();

}  // namespace ringcoll::algo
