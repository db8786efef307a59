// reduce-scatter = the algorithm's reduce-scatter schedule; rank r keeps block r.
#include "engine/collectives.h"

#include "common/errors.h"

namespace ringcoll::algo {

Job reduceScatter(const Algorithm& algo, const Params& prm, void* buf, DType dtype,
                  const Reduction& red, Reducer& reducer) {
  RC_ASSERT(prm.n % static_cast<size_t>(prm.size) == 0, "reduce-scatter buffer ", prm.n,
            " not a multiple of ", prm.size);
  Job job = reducingJob(algo.reduceScatter(prm), prm, buf, dtype, red, reducer);
  RC_ASSERT(job.schedule.result == blockRange(prm.n, prm.size, prm.rank),
            job.schedule.name, " leaves rank ", prm.rank, " a result other than block ",
            prm.rank);
  return job;
}

namespace {
// Every range the schedule writes (receives, local ones too) lies in its result,
// and every range it sends lies on one side of the result or in it (each transfer
// must fall in one region of the job: before the result, the result, after it).
bool writesOnlyResult(const Schedule& s) {
  const Range r = s.result;
  for (const Step& st : s.steps) {
    for (const Transfer& t : st.transfers) {
      if (t.range.empty()) continue;
      const bool inside = t.range.begin >= r.begin && t.range.end <= r.end;
      if (t.kind != Kind::kSend && !inside) return false;
      if (!inside && t.range.overlaps(r)) return false;
    }
  }
  return true;
}
}  // namespace

std::optional<Job> reduceScatterFrom(const Algorithm& algo, const Params& prm, const void* in,
                                     void* out, DType dtype, const Reduction& red,
                                     Reducer& reducer) {
  RC_ASSERT(prm.n % static_cast<size_t>(prm.size) == 0, "reduce-scatter buffer ", prm.n,
            " not a multiple of ", prm.size);
  if (red.premul) return std::nullopt;  // its scaling would write the input
  Schedule s = algo.reduceScatter(prm);
  const Range mine = blockRange(prm.n, prm.size, prm.rank);
  RC_ASSERT(s.result == mine, s.name, " leaves rank ", prm.rank, " a result other than block ",
            prm.rank);
  if (s.scratch > 0 || !writesOnlyResult(s)) return std::nullopt;
  const size_t es = elementSize(dtype);
  char* base = static_cast<char*>(const_cast<void*>(in));
  char* own = base + mine.begin * es;
  Job job;
  job.schedule = std::move(s);
  job.buf = base;
  job.n = prm.n;
  job.dtype = dtype;
  job.op = red.op;
  job.divideBy = red.average ? prm.size : 0;
  if (mine.begin > 0) job.regions.push_back({0, mine.begin, base});
  if (!mine.empty()) job.regions.push_back({mine.begin, mine.end, out});
  if (mine.end < prm.n) job.regions.push_back({mine.end, prm.n, base + mine.end * es});
  if (!mine.empty() && out != own) {
    job.prologue = [&reducer, out, own, bytes = mine.size() * es] {
      reducer.copy(out, own, bytes, false);
    };
  }
  return job;
}

}  // namespace ringcoll::algo
