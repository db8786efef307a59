// torch's flight recorder for ringcoll's collectives: the last N calls of every
// ringcoll group in this process, in the format of torch's own recorder (the pickle
// that `torchfrtrace` reads), so that a hung job is read with torch's tools.
//
// Before torch 2.15 an out-of-tree backend cannot record into torch's recorder
// (it is a static inside libtorch, not exported), so ringcoll keeps this one and
// writes its dumps where torch writes its own: through c10d::DebugInfoWriter, to
// <TORCH_FR_DUMP_TEMP_FILE><global rank>. From 2.15 torch records every backend
// itself (a hook attached to each group), and this recorder stays off.
//
// On when TORCH_FR_BUFFER_SIZE (or TORCH_NCCL_TRACE_BUFFER_SIZE) is a positive
// number of entries. An entry is a collective: its group, sequence number (the
// "#N" of ringcoll's errors), op, input and output sizes and dtypes, when it was
// issued, started and completed, and the peer it was waiting for when it failed
// (an extra key, "ringcoll_waiting_for", which torch's tools ignore). The recorder
// dumps once per process when a collective times out, unless
// TORCH_FR_DUMP_ON_TIMEOUT=0;
// `ringcoll.flight_recorder.dump()` dumps on demand.
//
// The library prefix of the names is "gloo": torchfrtrace before 2.15 refuses any
// library it does not know, and ringcoll's CPU groups are gloo's peers.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace ringcoll {

class FlightRecorder {
 public:
  static FlightRecorder& get();  // one per process

  bool enabled() const { return capacity_ > 0; }

  // A group: its id (process_group[0] in the entries), global ranks; returns the
  // pg_id its entries carry.
  int64_t addGroup(const std::string& name, std::vector<uint64_t> globalRanks);
  void setGroupDesc(int64_t pgId, const std::string& desc);

  // One collective issued; its id (-1 when off). Tensors are read for their sizes.
  int64_t record(int64_t pgId, uint64_t seq, const char* op, const std::vector<at::Tensor>& inputs,
                 const std::vector<at::Tensor>& outputs, std::chrono::milliseconds timeout);
  void started(int64_t id);
  void completed(int64_t id);
  // It failed while waiting for `peer` (-1: unknown).
  void failed(int64_t id, int peer);

  // torch's dump format: a pickled dict {version, pg_config, pg_status,
  // comm_lib_version, entries}. `onlyActive`: the entries not completed.
  std::string dump(bool onlyActive) const;
  // Writes dump(false) through torch's DebugInfoWriter for `globalRank` (the file
  // <TORCH_FR_DUMP_TEMP_FILE><globalRank>); `once`: only the first time per process
  // (the dump on failure). False when off or already dumped.
  bool write(int globalRank, bool once);

  // torch's name of a ringcoll op ("allreduce" -> "all_reduce", ...).
  static std::string profilingName(const char* op);

 private:
  FlightRecorder();

  struct Entry {
    int64_t id = -1;
    int64_t pgId = 0;
    uint64_t seq = 0;
    std::string name;
    int64_t created = 0;
    std::optional<int64_t> startedNs, completedNs;
    std::vector<std::vector<int64_t>> inSizes, outSizes;
    std::vector<std::string> inTypes, outTypes;
    int64_t timeoutMs = 0;
    bool retired = false;
    int waitingFor = -1;
  };
  struct Group {
    std::string name;
    std::string desc;
    std::vector<uint64_t> ranks;
  };
  Entry* find(int64_t id);  // null if overwritten since

  const size_t capacity_;
  mutable std::mutex mutex_;
  std::vector<Entry> entries_;  // a ring: id % capacity_
  int64_t nextId_ = 0;
  std::map<int64_t, Group> groups_;
  bool dumped_ = false;
};

}  // namespace ringcoll
