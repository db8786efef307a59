// The name a torch user knows a ringcoll op by: the c10d entry point's name (what
// ringcoll's errors say, "ringcoll::allreduce #7") spelt as torch.distributed spells
// the call ("all_reduce"), for what the research tools print: the timeline
// (RINGCOLL_TRACE), RINGCOLL_DEBUG, as the benchmark, the model and the
// simulator do.
#pragma once

namespace ringcoll {

// "allreduce" -> "all_reduce", "alltoall_base" -> "all_to_all_single", ...; a name
// torch spells the same way is returned as it is. Returns a string literal or `op`.
const char* torchOpName(const char* op);

}  // namespace ringcoll
