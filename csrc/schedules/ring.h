// The ring (ring.cc has the worked example). The ring runs over positions
// 0..p-1 of Params::order; the chunk "of" position j is chunk order[j], so with
// shift 0 every rank owns, or starts from, its own chunk whatever the order.
//
//   all-reduce      = ringReduceScatter{shift 1} then ringAllGather{shift 1}
//   reduce-scatter  = ringReduceScatter{shift 0}   (torch: rank r keeps chunk r)
//   all-gather      = ringAllGather{shift 0}       (rank r starts with chunk r)
//   broadcast       = chainBroadcast: the whole buffer flows root -> next -> ...;
//                     the executor pipelines it segment by segment.
//   reduce          = ringReduceScatter{shift 0}, then every rank sends its reduced
//                     chunk straight to the root (one step: a gather).
#pragma once

#include "schedules/schedule.h"

namespace ringcoll::algo {

Schedule ringReduceScatter(const Params& prm, int shift);
Schedule ringAllGather(const Params& prm, int shift);
Schedule ringAllReduce(const Params& prm);
Schedule chainBroadcast(const Params& prm);
Schedule ringReduce(const Params& prm);

}  // namespace ringcoll::algo
