// The collectives, each in its own file: each turns a call into the Job the
// executor runs (engine/executor.h), a schedule from the algorithm over one buffer.
// They know no torch and no transport; the backend calls them with validated
// arguments and runs the job.
//
// Reductions beyond the element ops: AVG is SUM whose complete result is divided by
// p where the schedule marks it complete (once per element, before it is shared);
// PREMUL_SUM multiplies the local input by the factor and then SUMs. So transports
// and kernels only ever see RedOp.
#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <utility>
#include <vector>

#include "common/errors.h"
#include "engine/executor.h"
#include "reduce/reducer.h"
#include "reduce/types.h"
#include "schedules/registry.h"

namespace ringcoll::algo {

struct Reduction {
  RedOp op = RedOp::kSum;
  bool average = false;  // AVG: divide the reduced result by the world size
  bool premul = false;   // PREMUL_SUM: multiply local input by premulFactor first
  double premulFactor = 1.0;
};

// The reduction as the user named it, into the call's fingerprint.
inline void describeReduction(Fingerprint& fp, const Reduction& red) {
  fp.reduces = red.average ? Reduces::kAvg : red.premul ? Reduces::kPremulSum : Reduces::kOp;
  fp.op = red.op;
}

// The schedule's scratch (schedule.scratch elements of dtype) from the reducer's
// device, owned by the job; nullptr when it asks for none. A reducer with no memory
// to give makes the call fail with std::invalid_argument naming the algorithm.
inline void* allocateScratch(Job& job, const Schedule& schedule, DType dtype,
                             Reducer& reducer) {
  if (schedule.scratch == 0) return nullptr;
  job.owned = reducer.allocate(schedule.scratch * elementSize(dtype));
  RC_CHECK_ARG(job.owned != nullptr, "schedule '", schedule.name, "' needs ", schedule.scratch,
               " elements of scratch memory, which this device does not provide: name "
               "another algorithm for this collective");
  return job.owned.get();
}

// The job of a reducing schedule over buf (prm.n elements): PREMUL_SUM scales the
// local input in the job's prologue (once the ranks agreed, before anything is
// sent); AVG divides by p where the schedule marks elements reduced. A schedule
// with scratch (schedules/schedule.h) gets it from the reducer's device as a second
// region, its first elements a copy of buf's in the prologue (unless the schedule's
// scratch starts empty), after the
// scaling (host memory on CPU, stream-ordered device memory on CUDA); a reducer
// with no memory to give makes the call fail with std::invalid_argument naming
// the algorithm.
inline Job reducingJob(Schedule schedule, const Params& prm, void* buf, DType dtype,
                       const Reduction& red, Reducer& reducer) {
  Job job;
  const size_t n = prm.n, scratch = schedule.scratch;
  void* keep = allocateScratch(job, schedule, dtype, reducer);
  if (keep) job.regions = {{0, n, buf}, {n, n + scratch, keep}};
  if (red.premul || keep) {
    const double factor = red.premul ? red.premulFactor : 1.0;
    const bool premul = red.premul;
    const bool copy = schedule.scratchCopy;  // else the scratch starts empty
    job.prologue = [&reducer, buf, n, dtype, factor, premul, keep, scratch, copy] {
      if (premul) reducer.multiply(buf, n, dtype, factor);
      if (keep && copy) {
        reducer.copy(keep, buf, std::min(scratch, n) * elementSize(dtype), false);
      }
    };
  }
  job.schedule = std::move(schedule);
  job.buf = buf;
  job.n = n;
  job.dtype = dtype;
  job.op = red.op;
  job.divideBy = red.average ? prm.size : 0;
  return job;
}

// In place on buf (prm.n elements): every rank ends with the reduction of all
// inputs. PREMUL_SUM's scaling of buf is the job's prologue.
Job allreduce(const Algorithm& algo, const Params& prm, void* buf, DType dtype,
              const Reduction& red, Reducer& reducer);

// buf holds p * m elements (this rank's full input, clobbered). Afterwards
// job.schedule.result (block r) holds the reduction of block r of all inputs.
Job reduceScatter(const Algorithm& algo, const Params& prm, void* buf, DType dtype,
                  const Reduction& red, Reducer& reducer);

// The same without a working copy of the input, where the algorithm's schedule
// writes only its result block (two-shot's; not the ring's, which forwards partial
// sums through other blocks): the job reads the other blocks of `in` where they are
// (never writes them) and reduces block r into `out` (m elements), which its
// prologue fills with in's block r (nothing when `out` is that block). nullopt when
// the schedule writes elsewhere, asks for scratch, or the reduction is PREMUL_SUM
// (its scaling writes the input): then reduceScatter() on a copy.
std::optional<Job> reduceScatterFrom(const Algorithm& algo, const Params& prm, const void* in,
                                     void* out, DType dtype, const Reduction& red,
                                     Reducer& reducer);

// buf holds p * m elements, block r filled by rank r; afterwards all blocks are
// filled on every rank.
Job allgather(const Algorithm& algo, const Params& prm, void* buf, DType dtype);

// In place on buf (prm.n elements): the root (prm.root) ends with the reduction of
// all inputs; other ranks' buf is clobbered. PREMUL_SUM's scaling is done before
// this returns.
Job reduce(const Algorithm& algo, const Params& prm, void* buf, DType dtype,
           const Reduction& red, Reducer& reducer);

// The root's prm.n bytes of buf reach every rank.
Job broadcast(const Algorithm& algo, const Params& prm, void* buf);

// The Params barrier() builds the all-reduce schedule with: n = p (bytes).
inline Params barrierParams(Params prm) {
  prm.n = static_cast<size_t>(prm.size);
  return prm;
}

// Completes on no rank before every rank has entered. scratch: p zeroed bytes of
// host memory (the backend runs barriers on the CPU path); prm.n is ignored. A
// schedule's own scratch (one-shot's) is zeroed host memory the job owns.
Job barrier(const Algorithm& algo, const Params& prm, void* scratch);

// The collectives that move blocks between ranks without reducing, each by the
// algorithm's schedule (direct.cc draws direct's, the default) over a buffer of
// the user's memory: the job's regions (Job::regions), one per block, so nothing
// is staged; a rank's own block is copied locally in the job's prologue, once the
// ranks agreed. Their schedules obey registry.h's contract for them. All-to-all
// also gives a schedule the scratch it asks for (alltoall.cc).

// What gather and scatter share: a job over p blocks of prm.n / p elements whose
// regions are the root's p blocks (blocks[q] for block q) and, on every other rank,
// its own block alone at `mine`; the root's own block moves between `mine` and
// blocks[root] in the prologue (`toRoot`: gather's direction, mine -> blocks[root];
// else scatter's). `schedule` is the algorithm's for the collective.
Job rootedJob(Schedule schedule, const Params& prm, DType dtype, void* mine,
              const std::vector<void*>& blocks, Reducer& reducer, bool toRoot);

// Gather. prm.n = p * m: rank i's m elements at `mine` reach blocks[i] on the root
// (p pointers to m elements each there; empty on other ranks).
Job gather(const Algorithm& algo, const Params& prm, DType dtype, const void* mine,
           const std::vector<void*>& blocks, Reducer& reducer);

// Scatter. prm.n = p * m: the root's blocks[i] (p pointers to m elements each
// there; empty on other ranks) reach rank i at `mine`.
Job scatter(const Algorithm& algo, const Params& prm, DType dtype, void* mine,
            const std::vector<const void*>& blocks, Reducer& reducer);

// The Params alltoall() builds its schedule with: the counts, n their total.
inline Params alltoallParams(Params prm, const std::vector<size_t>& sendCounts,
                             const std::vector<size_t>& recvCounts) {
  prm.n = 0;
  for (size_t j = 0; j < sendCounts.size(); ++j) prm.n += sendCounts[j] + recvCounts[j];
  prm.sendCounts = sendCounts;
  prm.recvCounts = recvCounts;
  return prm;
}

// All-to-all: this rank's sends[j] (sendCounts[j] elements) reach recvs[this rank]
// on rank j, whose recvCounts[this rank] must equal it (the pairwise fingerprint
// checks that); sendCounts[rank] == recvCounts[rank]. The schedule's buffer is the
// send blocks followed by the receive blocks (the job sets prm.n and the counts).
Job alltoall(const Algorithm& algo, const Params& prm, DType dtype,
             const std::vector<const void*>& sends, const std::vector<size_t>& sendCounts,
             const std::vector<void*>& recvs, const std::vector<size_t>& recvCounts,
             Reducer& reducer);

}  // namespace ringcoll::algo
