// ringcoll._C: the backend factory ringcoll/__init__.py registers with
// torch.distributed, plus pure entry points the tests use to check the schedules
// and reducers without any process group.
#include <torch/extension.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/utils/pybind.h>

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "bindings_algorithms.h"
#include "backend/checks.h"
#include "backend/flight_recorder.h"
#include "backend/ops.h"
#include "backend/work.h"
#include "common/knobs.h"
#include "engine/collectives.h"
#include "engine/plan.h"
#include "engine/topology.h"
#include "reduce/reducer.h"
#include "reduce/vector.h"
#include "schedules/registry.h"
#include "schedules/schedule.h"
#include "schedules/select.h"
#include "transport/shm_transport.h"
#ifdef RINGCOLL_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <nccl.h>

#include "common/cuda_check.h"
#include "reduce/cuda_reducer.h"
#endif

namespace py = pybind11;

namespace {

using ringcoll::RingcollBackend;

// The knobs, with RINGCOLL_ALGO and RINGCOLL_GPU_ALGO parsed against the registry.
ringcoll::Knobs loadKnobs(const std::map<std::string, std::string>& overrides) {
  try {
    ringcoll::Knobs knobs = ringcoll::Knobs::load(overrides);
    ringcoll::algo::Selector{knobs.algo};
    if (!knobs.gpuAlgo.empty()) ringcoll::algo::Selector{knobs.gpuAlgo};
    return knobs;
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK(false, "ringcoll: ", e.what());
  }
}

c10::intrusive_ptr<c10d::Backend> createBackend(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, double timeoutSeconds,
    const c10::intrusive_ptr<c10d::Backend>& p2p,
    const std::map<std::string, std::string>& overrides, const std::string& group,
    const std::vector<int64_t>& globalRanks) {
  const ringcoll::Knobs knobs = loadKnobs(overrides);
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeoutSeconds * 1000));
  TORCH_CHECK(globalRanks.empty() || static_cast<int>(globalRanks.size()) == size,
              "ringcoll: ", globalRanks.size(), " global ranks for a group of ", size);
  return c10::make_intrusive<RingcollBackend>(store, rank, size, timeout, p2p, knobs, group,
                                              globalRanks);
}

// A collective by either of its names (schedules/registry.h).
ringcoll::algo::Collective collectiveNamed(const std::string& name, bool barrier = false) {
  ringcoll::algo::Collective c;
  const bool known = ringcoll::algo::collectiveFromName(name, &c) &&
                     (barrier || c != ringcoll::algo::Collective::kBarrier);
  TORCH_CHECK(known, "unknown collective ", name, " (", ringcoll::algo::collectiveNames(), ")");
  return c;
}

ringcoll::algo::Schedule buildSchedule(const std::string& algoName,
                                       const std::string& collective, int p, int rank,
                                       size_t n, int root, const std::vector<int>& order,
                                       const std::vector<size_t>& sendCounts = {},
                                       const std::vector<size_t>& recvCounts = {},
                                       const std::vector<int>& hosts = {}) {
  const auto& algo = ringcoll::algo::findAlgorithm(algoName);
  TORCH_CHECK(p >= 1 && rank >= 0 && rank < p, "rank ", rank, " of ", p);
  ringcoll::algo::Params prm;
  prm.rank = rank;
  prm.size = p;
  prm.n = n;
  prm.root = root;
  prm.order = order;
  prm.sendCounts = sendCounts;
  prm.recvCounts = recvCounts;
  TORCH_CHECK(hosts.empty() || static_cast<int>(hosts.size()) == p, "hosts: ", hosts.size(),
              " entries for ", p, " ranks (one per rank, or none: one host)");
  prm.hosts = hosts;
  const auto c = collectiveNamed(collective);
  algo.require(c);  // std::invalid_argument: ValueError naming what it provides
  return algo.builder(c)(prm);
}

const char* kindName(ringcoll::algo::Kind k) {
  switch (k) {
    case ringcoll::algo::Kind::kSend: return "send";
    case ringcoll::algo::Kind::kRecvCopy: return "recv_copy";
    case ringcoll::algo::Kind::kRecvReduce: return "recv_reduce";
    case ringcoll::algo::Kind::kRecvReduceFirst: return "recv_reduce_first";
  }
  return "?";
}

// One rank's schedule as plain data, for ringcoll.check and the schedule tests:
// {"name", "result": (b, e), "steps": [{"transfers": [(kind, peer, b, e)],
// "reduced": [(b, e)]}]}.
py::dict toDict(const ringcoll::algo::Schedule& sched) {
  py::list steps;
  for (const auto& st : sched.steps) {
    py::list transfers, reduced;
    for (const auto& t : st.transfers) {
      transfers.append(py::make_tuple(kindName(t.kind), t.peer, t.range.begin, t.range.end));
    }
    for (const auto& r : st.reduced) reduced.append(py::make_tuple(r.begin, r.end));
    py::dict d;
    d["transfers"] = transfers;
    d["reduced"] = reduced;
    steps.append(d);
  }
  py::dict out;
  out["name"] = sched.name;
  out["result"] = py::make_tuple(sched.result.begin, sched.result.end);
  out["scratch"] = sched.scratch;
  out["scratch_copy"] = sched.scratchCopy;
  out["steps"] = steps;
  return out;
}

py::dict scheduleDict(const std::string& algoName, const std::string& collective, int p,
                      int rank, size_t n, int root, const std::vector<int>& order,
                      const std::vector<size_t>& sendCounts,
                      const std::vector<size_t>& recvCounts, const std::vector<int>& hosts) {
  return toDict(buildSchedule(algoName, collective, p, rank, n, root, order, sendCounts,
                              recvCounts, hosts));
}

// Every rank's schedule of one collective as one table, for the cost model and the
// simulator, which need the counts and not the Python objects (scheduleDict for
// p ranks at p = 1024 costs seconds): (rows, steps, scratch) with rows an int64
// tensor of shape (transfers, 6), one row per transfer of any rank in rank, step
// and schedule order: (rank, step, kind, peer, begin, end), kind 0 send, 1
// recv_copy, 2 recv_reduce (the order of Kind); steps and scratch per rank.
// `ranks`: only these ranks' schedules, in that order (the simulator reads a few
// ranks of a large world); empty: every rank.
static_assert(static_cast<int>(ringcoll::algo::Kind::kSend) == 0 &&
                  static_cast<int>(ringcoll::algo::Kind::kRecvCopy) == 1 &&
                  static_cast<int>(ringcoll::algo::Kind::kRecvReduce) == 2 &&
                  static_cast<int>(ringcoll::algo::Kind::kRecvReduceFirst) == 3,
              "schedule_table's kind column (ringcoll.model.KINDS) is Kind's value");
py::tuple scheduleTable(const std::string& algoName, const std::string& collective, int p,
                        size_t n, int root, const std::vector<int>& hosts,
                        std::vector<int> ranks) {
  TORCH_CHECK(p >= 1, "schedule_table: p = ", p, " (need p >= 1)");
  if (ranks.empty()) {
    for (int r = 0; r < p; ++r) ranks.push_back(r);
  }
  for (int r : ranks) {
    TORCH_CHECK(r >= 0 && r < p, "schedule_table: rank ", r, " of p = ", p);
  }
  std::vector<ringcoll::algo::Schedule> scheds;
  scheds.reserve(ranks.size());
  size_t rows = 0;
  for (int r : ranks) {
    scheds.push_back(buildSchedule(algoName, collective, p, r, n, root, {}, {}, {}, hosts));
    for (const auto& st : scheds.back().steps) rows += st.transfers.size();
  }
  at::Tensor table = at::empty({static_cast<int64_t>(rows), 6}, at::kLong);
  int64_t* out = table.data_ptr<int64_t>();
  std::vector<int64_t> steps, scratch;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const int r = ranks[i];
    const auto& sched = scheds[i];
    for (size_t s = 0; s < sched.steps.size(); ++s) {
      for (const auto& t : sched.steps[s].transfers) {
        *out++ = r;
        *out++ = static_cast<int64_t>(s);
        *out++ = static_cast<int64_t>(t.kind);
        *out++ = t.peer;
        *out++ = static_cast<int64_t>(t.range.begin);
        *out++ = static_cast<int64_t>(t.range.end);
      }
    }
    steps.push_back(static_cast<int64_t>(sched.steps.size()));
    scratch.push_back(static_cast<int64_t>(sched.scratch));
  }
  return py::make_tuple(table, steps, scratch);
}

// The schedules of gather, scatter (prm.n = p * m) and all-to-all (this rank's
// send_counts and recv_counts; n is their total), as scheduleDict gives them, by
// `algo` (direct by default).
py::dict exchangeSchedule(const std::string& collective, int p, int rank, size_t n, int root,
                          const std::vector<size_t>& sendCounts,
                          const std::vector<size_t>& recvCounts, const std::string& algo) {
  TORCH_CHECK(collective == "gather" || collective == "scatter" || collective == "alltoall",
              "unknown collective ", collective, " (gather, scatter, alltoall)");
  if (collective == "alltoall") {
    n = 0;
    for (size_t c : sendCounts) n += c;
    for (size_t c : recvCounts) n += c;
  }
  return scheduleDict(algo, collective, p, rank, n, root, {}, sendCounts, recvCounts, {});
}

// The executor's plan of one rank's schedule, for the plan tests: a list of
// (kind, peer, step, begin, count, deps, forward, local_live, wave, seg), wave being
// the index of the op's wave (-1 for finishing passes and local operations, which
// belong to none) and seg the op's segment index within its transfer.
py::list planOps(const std::string& algoName, const std::string& collective, int p, int rank,
                 size_t n, size_t segElems, bool finish, int root) {
  using ringcoll::algo::OpKind;
  const auto sched = buildSchedule(algoName, collective, p, rank, n, root, {});
  const auto plan = ringcoll::algo::compilePlan(sched, segElems, finish, rank);
  std::vector<int> waveOf(plan.ops.size(), -1);
  for (size_t w = 0; w < plan.waves.size(); ++w) {
    for (uint32_t i : plan.waves[w]) waveOf[i] = static_cast<int>(w);
  }
  py::list out;
  for (size_t k = 0; k < plan.ops.size(); ++k) {
    const auto& op = plan.ops[k];
    const char* kind = op.kind == OpKind::kSend ? "send"
        : op.kind == OpKind::kRecvCopy          ? "recv_copy"
        : op.kind == OpKind::kRecvReduce        ? "recv_reduce"
        : op.kind == OpKind::kLocalCopy         ? "local_copy"
        : op.kind == OpKind::kLocalReduce       ? "local_reduce"
                                                : "finish";
    py::list deps;
    for (uint32_t d = op.depBegin; d < op.depEnd; ++d) deps.append(plan.deps[d]);
    out.append(py::make_tuple(kind, op.peer, op.step, op.begin, op.count, deps, op.forward,
                              op.localLive, waveOf[k], op.seg));
  }
  return out;
}

// The batch (layer) each step of a collective falls in on a stream-ordered
// transport with segments of seg_elems elements, for every rank at once: step s
// starts a new layer where any rank's plan starts one (engine/plan.h's
// stepLayers), so a layer is a run of steps every rank batches together. For the
// cost model's GPU transport (ringcoll/model), which pays per batch, not per step.
std::vector<int> scheduleLayers(const std::string& algoName, const std::string& collective,
                                int p, size_t n, size_t segElems, int root) {
  TORCH_CHECK(p >= 1 && segElems >= 1, "schedule_layers: p = ", p, ", seg_elems = ", segElems);
  std::vector<uint8_t> starts;
  for (int r = 0; r < p; ++r) {
    const auto sched = buildSchedule(algoName, collective, p, r, n, root, {});
    const auto plan = ringcoll::algo::compilePlan(sched, segElems, /*finish=*/false, r);
    const auto layers = ringcoll::algo::stepLayers(plan, sched.steps.size());
    if (starts.size() < layers.size()) starts.resize(layers.size(), 0);
    for (size_t s = 1; s < layers.size(); ++s) starts[s] |= layers[s] != layers[s - 1];
  }
  std::vector<int> out(starts.size(), 0);
  for (size_t s = 1; s < starts.size(); ++s) out[s] = out[s - 1] + (starts[s] ? 1 : 0);
  return out;
}

// dst = op(a, b) elementwise with the CPU reducer (the shared functors), for
// functor tests against torch's own arithmetic.
const std::map<std::string, ringcoll::RedOp>& opNames() {
  using ringcoll::RedOp;
  static const std::map<std::string, RedOp> ops = {
      {"sum", RedOp::kSum}, {"product", RedOp::kProduct}, {"min", RedOp::kMin},
      {"max", RedOp::kMax}, {"band", RedOp::kBand}, {"bor", RedOp::kBor},
      {"bxor", RedOp::kBxor}};
  return ops;
}

// A contiguous tensor like `a` to reduce into: `given` itself (checked), or a new one.
at::Tensor outputLike(const at::Tensor& a, const c10::optional<at::Tensor>& given,
                      const char* what) {
  if (!given.has_value()) return at::empty_like(a);
  const at::Tensor& t = *given;
  TORCH_CHECK(t.device().is_cpu() && t.is_contiguous() && t.scalar_type() == a.scalar_type() &&
                  t.numel() == a.numel(),
              "cpu_reduce: ", what, " must be a contiguous CPU tensor like a, got ",
              t.scalar_type(), " numel ", t.numel(), " (a: ", a.scalar_type(), " numel ",
              a.numel(), ")");
  return t;
}

// The names of the SIMD levels this CPU and build run, narrowest first ("scalar"
// is the functor loops; the last is what the backend uses).
std::vector<std::string> cpuSimdLevels() {
  std::vector<std::string> names;
  for (ringcoll::SimdLevel l : ringcoll::kSimdLevels) {
    if (ringcoll::simdLevelAvailable(l)) names.emplace_back(ringcoll::simdLevelName(l));
  }
  return names;
}

// A CPU reducer at the named level ("auto": the backend's choice).
ringcoll::CpuReducer cpuReducerAt(const std::string& level) {
  if (level == "auto") return ringcoll::CpuReducer();
  for (ringcoll::SimdLevel l : ringcoll::kSimdLevels) {
    if (level != ringcoll::simdLevelName(l)) continue;
    TORCH_CHECK(ringcoll::simdLevelAvailable(l), "cpu_reduce: SIMD level ", level,
                " is not available here (available: ", c10::Join(", ", cpuSimdLevels()), ")");
    return ringcoll::CpuReducer(l);
  }
  TORCH_CHECK(false, "cpu_reduce: unknown SIMD level ", level);
}

// out = op(a, b) with the CPU reducer (the shared functors, or the SIMD kernels
// that match them bit for bit), for functor tests against torch's own arithmetic.
// Test-only arguments: `out` reduces into a given tensor (out=a is the in-place
// case; views at any offset reach the unaligned paths), `out2` runs reduce2 with
// a second destination, `level` picks the SIMD level ("scalar": the functors).
at::Tensor cpuReduce(const at::Tensor& a, const at::Tensor& b, const std::string& opName,
                     const c10::optional<at::Tensor>& out,
                     const c10::optional<at::Tensor>& out2, const std::string& level) {
  auto it = opNames().find(opName);
  TORCH_CHECK(it != opNames().end(), "unknown op ", opName);
  const auto dtype = ringcoll::checks::tensorDType("cpu_reduce", a, "a");
  TORCH_CHECK(a.scalar_type() == b.scalar_type() && a.numel() == b.numel(),
              "cpu_reduce: a and b differ");
  TORCH_CHECK(ringcoll::opSupported(it->second, dtype), "cpu_reduce: op ", opName,
              " not supported for ", ringcoll::dtypeName(dtype));
  // contiguous() returns the tensor itself when it already is, so out=a stays in place.
  at::Tensor ac = a.contiguous(), bc = b.contiguous();
  at::Tensor dst = outputLike(ac, out, "out");
  void* dst2 = nullptr;
  if (out2.has_value()) dst2 = outputLike(ac, out2, "out2").data_ptr();
  ringcoll::CpuReducer r = cpuReducerAt(level);
  r.reduce2(dst.data_ptr(), dst2, ac.data_ptr(), bc.data_ptr(), ac.numel(), dtype, it->second);
  return dst;
}

// out = src through the CPU reducer's copy (streaming: the non-temporal kernel of
// `level`), for tests; uint8 tensors, out a view at any offset.
at::Tensor cpuCopy(const at::Tensor& src, at::Tensor out, bool streaming,
                   const std::string& level) {
  TORCH_CHECK(src.scalar_type() == at::kByte && out.scalar_type() == at::kByte &&
                  src.is_contiguous() && out.is_contiguous() && src.numel() == out.numel(),
              "cpu_copy: contiguous uint8 tensors of equal size");
  cpuReducerAt(level).copy(out.data_ptr(), src.data_ptr(), src.numel(), streaming);
  return out;
}

#ifdef RINGCOLL_WITH_CUDA
// dst = op(a, b) with the CUDA kernels on the current stream, for kernel tests.
// a, b and the result may be views at any offset (to reach the unaligned paths).
// stopWord: "" none; "host": every block reads a stop word in host-mapped memory,
// as a collective's small kernels do (CudaReducer's DeviceControl; never set here);
// "device": one in device memory, as its large kernels read the latched copy; so
// benchmarks/kernel_bw.py can show what each read costs.
at::Tensor cudaReduce(const at::Tensor& a, const at::Tensor& b, const std::string& opName,
                      at::Tensor out, const std::string& stopWord) {
  auto it = opNames().find(opName);
  TORCH_CHECK(it != opNames().end(), "unknown op ", opName);
  const auto dtype = ringcoll::checks::tensorDType("cuda_reduce", a, "a");
  TORCH_CHECK(a.is_cuda() && b.is_cuda() && out.is_cuda(), "cuda_reduce: cuda tensors only");
  TORCH_CHECK(a.is_contiguous() && b.is_contiguous() && out.is_contiguous() &&
                  a.numel() == b.numel() && a.numel() == out.numel(),
              "cuda_reduce: contiguous tensors of equal numel");
  c10::cuda::CUDAGuard guard(a.device());
  TORCH_CHECK(stopWord.empty() || stopWord == "host" || stopWord == "device",
              "cuda_reduce: stop_word='", stopWord, "' (expected '', 'host' or 'device')");
  const volatile int* stop = nullptr;
  if (stopWord == "device") {
    // One zeroed device word for the process (kept to the end).
    static const volatile int* word = [] {
      void* dev = nullptr;
      RC_CUDA_CHECK(cudaMalloc(&dev, sizeof(int)));
      const cudaError_t err = cudaMemset(dev, 0, sizeof(int));
      if (err != cudaSuccess) cudaFree(dev);  // the next call tries again
      RC_CUDA_CHECK(err);
      return static_cast<const volatile int*>(dev);
    }();
    stop = word;
  } else if (stopWord == "host") {
    // One zeroed word for the process, mapped like CudaReducer's (kept to the end).
    static const volatile int* word = [] {
      void* host = nullptr;
      void* dev = nullptr;
      RC_CUDA_CHECK(cudaHostAlloc(&host, sizeof(int), cudaHostAllocMapped));
      *static_cast<int*>(host) = 0;
      const cudaError_t err = cudaHostGetDevicePointer(&dev, host, 0);
      if (err != cudaSuccess) cudaFreeHost(host);  // the next call tries again
      RC_CUDA_CHECK(err);
      return static_cast<const volatile int*>(dev);
    }();
    stop = word;
  }
  const cudaError_t err = ringcoll::launchReduce(
      out.data_ptr(), a.data_ptr(), b.data_ptr(), a.numel(), dtype, it->second,
      c10::cuda::getCurrentCUDAStream(a.device().index()).stream(), stop);
  TORCH_CHECK(err == cudaSuccess, "cuda_reduce: ", cudaGetErrorString(err));
  return out;
}

// dst = op(...op(dst, srcs[0])..., srcs[k-1]) with the fused kernel (launchReduceMany,
// the executor's fused consume), on the current stream, for kernel tests: the same
// bits as k cuda_reduce calls. Every view at dst's offset from a 16-byte boundary
// (else the launcher refuses: the reducer then folds one source at a time).
at::Tensor cudaReduceMany(at::Tensor dst, const std::vector<at::Tensor>& srcs,
                          const std::string& opName) {
  auto it = opNames().find(opName);
  TORCH_CHECK(it != opNames().end(), "unknown op ", opName);
  const auto dtype = ringcoll::checks::tensorDType("cuda_reduce_many", dst, "dst");
  TORCH_CHECK(dst.is_cuda() && dst.is_contiguous(), "cuda_reduce_many: a contiguous cuda dst");
  std::vector<const void*> ptrs;
  for (const auto& s : srcs) {
    TORCH_CHECK(s.is_cuda() && s.is_contiguous() && s.numel() == dst.numel() &&
                    s.scalar_type() == dst.scalar_type(),
                "cuda_reduce_many: contiguous cuda sources like dst");
    ptrs.push_back(s.data_ptr());
  }
  c10::cuda::CUDAGuard guard(dst.device());
  const cudaError_t err = ringcoll::launchReduceMany(
      dst.data_ptr(), ptrs.data(), ptrs.size(), dst.numel(), dtype, it->second,
      c10::cuda::getCurrentCUDAStream(dst.device().index()).stream());
  TORCH_CHECK(err == cudaSuccess, "cuda_reduce_many: ", cudaGetErrorString(err));
  return dst;
}

at::Tensor cudaScale(const at::Tensor& a, const std::string& how, double value) {
  const auto dtype = ringcoll::checks::tensorDType("cuda_scale", a, "a");
  at::Tensor out = a.contiguous().clone();
  c10::cuda::CUDAGuard guard(a.device());
  auto stream = c10::cuda::getCurrentCUDAStream(a.device().index()).stream();
  cudaError_t err;
  if (how == "divide") err = ringcoll::launchDivide(out.data_ptr(), out.numel(), dtype, static_cast<int>(value), stream);
  else if (how == "multiply") err = ringcoll::launchMultiply(out.data_ptr(), out.numel(), dtype, value, stream);
  else TORCH_CHECK(false, "unknown scale ", how);
  TORCH_CHECK(err == cudaSuccess, "cuda_scale: ", cudaGetErrorString(err));
  return out;
}
#endif

at::Tensor cpuScale(const at::Tensor& a, const std::string& how, double value) {
  const auto dtype = ringcoll::checks::tensorDType("cpu_scale", a, "a");
  at::Tensor out = a.contiguous().clone();
  ringcoll::CpuReducer r;
  if (how == "divide") r.divide(out.data_ptr(), out.numel(), dtype, static_cast<int>(value));
  else if (how == "multiply") r.multiply(out.data_ptr(), out.numel(), dtype, value);
  else TORCH_CHECK(false, "unknown scale ", how);
  return out;
}

// ringcoll.ops.all_reduce_ in eager code (ringcoll/ops.py): the op's body run straight
// from Python, without torch.ops' argument parsing and the dispatcher's boxed call,
// which cost more than a small all-reduce itself. Returns False, having done
// nothing, wherever the dispatcher would do more than run the kernel (a tensor
// subclass, a mode, autograd, the profiler: ops.h); the caller then calls the op.
// `group` is a ProcessGroup. The group last used is remembered (one slot, under the
// GIL) by a weak reference whose callback empties the slot, with its ringcoll
// backend for that device held strongly: the group holds it anyway while it lives,
// and a c10 weak pointer would put off the backend's destructor.
struct EagerSlot {
  PyObject* group = nullptr;  // a weakref to the ProcessGroup (owned; never freed at exit)
  c10::DeviceType device = c10::DeviceType::CPU;
  c10::intrusive_ptr<RingcollBackend> backend;
};
EagerSlot* eagerSlot() {
  static auto* slot = new EagerSlot();  // never destroyed: no teardown after Python's
  return slot;
}

// The weakref's callback: the group died, so the slot forgets it and its backend.
PyObject* forgetEagerGroup(PyObject*, PyObject* ref) {
  EagerSlot& slot = *eagerSlot();
  if (slot.group == ref) {
    slot.backend.reset();
    slot.group = nullptr;
    Py_DECREF(ref);
  }
  Py_RETURN_NONE;
}
PyMethodDef forgetEagerGroupDef{"_forget_eager_group", forgetEagerGroup, METH_O, nullptr};

// The default process group (torch.distributed's _world.default_pg), a new
// reference, or None when there is none.
PyObject* defaultGroup() {
  static PyObject* world = [] {
    PyObject* c10d = PyImport_ImportModule("torch.distributed.distributed_c10d");
    PyObject* w = c10d ? PyObject_GetAttrString(c10d, "_world") : nullptr;
    Py_XDECREF(c10d);
    return w;  // kept for the process: the module's one _World
  }();
  // The instance's own attribute: the public default_pg is a Python property whose
  // call cost a sixth of the op's entry. Torches without it keep the property.
  static PyObject* name = [] {
    const bool own = world != nullptr && PyObject_HasAttrString(world, "_default_pg");
    return PyUnicode_InternFromString(own ? "_default_pg" : "default_pg");
  }();
  if (world == nullptr || name == nullptr) return nullptr;
  return PyObject_GetAttr(world, name);
}

// _C.all_reduce_eager(tensor, group) -> bool, a plain C function (METH_FASTCALL: no
// argument parsing beyond two positional objects). `group`: a ProcessGroup, or None
// for the default one. The GIL is held for the first pass of the collective and let
// go only if it has to wait for a peer (RingcollBackend::runSmallNow).
PyObject* allReduceEager(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "all_reduce_eager(tensor, group) takes 2 arguments");
    return nullptr;
  }
  PyObject* tensorObj = args[0];
  PyObject* group = args[1];
  if (!THPVariable_CheckExact(tensorObj)) Py_RETURN_FALSE;
  const at::Tensor& tensor = THPVariable_Unpack(tensorObj);
  if (!ringcoll::ops::dispatcherRunsKernelOnly(tensor)) Py_RETURN_FALSE;
  PyObject* owned = nullptr;  // the default group, while it is used here
  if (group == Py_None) {
    owned = defaultGroup();
    if (owned == nullptr) return nullptr;
    if (owned == Py_None) {  // not initialized: the op's route raises torch's error
      Py_DECREF(owned);
      Py_RETURN_FALSE;
    }
    group = owned;
  }
  EagerSlot& slot = *eagerSlot();
  const c10::DeviceType device = tensor.device().type();
  // Held for the call: another thread may drop the group (or destroy the default
  // one) while this one waits with the GIL let go.
  c10::intrusive_ptr<RingcollBackend> backend;
  if (slot.group != nullptr && PyWeakref_GetObject(slot.group) == group &&
      slot.device == device) {
    backend = slot.backend;
  }
  if (!backend) {
    try {
      const std::string name = py::cast<std::string>(py::handle(group).attr("group_name"));
      auto found = ringcoll::ops::backendOf("ringcoll.ops.all_reduce_", name, device);
      static PyObject* forget = PyCFunction_New(&forgetEagerGroupDef, nullptr);
      if (forget == nullptr) throw py::error_already_set();
      PyObject* ref = PyWeakref_NewRef(group, forget);
      if (ref == nullptr) throw py::error_already_set();
      PyObject* old = slot.group;
      slot.group = ref;
      slot.device = device;
      slot.backend = found;
      Py_XDECREF(old);
      backend = std::move(found);
    } catch (...) {
      Py_XDECREF(owned);
      throw;
    }
  }
  Py_XDECREF(owned);  // the backend is held above
  backend->allreduceNow(const_cast<at::Tensor&>(tensor), /*gilHeld=*/true);
  torch::autograd::impl::bump_version(tensor);  // as the op's ADInplaceOrView kernel does (ops.cc)
  Py_RETURN_TRUE;
  END_HANDLE_TH_ERRORS
}
PyMethodDef allReduceEagerDef{"all_reduce_eager", reinterpret_cast<PyCFunction>(
                                  reinterpret_cast<void (*)()>(allReduceEager)),
                              METH_FASTCALL,
                              "ringcoll.ops.all_reduce_'s eager body (ringcoll/ops.py)"};

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  ringcoll::bindPythonAlgorithms(m);
  // c10d's Backend and Store bindings live in torch; load them first so pybind11
  // knows the base class.
  py::module_::import("torch.distributed");

  py::class_<RingcollBackend, c10d::Backend, c10::intrusive_ptr<RingcollBackend>>(
      m, "RingcollBackend")
      .def_property_readonly("knobs",
                             [](const RingcollBackend& b) { return b.knobs().describe(); })
      // Without the GIL: it takes the backend's CPU lock, which stop() holds while
      // it waits for threads that may need the GIL (common/locks.h).
      .def_property_readonly("links",
                             py::cpp_function(&RingcollBackend::links,
                                              py::call_guard<py::gil_scoped_release>()),
                             "The CPU transport of each peer's link (\"shm\", \"gloo\"; "
                             "\"\" for this rank).")
      .def("stream_stats", &RingcollBackend::streamStats, py::arg("cuda"),
           py::arg("reset") = false, py::arg("timing") = -1,
           "What the stream path of CUDA tensors (cuda=True) or of the CPU emulation "
           "(RINGCOLL_TRANSPORT=stream) enqueued so far: counts (collectives, batches, "
           "batches_on_compute, posts, kernels, markers, stream_waits, host_waits) and host "
           "nanoseconds by part (launch_ns, ready_ns, batch_ns, marker_ns, kernel_ns, "
           "end_ns; kept only while timing is on: timing=1). Empty before the path's "
           "first collective. reset=True zeroes them after reading.",
           py::call_guard<py::gil_scoped_release>())
      // The stream emulation's capture (ringcoll/graphs.py wraps these).
      .def("_capture_begin", &RingcollBackend::captureBegin,
           py::call_guard<py::gil_scoped_release>())
      .def("_capture_end", &RingcollBackend::captureEnd)
      .def("_replay", &RingcollBackend::replay, py::arg("graph"),
           py::call_guard<py::gil_scoped_release>());

  py::class_<ringcoll::CapturedGraph, std::shared_ptr<ringcoll::CapturedGraph>>(
      m, "CapturedGraph", "Launches recorded by the stream emulation's capture.")
      .def("__len__", [](const ringcoll::CapturedGraph& g) { return g.launches.size(); })
      .def_property_readonly("ops", [](const ringcoll::CapturedGraph& g) {
        std::vector<std::string> ops;
        for (const auto& l : g.launches) ops.push_back(l.label.str());
        return ops;
      });

  // Registered so that pybind11 finds a returned Work's own type at its first look:
  // an unregistered subclass costs a failed search of every type table (about a
  // tenth of a small dist.all_reduce) before it falls back to c10d's Work.
  // Freed without the GIL, as torch frees its Work.
  py::class_<ringcoll::RingcollWork, c10d::Work, c10::intrusive_ptr<ringcoll::RingcollWork>>(
      m, "RingcollWork", py::release_gil_before_calling_cpp_dtor());

  m.def("create_backend", &createBackend, py::arg("store"), py::arg("rank"),
        py::arg("size"), py::arg("timeout_seconds"), py::arg("p2p"),
        py::arg("overrides") = std::map<std::string, std::string>{}, py::arg("group") = "",
        py::arg("global_ranks") = std::vector<int64_t>{},
        py::call_guard<py::gil_scoped_release>());
  m.add_object("all_reduce_eager",
               py::reinterpret_steal<py::object>(PyCFunction_New(&allReduceEagerDef, nullptr)));
  // The flight recorder (backend/flight_recorder.h): its dump as bytes, or written
  // to torch's dump file of `global_rank`.
  m.def("flight_recorder_enabled", [] { return ringcoll::FlightRecorder::get().enabled(); });
  m.def("flight_recorder_dump", [](bool onlyActive) {
    return py::bytes(ringcoll::FlightRecorder::get().dump(onlyActive));
  }, py::arg("only_active") = false);
  m.def("flight_recorder_write", [](int globalRank) {
    return ringcoll::FlightRecorder::get().write(globalRank, /*once=*/false);
  }, py::arg("global_rank"), py::call_guard<py::gil_scoped_release>());
  m.def("wait_stats", [](bool reset) {
    auto& s = ringcoll::WaitStats::get();
    std::map<std::string, uint64_t> out{
        {"waits", s.waits.load()}, {"spun", s.spun.load()}, {"yields", s.yields.load()},
        {"parks", s.parks.load()}, {"spin_ns", s.spinNs.load()}, {"park_ns", s.parkNs.load()},
        {"moves", s.moves.load()}};
    if (reset) s.reset();
    return out;
  }, py::arg("reset") = false,
  "This process's waits on its CPU transports' doorbells (transport/doorbell.h): waits "
  "(calls that had to wait), spun (ended while spinning), yields (to a peer on this "
  "CPU), parks (futex sleeps), spin_ns, park_ns. reset=True zeroes them after reading.");
  m.def("_set_shm_token_for_tests", &ringcoll::setShmTokenForTests, py::arg("token"));
  m.def("knobs", [](const std::map<std::string, std::string>& overrides) {
    return loadKnobs(overrides).describe();
  }, py::arg("overrides") = std::map<std::string, std::string>{});
  m.def("algorithms", &ringcoll::algo::algorithmNames);
  m.def("this_host", &ringcoll::thisHost,
        "This process's host identity as the backend derives it without RINGCOLL_HOST "
        "(hostname and boot id): ranks with the same one share memory.");
  m.def("block_range", [](size_t n, int k, int i) {
    const auto r = ringcoll::algo::blockRange(n, k, i);
    return std::make_pair(r.begin, r.end);
  });
  m.def("split", [](size_t begin, size_t end, int k, int i) {
    const auto r = ringcoll::algo::split({begin, end}, k, i);
    return std::make_pair(r.begin, r.end);
  });
  m.def("schedule", &scheduleDict, py::arg("algo"), py::arg("collective"), py::arg("p"),
        py::arg("rank"), py::arg("n"), py::arg("root") = 0,
        py::arg("order") = std::vector<int>{}, py::arg("send_counts") = std::vector<size_t>{},
        py::arg("recv_counts") = std::vector<size_t>{}, py::arg("hosts") = std::vector<int>{});
  m.def("schedule_table", &scheduleTable, py::arg("algo"), py::arg("collective"), py::arg("p"),
        py::arg("n"), py::arg("root") = 0, py::arg("hosts") = std::vector<int>{},
        py::arg("ranks") = std::vector<int>{});
  m.def("exchange_schedule", &exchangeSchedule, py::arg("collective"), py::arg("p"),
        py::arg("rank"), py::arg("n") = 0, py::arg("root") = 0,
        py::arg("send_counts") = std::vector<size_t>{},
        py::arg("recv_counts") = std::vector<size_t>{}, py::arg("algo") = "direct");
  m.def("schedule_layers", &scheduleLayers, py::arg("algo"), py::arg("collective"),
        py::arg("p"), py::arg("n"), py::arg("seg_elems"), py::arg("root") = 0);
  m.def("plan_ops", &planOps, py::arg("algo"), py::arg("collective"), py::arg("p"),
        py::arg("rank"), py::arg("n"), py::arg("seg_elems"), py::arg("finish") = false,
        py::arg("root") = 0);
  m.def("provides", [](const std::string& algoName) {
    std::vector<std::string> out;
    const auto& a = ringcoll::algo::findAlgorithm(algoName);
    for (auto c : ringcoll::algo::kCollectives) {
      if (a.provides(c)) out.emplace_back(ringcoll::algo::collectiveName(c));
    }
    return out;
  }, "The collectives an algorithm provides, by RINGCOLL_ALGO's names.");
  m.def("gpu_default", &ringcoll::algo::gpuDefault, py::arg("p"),
        "RINGCOLL_GPU_ALGO's value when neither it nor RINGCOLL_ALGO is set, for p ranks "
        "(schedules/select.h): what CUDA tensors and the stream emulation run.");
  m.def("select", [](const std::string& value, const std::string& collective, size_t bytes) {
    const auto choice =
        ringcoll::algo::Selector(value).pick(collectiveNamed(collective, true), bytes,
                                             /*explain=*/true);
    return std::make_pair(choice.algorithm->name, choice.why);
  }, py::arg("value"), py::arg("collective"), py::arg("bytes"),
  "(algorithm, reason) RINGCOLL_ALGO=value picks for a collective of `bytes` bytes; "
  "ValueError for a bad value.");
  m.def("cpu_reduce", &cpuReduce, py::arg("a"), py::arg("b"), py::arg("op"),
        py::arg("out") = py::none(), py::arg("out2") = py::none(),
        py::arg("level") = "auto");
  m.def("cpu_simd_levels", &cpuSimdLevels);
  m.def("cpu_copy", &cpuCopy, py::arg("src"), py::arg("out"), py::arg("streaming"),
        py::arg("level") = "auto");
#ifdef RINGCOLL_WITH_CUDA
  m.def("cuda_reduce", &cudaReduce, py::arg("a"), py::arg("b"), py::arg("op"), py::arg("out"),
        py::arg("stop_word") = "");
  m.def("cuda_reduce_many", &cudaReduceMany, py::arg("dst"), py::arg("srcs"), py::arg("op"));
  m.def("cuda_scale", &cudaScale);
#endif
  m.def("cpu_scale", &cpuScale);
  m.attr("internal_tag") = RingcollBackend::kInternalTag;
  m.def("build_info", []() {
    py::dict d;
#ifdef RINGCOLL_WITH_CUDA
    d["cuda"] = true;
    auto version = [](int major, int minor, int patch) {
      return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
    };
    d["nccl_version_built"] = version(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
    int v = 0;
    if (ncclGetVersion(&v) == ncclSuccess) {
      // NCCL >= 2.9 encodes X.Y.Z as X*10000 + Y*100 + Z.
      d["nccl_version"] = version(v / 10000, (v / 100) % 100, v % 100);
    } else {
      d["nccl_version"] = py::none();
    }
#else
    d["cuda"] = false;
    d["nccl_version"] = py::none();
#endif
    return d;
  });
  m.def("vector_split", [](uintptr_t dst, uintptr_t a, uintptr_t b, size_t count,
                           size_t elemSize) {
    const auto s = ringcoll::vectorSplit(dst, a, b, count, elemSize);
    return std::make_tuple(s.head, s.packs, s.tail);
  });
}
