#include "backend/flight_recorder.h"

#include <torch/csrc/distributed/c10d/FlightRecorder.hpp>
#include <torch/csrc/distributed/c10d/TraceUtils.h>
#include <torch/headeronly/version.h>

#include <cstdlib>
#include <cstring>

#include "backend/op_names.h"

namespace ringcoll {

namespace {

// torch's recorder records every backend from 2.15 on (flight_recorder.h).
constexpr bool kTorchRecords =
    TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 15);

// torch's dump format version (FlightRecorder.hpp's version_val, the same in
// 2.13-2.15); torchfrtrace requires one version across ranks.
constexpr const char* kVersion = "2.10";

const char* env(const char* a, const char* b) {
  const char* v = std::getenv(a);
  return v != nullptr ? v : std::getenv(b);
}

size_t capacityFromEnv() {
  if (kTorchRecords) return 0;
  const char* v = env("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE");
  if (v == nullptr) return 0;
  const long n = std::strtol(v, nullptr, 10);
  return n > 0 ? static_cast<size_t>(n) : 0;
}

bool dumpOnFailure() {
  const char* v = env("TORCH_FR_DUMP_ON_TIMEOUT", "TORCH_NCCL_DUMP_ON_TIMEOUT");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

c10::IValue sizesOf(const std::vector<std::vector<int64_t>>& sizes) {
  auto out = c10d::new_list();
  for (const auto& s : sizes) out.push_back(c10::IValue(s));
  return out;
}

// "[0, 1, 2]", as torch's ranks_str writes it (which needs fmt, not exported).
std::string ranksText(const std::vector<uint64_t>& ranks) {
  std::string out = "[";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out + "]";
}

c10::IValue orNone(const std::optional<int64_t>& v) {
  return v ? c10::IValue(*v) : c10::IValue();
}

}  // namespace

FlightRecorder& FlightRecorder::get() {
  static FlightRecorder recorder;
  return recorder;
}

FlightRecorder::FlightRecorder() : capacity_(capacityFromEnv()) {}

std::string FlightRecorder::profilingName(const char* op) {
  // torch's names (backend/op_names.h), but for the calls the recorder knows by
  // their c10d method (torchfrtrace's list of collectives).
  static const std::map<std::string, std::string> names = {
      {"all_gather_into_tensor", "_all_gather_base"},
      {"all_gather_coalesced", "all_gather_into_tensor_coalesced"},
      {"reduce_scatter_tensor", "_reduce_scatter_base"},
      {"all_reduce_coalesced", "allreduce_coalesced"},
  };
  const std::string name = torchOpName(op);
  const auto it = names.find(name);
  return "gloo:" + (it != names.end() ? it->second : name);
}

int64_t FlightRecorder::addGroup(const std::string& name, std::vector<uint64_t> globalRanks) {
  std::lock_guard<std::mutex> lock(mutex_);
  const int64_t id = static_cast<int64_t>(groups_.size());
  groups_[id] = Group{name, "undefined", std::move(globalRanks)};
  return id;
}

void FlightRecorder::setGroupDesc(int64_t pgId, const std::string& desc) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = groups_.find(pgId);
  if (it != groups_.end() && !desc.empty()) it->second.desc = desc;
}

int64_t FlightRecorder::record(int64_t pgId, uint64_t seq, const char* op,
                               const std::vector<at::Tensor>& inputs,
                               const std::vector<at::Tensor>& outputs,
                               std::chrono::milliseconds timeout) {
  if (!enabled()) return -1;
  Entry e;
  e.pgId = pgId;
  e.seq = seq;
  e.name = profilingName(op);
  e.created = nowNs();
  e.timeoutMs = timeout.count();
  for (const auto& t : inputs) {
    e.inSizes.push_back(t.sizes().vec());
    e.inTypes.emplace_back(c10::toString(t.scalar_type()));
  }
  for (const auto& t : outputs) {
    e.outSizes.push_back(t.sizes().vec());
    e.outTypes.emplace_back(c10::toString(t.scalar_type()));
  }
  if (outputs.empty()) {  // in place: the inputs are the outputs (as torch records them)
    e.outSizes = e.inSizes;
    e.outTypes = e.inTypes;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  e.id = nextId_++;
  if (entries_.size() < capacity_) {
    entries_.push_back(std::move(e));
  } else {
    entries_[static_cast<size_t>(e.id) % capacity_] = std::move(e);
  }
  return nextId_ - 1;
}

FlightRecorder::Entry* FlightRecorder::find(int64_t id) {
  if (id < 0 || entries_.empty()) return nullptr;
  Entry& e = entries_[static_cast<size_t>(id) % capacity_];
  return e.id == id ? &e : nullptr;
}

void FlightRecorder::started(int64_t id) {
  if (id < 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (Entry* e = find(id); e && !e->startedNs) e->startedNs = nowNs();
}

void FlightRecorder::completed(int64_t id) {
  if (id < 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (Entry* e = find(id)) {
    const int64_t now = nowNs();
    if (!e->startedNs) e->startedNs = now;
    e->completedNs = now;
    e->retired = true;
  }
}

void FlightRecorder::failed(int64_t id, int peer) {
  if (id < 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (Entry* e = find(id)) {
    e->retired = true;
    e->waitingFor = peer;
  }
}

std::string FlightRecorder::dump(bool onlyActive) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto entries = c10d::new_list();
  std::map<int64_t, std::array<int64_t, 3>> status;  // enqueued, started, completed
  const size_t n = entries_.size();
  const size_t first = n < capacity_ ? 0 : static_cast<size_t>(nextId_) % capacity_;
  for (size_t k = 0; k < n; ++k) {
    const Entry& e = entries_[(first + k) % n];
    auto& st = status.try_emplace(e.pgId, std::array<int64_t, 3>{-1, -1, -1}).first->second;
    const auto seq = static_cast<int64_t>(e.seq);
    st[0] = std::max(st[0], seq);
    if (e.startedNs) st[1] = std::max(st[1], seq);
    if (e.completedNs) st[2] = std::max(st[2], seq);
    if (onlyActive && e.completedNs) continue;
    const auto& g = groups_.at(e.pgId);
    auto d = c10d::new_dict();
    d.insert("record_id", e.id);
    d.insert("pg_id", e.pgId);
    d.insert("process_group", c10::ivalue::Tuple::create(g.name, g.desc));
    d.insert("collective_seq_id", seq);
    d.insert("p2p_seq_id", int64_t{0});
    d.insert("op_id", seq);
    d.insert("profiling_name", e.name);
    d.insert("time_created_ns", e.created);
    d.insert("input_sizes", sizesOf(e.inSizes));
    d.insert("input_dtypes", e.inTypes);
    d.insert("output_sizes", sizesOf(e.outSizes));
    d.insert("output_dtypes", e.outTypes);
    d.insert("state", e.completedNs ? "completed" : e.startedNs ? "started" : "scheduled");
    d.insert("time_discovered_started_ns", orNone(e.startedNs));
    d.insert("time_discovered_completed_ns", orNone(e.completedNs));
    d.insert("retired", e.retired);
    d.insert("timeout_ms", e.timeoutMs);
    d.insert("is_p2p", false);
    d.insert("ringcoll_waiting_for", e.waitingFor >= 0 ? c10::IValue(int64_t{e.waitingFor})
                                                       : c10::IValue());
    entries.push_back(d);
  }
  auto pgConfig = c10d::new_dict();
  auto pgStatus = c10d::new_dict();
  for (const auto& [id, g] : groups_) {
    auto c = c10d::new_dict();
    c.insert("name", g.name);
    c.insert("desc", g.desc);
    c.insert("ranks", ranksText(g.ranks));
    pgConfig.insert(g.name, c);
    const auto it = status.find(id);
    const std::array<int64_t, 3> st = it != status.end() ? it->second : std::array<int64_t, 3>{-1, -1, -1};
    auto s = c10d::new_dict();
    s.insert("last_enqueued_collective", st[0]);
    s.insert("last_started_collective", st[1]);
    s.insert("last_completed_collective", st[2]);
    pgStatus.insert(std::to_string(id), s);
  }
  auto result = c10d::new_dict();
  result.insert("version", kVersion);
  result.insert("pg_config", pgConfig);
  result.insert("pg_status", pgStatus);
  result.insert("comm_lib_version", "ringcoll");
  result.insert("entries", entries);
  return c10d::pickle_str(result);
}

bool FlightRecorder::write(int globalRank, bool once) {
  if (!enabled() || (once && !dumpOnFailure())) return false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (once && dumped_) return false;
    if (once) dumped_ = true;
  }
  c10d::DebugInfoWriter::getWriter(globalRank).write(dump(false));
  return true;
}

}  // namespace ringcoll
