// ringcoll's torch ops (ops.cc) and what their eager entry needs (bindings.cc:
// _C.all_reduce_eager, called by ringcoll/ops.py). The op's body is
// RingcollBackend::allreduceNow.
#pragma once

#include <string>

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>
#include <c10/util/intrusive_ptr.h>

namespace ringcoll {

class RingcollBackend;

namespace ops {

// The ringcoll backend of the process group registered as `groupName` for `device`
// tensors; raises naming the group and its backend when it has none. `op` names
// the caller in the message.
c10::intrusive_ptr<RingcollBackend> backendOf(const char* op, const std::string& groupName,
                                              c10::DeviceType device);

// Whether torch's dispatcher, called with `tensor`, would do nothing but run the op's
// CPU or CUDA kernel: a dense CPU or CUDA tensor with no Python, functionalization,
// conjugate or negative-view key, no dispatch mode, torch-function mode or
// thread-local key pushed (autocast, tracing), no profiler recording, not an
// inference tensor, and no autograd record to make (grad mode off or no grad
// required). The caller also
// bumps the tensor's version, as the op's ADInplaceOrView kernel does.
bool dispatcherRunsKernelOnly(const at::Tensor& tensor);

}  // namespace ops
}  // namespace ringcoll
