#include "backend/op_names.h"

#include <cstring>

namespace ringcoll {

const char* torchOpName(const char* op) {
  // Only the names that differ (the c10d entry points of csrc/backend/api*.cc).
  static constexpr const char* kNames[][2] = {
      {"allreduce", "all_reduce"},
      {"allreduce_coalesced", "all_reduce_coalesced"},
      {"allgather", "all_gather"},
      {"allgather_coalesced", "all_gather_coalesced"},
      {"allgather_into_tensor_coalesced", "all_gather_into_tensor_coalesced"},
      {"alltoall", "all_to_all"},
      {"alltoall_base", "all_to_all_single"},
      {"gather_single", "gather"},
  };
  for (const auto& n : kNames) {
    if (std::strcmp(op, n[0]) == 0) return n[1];
  }
  return op;
}

}  // namespace ringcoll
