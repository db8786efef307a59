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
// torch.compile(fullgraph=True) traces it. Python front end: ringcoll/ops.py.
#include <string>
#include <vector>

#include <torch/library.h>
#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>

#include "backend/backend.h"

namespace ringcoll {
namespace {

void allReduceInPlace(at::Tensor& tensor, const std::string& groupName) {
  const c10::intrusive_ptr<c10d::ProcessGroup> pg = c10d::resolve_process_group(groupName);
  c10::intrusive_ptr<c10d::Backend> backend;
  if (pg->hasBackends()) {
    try {
      backend = pg->getBackend(tensor.device().type());
    } catch (const c10::Error&) {
      // no backend for this device: said below
    }
  }
  auto* rc = dynamic_cast<RingcollBackend*>(backend.get());
  TORCH_CHECK(rc != nullptr, "ringcoll.ops.all_reduce_: process group '", groupName,
              "' has no ringcoll backend for ", tensor.device().type(), " tensors (its backend: ",
              pg->getBackendName(), "); create it with backend=\"ringcoll\"");
  std::vector<at::Tensor> tensors{tensor};
  rc->allreduce(tensors, c10d::AllreduceOptions())->wait();
}

}  // namespace

TORCH_LIBRARY(ringcoll, m) {
  m.def("all_reduce_(Tensor(a!) tensor, str group_name) -> ()");
}

TORCH_LIBRARY_IMPL(ringcoll, CPU, m) { m.impl("all_reduce_", &allReduceInPlace); }
TORCH_LIBRARY_IMPL(ringcoll, CUDA, m) { m.impl("all_reduce_", &allReduceInPlace); }
TORCH_LIBRARY_IMPL(ringcoll, Meta, m) {
  m.impl("all_reduce_", [](at::Tensor&, const std::string&) {});
}

}  // namespace ringcoll
