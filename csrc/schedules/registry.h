// The algorithm registry: RINGCOLL_ALGO names entries of it (schedules/select.h). An
// algorithm gives, for each collective it provides, a function from Params to this
// rank's Schedule (schedules/schedule.h); the executor runs it. Adding an algorithm is
// one schedule file defining its entry and one line in registry.cc.
//
// Contracts the collectives rely on (ringcoll.check proves them):
//   allreduce      every rank ends with the reduction of all inputs over [0, n);
//   reduceScatter  n = p * m; rank r ends with block r reduced, and `result` is it;
//   allgather      n = p * m; rank r starts with block r filled, all end with all;
//   broadcast      the root's [0, n) reaches every rank;
//   reduce         the root ends with the reduction of all inputs over [0, n), and
//                  its `result` is [0, n); other ranks' buffers are clobbered and
//                  their `result` is empty;
//   gather         n = p * m, block i standing for rank i's m elements; rank i
//                  starts with block i, the root ends with every block, and its
//                  `result` is [0, n); other ranks' `result` is empty;
//   scatter        n = p * m; the root starts with every block, rank i ends with
//                  block i, and its `result` is it;
//   alltoall       Params::sendCounts and recvCounts give the buffer: this rank's p
//                  send blocks then its p receive blocks (n their total); block j
//                  of the sends reaches rank j's receive block of this rank; the
//                  own block (sendCounts[rank] == recvCounts[rank]) is copied
//                  locally by the job, not by the schedule; `result` is the
//                  receive blocks.
// The jobs of gather, scatter and all-to-all (engine/collectives.h) address only
// the user's blocks (no staging): their schedules may send a block only from the
// rank that holds it and write it only where it ends.
// Every reducing schedule marks, on every rank that holds part of the complete
// reduction, where each element of it first does (Step::reduced).
//
// An empty Builder: the algorithm does not provide that collective. Barrier is an
// all-reduce of p bytes, so an algorithm with an all-reduce provides it.
//
// Every collective has a default algorithm (defaultAlgorithm): ring, except for
// gather, scatter and all-to-all, which ring does not provide: direct.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "schedules/schedule.h"

namespace ringcoll::algo {

using Builder = std::function<Schedule(const Params&)>;

enum class Collective : uint8_t {
  kAllreduce, kReduceScatter, kAllgather, kBroadcast, kReduce, kBarrier,
  kGather, kScatter, kAlltoall
};
inline constexpr Collective kCollectives[] = {
    Collective::kAllreduce, Collective::kReduceScatter, Collective::kAllgather,
    Collective::kBroadcast, Collective::kReduce,        Collective::kBarrier,
    Collective::kGather,    Collective::kScatter,       Collective::kAlltoall};

// The names ringcoll prints: allreduce, reducescatter, allgather, broadcast,
// reduce, barrier, gather, scatter, alltoall (c10d's).
const char* collectiveName(Collective c);
// The collective a name means: c10d's names above, or torch.distributed's
// (all_reduce, reduce_scatter, all_gather, all_to_all; the others are the same).
// False for anything else.
bool collectiveFromName(const std::string& name, Collective* out);
// "allreduce (all_reduce), reducescatter (reduce_scatter), ...": for messages.
std::string collectiveNames();
// torch.distributed's name (all_reduce, reduce_scatter, all_gather, all_to_all,
// broadcast, ...): what the selection's reasons print, as the benchmark, model,
// simulator and timeline do.
const char* torchCollectiveName(Collective c);

struct Algorithm {
  std::string name;
  std::string summary;
  Builder allreduce;
  Builder reduceScatter;
  Builder allgather;
  Builder broadcast;
  Builder reduce;
  Builder gather;
  Builder scatter;
  Builder alltoall;

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

// What runs c when RINGCOLL_ALGO does not say: ring, or direct for gather, scatter
// and all-to-all.
const Algorithm& defaultAlgorithm(Collective c);

}  // namespace ringcoll::algo
