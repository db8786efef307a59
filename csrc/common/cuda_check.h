// Every CUDA runtime and NCCL call goes through these: a failure throws with the
// call's text, file:line and the library's own message. Never exit().
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>

#include "common/errors.h"

#define RC_CUDA_CHECK(call)                                                        \
  do {                                                                             \
    const cudaError_t rc_err_ = (call);                                            \
    if (rc_err_ != cudaSuccess) {                                                  \
      throw std::runtime_error(RC_STR("ringcoll: CUDA call ", #call, " failed at ", \
                                      __FILE__, ":", __LINE__, ": ",               \
                                      cudaGetErrorString(rc_err_)));               \
    }                                                                              \
  } while (0)

// NCCL errors are peer/transport failures: PeerError with the peer if known.
#define RC_NCCL_CHECK(call, peer)                                                   \
  do {                                                                              \
    const ncclResult_t rc_res_ = (call);                                            \
    if (rc_res_ != ncclSuccess && rc_res_ != ncclInProgress) {                      \
      throw ::ringcoll::PeerError((peer), RC_STR("NCCL call ", #call, " failed at ", \
                                                 __FILE__, ":", __LINE__, ": ",     \
                                                 ncclGetErrorString(rc_res_)));     \
    }                                                                               \
  } while (0)
