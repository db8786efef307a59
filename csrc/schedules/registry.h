// The algorithm registry: RINGCOLL_ALGO names entries of it (schedules/select.h). An
// algorithm gives, for each collective it provides, a function from Params to this
// rank's Schedule (schedules/schedule.h); the executor runs it. Adding a built-in
// algorithm is one schedule file defining its entry and one line in registry.cc;
// an algorithm written in Python (ringcoll/schedules) is added at run time
// (registerAlgorithm), with no rebuild, and is used by the same name everywhere.
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
// rank that holds it and write it only where it ends, except that an all-to-all
// schedule may ask for scratch (a forwarding one, Bruck's, stages blocks there).
// Every reducing schedule marks, on every rank that holds part of the complete
// reduction, where each element of it first does (Step::reduced).
//
// An empty Builder: the algorithm does not provide that collective. Barrier is an
// all-reduce of p bytes, so an algorithm with an all-reduce provides it.
//
// Every collective has a default algorithm (defaultAlgorithm): ring, except for
// gather, scatter and all-to-all, which ring does not provide: direct.
#pragma once

#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
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

// Where an algorithm's collective applies: its declaration (the default, and every
// built-in algorithm's: everywhere). An algorithm that serves only some world sizes
// (powers of two, say), some buffer sizes, or counts that are multiples of its
// chunking (an imported MSCCL algorithm) says so here, and every tool honours it:
// the backend refuses a call it does not serve with an error naming the algorithm,
// the collective, p, n and bytes and the declaration (a barrier, whose bytes are not
// the user's, runs the default instead); RINGCOLL_ALGO=auto and the cost model leave
// it out where it does not apply; ringcoll.check, .sim and .bench skip what it does
// not serve and say so. Bytes are the selector's (select.h: the collective's buffer).
struct Applies {
  std::vector<int> worldSizes;  // served world sizes, sorted; empty: every one
  bool powersOfTwo = false;     // only powers of two (with worldSizes: both must hold)
  size_t minBytes = 0;          // minBytes <= bytes < maxBytes, as RINGCOLL_ALGO's ranges
  size_t maxBytes = SIZE_MAX;
  size_t countMultiple = 1;     // n (Params::n) a multiple of it
  std::vector<int> roots;       // served roots, sorted (rooted collectives); empty: every one
  std::string declared;         // the declaration in words, for messages

  bool everywhere() const {
    return worldSizes.empty() && !powersOfTwo && minBytes == 0 && maxBytes == SIZE_MAX &&
           countMultiple == 1 && roots.empty();
  }
  // "" when p (and n, bytes and root, unless SIZE_MAX or -1: not asked) are served,
  // else the part of the declaration they break ("p=3 is not a power of two").
  std::string breaks(int p, size_t n = SIZE_MAX, size_t bytes = SIZE_MAX,
                     int root = -1) const;
};

struct Algorithm;
// The algorithm one call runs (Algorithm::prepare): owned when prepared, else a
// registry entry, not owned.
using Prepared = std::shared_ptr<const Algorithm>;
using Preparer = std::function<Prepared(Collective, const Params&)>;

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
  // Empty for the built-in algorithms. Set by one whose builders call out of C++
  // (a Python one): the backend calls it on the thread that issues the collective,
  // with the call's Params, and runs the algorithm it returns, whose builder of
  // that collective gives the schedule prepare() built, proved and gave a digest
  // (Schedule::digest), once per Params (later calls find it). Why on that thread:
  // the job's builders run on the worker or the stream path's launch, where
  // calling into Python could wait forever for a GIL held by a caller that waits
  // for them (ringcoll.ops' blocking op, a destructor); so a prepared builder
  // never calls out.
  Preparer prepare;
  // Where each collective applies, by Collective (barrier: the all-reduce's).
  Applies where[std::size(kCollectives)];

  // The declaration of c (barrier: the all-reduce's).
  const Applies& applies(Collective c) const;
  // "" when this algorithm's c serves a call of p ranks, n elements and `bytes`
  // (SIZE_MAX: not asked; a barrier's bytes are never asked), else one line naming
  // the algorithm, c, the call and the declaration: "algorithm 'x' does not apply to
  // all_reduce at p=3, n=9 (36 bytes): p=3 is not a power of two (x declares for
  // all_reduce: world sizes powers of two)".
  std::string refusal(Collective c, int p, size_t n = SIZE_MAX, size_t bytes = SIZE_MAX,
                      int root = -1) const;

  // The builder of c (barrier: the all-reduce's); empty if not provided.
  const Builder& builder(Collective c) const;
  bool provides(Collective c) const { return static_cast<bool>(builder(c)); }
  // "allreduce, reducescatter, ..." : what it provides, for error messages.
  std::string provided() const;
  // Throws std::invalid_argument naming the algorithm, c and what it provides.
  void require(Collective c) const;
};

// Throws std::invalid_argument naming the unknown value and the known ones. The
// latest entry of the name (registerAlgorithm); entries live as long as the process.
const Algorithm& findAlgorithm(const std::string& name);
// In the order of their first registration: the built-in ones first.
std::vector<std::string> algorithmNames();
bool isBuiltin(const std::string& name);

// Adds `a` to the registry, or defines its name again if it is not a built-in
// one (a Python module imported again, a notebook cell run twice): a selection
// made before (a process group created before) keeps the entry it found. Throws
// std::invalid_argument for a built-in name, `auto`, or a name RINGCOLL_ALGO
// could not parse (letters, digits, '_' and '-' only).
void registerAlgorithm(Algorithm a);

// What Algorithm::prepare returns: `a` with the builder of c (barrier: the
// all-reduce's) giving `schedule` for `prm`, and no other builder. A builder
// asked for other Params is a bug (the call site prepared what the job does not
// run): an internal error naming both.
Prepared pinned(const Algorithm& a, Collective c, const Params& prm, Schedule schedule);
// What Algorithm::prepare's failure gives: `a` with the builder of c throwing
// std::runtime_error(why), so that the job fails where a job's failures are handled.
Prepared refused(const Algorithm& a, Collective c, const std::string& why);

// What runs c when RINGCOLL_ALGO does not say: ring, or direct for gather, scatter
// and all-to-all.
const Algorithm& defaultAlgorithm(Collective c);

}  // namespace ringcoll::algo
