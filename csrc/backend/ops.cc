// ringcoll's own torch ops, for code that calls a collective without c10d's Python
// layer (tensor-parallel inference, compiled graphs):
//
//   ringcoll::all_reduce_(Tensor(a!) tensor, str group_name) -> ()
//
// An in-place SUM all-reduce on the ringcoll backend of the process group named
// `group_name` (ProcessGroup.group_name), blocking like dist.all_reduce without
// async_op: it is the same collective (sequence number, checks, fingerprint,
// timeout, errors) as the backend's allreduce, so calls of the op and of
// dist.all_reduce may be mixed in one program as long as every rank makes the same
// calls in the same order. The Meta kernel is the op's fake implementation, so
// torch.compile(fullgraph=True) traces it. Python front end: ringcoll/ops.py, which
// in eager code calls the same body without the dispatcher where the dispatcher
// would do nothing else (ops.h: dispatcherRunsKernelOnly).
#include "backend/ops.h"

#include <vector>

#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/record_function.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/autograd/VariableTypeUtils.h>
#include <torch/library.h>
#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>

#include "backend/backend.h"

namespace ringcoll::ops {

c10::intrusive_ptr<RingcollBackend> backendOf(const char* op, const std::string& groupName,
                                              c10::DeviceType device) {
  const c10::intrusive_ptr<c10d::ProcessGroup> pg = c10d::resolve_process_group(groupName);
  c10::intrusive_ptr<c10d::Backend> backend;
  if (pg->hasBackends()) {
    try {
      backend = pg->getBackend(device);
    } catch (const c10::Error&) {
      // no backend for this device: said below
    }
  }
  auto* rc = dynamic_cast<RingcollBackend*>(backend.get());
  TORCH_CHECK(rc != nullptr, op, ": process group '", groupName, "' has no ringcoll backend for ",
              device, " tensors (its backend: ", pg->getBackendName(),
              "); create it with backend=\"ringcoll\"");
  return c10::intrusive_ptr<RingcollBackend>::reclaim_copy(rc);
}

bool dispatcherRunsKernelOnly(const at::Tensor& tensor) {
  if (tensor.is_inference() || (c10::GradMode::is_enabled() && tensor.requires_grad())) {
    return false;
  }
  // The key the dispatcher would run first once autograd is set aside: the tensor's
  // keys (which name autocast too) with the thread's included ones, less those it
  // excludes (autocast while it is off, autograd under no_grad); BackendSelect, always
  // included, picks a backend only for ops with no tensor argument.
  const c10::impl::LocalDispatchKeySet tls = c10::impl::tls_local_dispatch_key_set();
  const c10::DispatchKeySet keys = ((tensor.key_set() | tls.included_) - tls.excluded_) -
                                   c10::autograd_dispatch_keyset_with_ADInplaceOrView -
                                   c10::DispatchKeySet(c10::DispatchKey::BackendSelect);
  const c10::DispatchKey first = keys.highestPriorityTypeId();
  if (first != c10::DispatchKey::CPU && first != c10::DispatchKey::CUDA) return false;
  // The profiler records the op's call from the dispatcher; ringcoll records none.
  if (at::getStepCallbacksUnlessEmpty(at::RecordScope::FUNCTION).has_value()) return false;
  return !c10::impl::TorchDispatchModeTLS::any_modes_set() &&
         !at::impl::torch_function_mode_enabled();
}

namespace {

void allReduceKernel(at::Tensor& tensor, const std::string& groupName) {
  // The dispatcher's call holds no GIL (torch.ops' Python entry lets it go).
  backendOf("ringcoll.ops.all_reduce_", groupName, tensor.device().type())
      ->allreduceNow(tensor, /*gilHeld=*/false);
}

// The op's handle, for the kernels below that redispatch it.
c10::TypedOperatorHandle<void(at::Tensor&, const std::string&)> theOp() {
  return c10::Dispatcher::singleton()
      .findSchemaOrThrow("ringcoll::all_reduce_", "")
      .typed<void(at::Tensor&, const std::string&)>();
}

// The op writes its argument, so it bumps the tensor's version as torch's own in-place
// ops do (autograd then refuses a backward through a value it overwrote); torch
// registers no such step for an op defined here. The eager entry does the same.
void allReduceBumpingVersion(c10::DispatchKeySet keys, at::Tensor& tensor,
                             const std::string& groupName) {
  static const auto op = theOp();
  {
    at::AutoDispatchBelowADInplaceOrView below;
    op.redispatch(keys & c10::after_ADInplaceOrView_keyset, tensor, groupName);
  }
  // An inference tensor has no version (reduced outside inference mode, it still
  // reaches this kernel: the thread includes ADInplaceOrView).
  if (!tensor.is_inference()) torch::autograd::increment_version(tensor);
}

// A conjugate or negative view (x.conj(), x.conj().imag): torch's fallback for those
// bits (ATen's MathBitsFallback) reads an in-place op's result from the stack's first
// return, which this op, returning nothing, does not have: it read past the stack's
// end and corrupted the heap ("malloc(): unsorted double linked list corrupted" some
// calls later). So the op resolves the bits itself, as the fallback would: it reduces
// a materialized copy of the values the view shows, then writes them back through the
// view (copy_ applies its bits). Reached below ADInplaceOrView, so neither the copy
// nor the write bumps the version again.
void allReduceResolvingBits(c10::DispatchKeySet keys, at::Tensor& tensor,
                            const std::string& groupName) {
  static const auto op = theOp();
  at::Tensor values = tensor.resolve_conj().resolve_neg();
  op.redispatch(keys.remove(c10::DispatchKey::Conjugate).remove(c10::DispatchKey::Negative),
                values, groupName);
  tensor.copy_(values);
}

}  // namespace

TORCH_LIBRARY(ringcoll, m) {
  m.def("all_reduce_(Tensor(a!) tensor, str group_name) -> ()");
}

TORCH_LIBRARY_IMPL(ringcoll, CPU, m) { m.impl("all_reduce_", &allReduceKernel); }
TORCH_LIBRARY_IMPL(ringcoll, CUDA, m) { m.impl("all_reduce_", &allReduceKernel); }
TORCH_LIBRARY_IMPL(ringcoll, ADInplaceOrView, m) {
  m.impl("all_reduce_", &allReduceBumpingVersion);
}
TORCH_LIBRARY_IMPL(ringcoll, Conjugate, m) { m.impl("all_reduce_", &allReduceResolvingBits); }
TORCH_LIBRARY_IMPL(ringcoll, Negative, m) { m.impl("all_reduce_", &allReduceResolvingBits); }
TORCH_LIBRARY_IMPL(ringcoll, Meta, m) {
  m.impl("all_reduce_", [](at::Tensor&, const std::string&) {});
}

}  // namespace ringcoll::ops
