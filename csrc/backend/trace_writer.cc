#include "backend/trace_writer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <thread>

#include "common/errors.h"

namespace ringcoll {

namespace {
using algo::OpKind;
using algo::Tracer;

constexpr int kRounds = 8;
constexpr auto kPoll = std::chrono::microseconds(20);
constexpr auto kGiveUp = std::chrono::seconds(10);
constexpr int kLanes = 32;  // per peer and direction; more overlap shares the last

std::string clockKey(int rank, int round) { return RC_STR("ringcoll/clock/", rank, "/", round); }

// Polls the store for `key` until it exists (true) or kGiveUp passes (false).
bool await(c10d::Store& store, const std::string& key) {
  const auto deadline = std::chrono::steady_clock::now() + kGiveUp;
  while (!store.check({key})) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(kPoll);
  }
  return true;
}

// mkdir -p.
void makeDirs(const std::string& dir) {
  for (size_t i = 1; i <= dir.size(); ++i) {
    if (i < dir.size() && dir[i] != '/') continue;
    const std::string part = dir.substr(0, i);
    if (mkdir(part.c_str(), 0777) != 0 && errno != EEXIST) {
      throw std::runtime_error(RC_STR("cannot create directory '", part, "': ",
                                      std::strerror(errno)));
    }
  }
}

// Group ids become part of a file name: keep [A-Za-z0-9._-].
std::string fileSafe(const std::string& s) {
  std::string out;
  for (char ch : s) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                    (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-';
    out += ok ? ch : '_';
  }
  return out.empty() ? "0" : out;
}

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    if (static_cast<unsigned char>(ch) < 0x20) continue;
    out += ch;
  }
  return out + "\"";
}

// Nanoseconds as microseconds with nanosecond digits; 0 ("did not happen") as null.
std::string us(int64_t ns) {
  if (ns == 0) return "null";
  char b[32];
  std::snprintf(b, sizeof(b), "%lld.%03lld", static_cast<long long>(ns / 1000),
                static_cast<long long>(ns % 1000));
  return b;
}

// A duration: never null, never negative.
std::string dur(int64_t ns) { return ns > 0 ? us(ns) : std::string("0"); }

const char* kindName(OpKind k) {
  switch (k) {
    case OpKind::kSend: return "send";
    case OpKind::kRecvCopy: return "recv_copy";
    case OpKind::kRecvReduce: return "recv_reduce";
    case OpKind::kFinish: return "finish";
    case OpKind::kLocalCopy: return "local_copy";
    case OpKind::kLocalReduce: return "local_reduce";
  }
  return "?";
}
}  // namespace

ClockSync syncClocks(c10d::Store& store, int rank, int size) {
  ClockSync s;
  if (rank == 0) {
    for (int r = 1; r < size; ++r) {
      for (int k = 0; k < kRounds; ++k) {
        if (!await(store, clockKey(r, k))) break;  // rank r does not trace
        const int64_t t = Tracer::now();
        store.set(clockKey(r, k) + "/t", std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(&t),
                                                             reinterpret_cast<const uint8_t*>(&t) + sizeof(t)));
      }
    }
    s.known = true;
    return s;
  }
  int64_t bestRtt = std::numeric_limits<int64_t>::max();
  for (int k = 0; k < kRounds; ++k) {
    const int64_t t0 = Tracer::now();
    store.set(clockKey(rank, k), std::vector<uint8_t>{1});
    if (!await(store, clockKey(rank, k) + "/t")) return ClockSync{};
    const int64_t t1 = Tracer::now();
    const std::vector<uint8_t> v = store.get(clockKey(rank, k) + "/t");
    RC_ASSERT(v.size() == sizeof(int64_t), "clock answer of ", v.size(), " bytes");
    int64_t t;
    std::memcpy(&t, v.data(), sizeof(t));
    ++s.rounds;
    if (t1 - t0 < bestRtt) {
      bestRtt = t1 - t0;
      s.offsetUs = static_cast<double>(t - (t0 + (t1 - t0) / 2)) / 1000.0;
      s.rttUs = static_cast<double>(bestRtt) / 1000.0;
    }
  }
  s.known = true;
  return s;
}

TraceWriter::TraceWriter(algo::Tracer& tracer, const std::string& dir, const std::string& group,
                         int rank, int size, const ClockSync& clock,
                         const std::string& transport, size_t chunkBytes)
    : tracer_(tracer), rank_(rank), lastWrite_(std::chrono::steady_clock::now()) {
  makeDirs(dir);
  path_ = RC_STR(dir, "/ringcoll-g", fileSafe(group), "-rank", rank, ".json");
  file_ = std::fopen(path_.c_str(), "w");
  if (!file_) {
    throw std::runtime_error(RC_STR("cannot write '", path_, "': ", std::strerror(errno)));
  }
  std::fputs("[\n", file_);
  const std::string pid = RC_STR("\"pid\":", rank);
  event(RC_STR("{\"ph\":\"M\",", pid, ",\"name\":\"process_name\",\"args\":{\"name\":\"rank ",
               rank, "\"}}"));
  event(RC_STR("{\"ph\":\"M\",", pid,
               ",\"name\":\"process_sort_index\",\"args\":{\"sort_index\":", rank, "}}"));
  event(RC_STR("{\"ph\":\"M\",", pid, ",\"tid\":0,\"name\":\"ringcoll_trace\",\"args\":{",
               "\"format\":1,\"rank\":", rank, ",\"size\":", size, ",\"group\":", quoted(group),
               ",\"os_pid\":", getpid(), ",\"transport\":", quoted(transport),
               ",\"chunk_bytes\":", chunkBytes,
               ",\"clock\":\"steady_clock, microseconds\",\"clock_offset_us\":", clock.offsetUs,
               ",\"clock_rtt_us\":", clock.rttUs, ",\"clock_rounds\":", clock.rounds,
               ",\"clock_known\":", clock.known ? "true" : "false",
               ",\"max_ops_per_collective\":", Tracer::kMaxOps, "}}"));
  event(RC_STR("{\"ph\":\"M\",", pid,
               ",\"tid\":1,\"name\":\"thread_name\",\"args\":{\"name\":\"collectives\"}}"));
  event(RC_STR("{\"ph\":\"M\",", pid,
               ",\"tid\":2,\"name\":\"thread_name\",\"args\":{\"name\":\"reduce / copy\"}}"));
  laneEnd_.resize(2 * static_cast<size_t>(size));
  named_.assign(2 * static_cast<size_t>(size) * kLanes, false);
  std::fflush(file_);
}

TraceWriter::~TraceWriter() { close(); }

void TraceWriter::close() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (file_ == nullptr) return;
  writeLocked();
  std::fputs("\n]\n", file_);
  std::fclose(file_);
  file_ = nullptr;
}

void TraceWriter::maybeWrite() {
  // tracer_.full() is the tracer's own (thread-safe) question; the time is ours.
  std::lock_guard<std::mutex> lock(mutex_);
  if (file_ == nullptr) return;
  if (tracer_.full() || std::chrono::steady_clock::now() - lastWrite_ >= kFlushInterval) {
    writeLocked();
  }
}

void TraceWriter::write() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (file_ != nullptr) writeLocked();
}

void TraceWriter::writeLocked() {
  // Taken under the lock, so that two writers append the records in their order.
  auto records = tracer_.take();
  lastWrite_ = std::chrono::steady_clock::now();
  if (records.empty()) return;
  for (const auto& c : records) emit(*c);
  std::fflush(file_);
}

void TraceWriter::event(const std::string& json) {
  std::fputs(first_ ? "" : ",\n", file_);
  std::fputs(json.c_str(), file_);
  first_ = false;
}

int TraceWriter::lane(int peer, bool send, int64_t start, int64_t end) {
  auto& ends = laneEnd_[2 * static_cast<size_t>(peer) + (send ? 0 : 1)];
  size_t l = 0;
  while (l < ends.size() && ends[l] > start) ++l;
  if (l == ends.size()) {
    if (ends.size() < static_cast<size_t>(kLanes)) ends.push_back(0);
    else l = ends.size() - 1;
  }
  ends[l] = std::max(ends[l], end);
  const int tid = 16 + (peer * 2 + (send ? 0 : 1)) * kLanes + static_cast<int>(l);
  if (!named_[tid - 16]) {
    named_[tid - 16] = true;
    event(RC_STR("{\"ph\":\"M\",\"pid\":", rank_, ",\"tid\":", tid,
                 ",\"name\":\"thread_name\",\"args\":{\"name\":\"",
                 send ? "send -> r" : "recv <- r", peer, l ? RC_STR(" (", l + 1, ")") : "",
                 "\"}}"));
    event(RC_STR("{\"ph\":\"M\",\"pid\":", rank_, ",\"tid\":", tid,
                 ",\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":", tid, "}}"));
  }
  return tid;
}

void TraceWriter::emit(const algo::CollectiveTrace& c) {
  const int64_t end = c.end ? c.end : c.start;
  event(RC_STR("{\"ph\":\"X\",\"cat\":\"collective\",\"name\":", quoted(RC_STR(c.op, " #", c.seq,
                                                                               " ", c.algorithm)),
               ",\"pid\":", rank_, ",\"tid\":1,\"ts\":", us(c.start), ",\"dur\":", dur(end - c.start),
               ",\"args\":{\"seq\":", c.seq, ",\"op\":", quoted(c.op),
               ",\"algorithm\":", quoted(c.algorithm), ",\"bytes\":", c.n * c.elemSize,
               ",\"n\":", c.n, ",\"elem_size\":", c.elemSize, ",\"steps\":", c.steps,
               ",\"issued\":", us(c.issued), ",\"start\":", us(c.start), ",\"end\":", us(c.end),
               ",\"completed\":", c.completed ? "true" : "false",
               ",\"stream_ordered\":", c.streamOrdered ? "true" : "false",
               ",\"plan_ops\":", c.planOps, ",\"ops_recorded\":", c.ops.size(), "}}"));
  for (const auto& o : c.headers) emitOp(c, o);
  for (const auto& o : c.ops) emitOp(c, o);
}

void TraceWriter::emitOp(const algo::CollectiveTrace& c, const algo::OpTrace& o) {
  if (o.post == 0 && o.arrive == 0) return;  // never started (a failed collective)
  const char* kind = kindName(o.kind);
  const std::string args =
      RC_STR("{\"seq\":", c.seq, ",\"kind\":\"", kind, "\",\"peer\":", o.peer,
             ",\"step\":", o.step, ",\"seg\":", o.seg, ",\"index\":", o.index,
             ",\"begin\":", o.begin, ",\"count\":", o.count, ",\"bytes\":", o.bytes,
             ",\"forwarded\":", o.forwarded ? "true" : "false", ",\"want\":", us(o.want),
             ",\"post\":", us(o.post), ",\"arrive\":", us(o.arrive), ",\"done\":", us(o.done),
             "}");
  const std::string where = o.step < 0 ? std::string("header") : RC_STR("s", o.step, ".", o.seg);
  if (o.kind == OpKind::kLocalCopy || o.kind == OpKind::kLocalReduce) {
    // On the compute lane, like the reductions of received segments.
    event(RC_STR("{\"ph\":\"X\",\"cat\":\"compute\",\"name\":\"",
                 o.kind == OpKind::kLocalReduce ? "reduce " : "copy ", where, " <- local",
                 "\",\"pid\":", rank_, ",\"tid\":2,\"ts\":", us(o.arrive),
                 ",\"dur\":", dur(o.done - o.arrive), ",\"args\":", args, "}"));
    return;
  }
  if (o.kind == OpKind::kFinish) {
    event(RC_STR("{\"ph\":\"X\",\"cat\":\"finish\",\"name\":\"divide ", where, "\",\"pid\":", rank_,
                 ",\"tid\":2,\"ts\":", us(o.arrive), ",\"dur\":", dur(o.done - o.arrive),
                 ",\"args\":", args, "}"));
    return;
  }
  const bool send = o.kind == OpKind::kSend;
  const int64_t start = o.post ? o.post : o.arrive;
  const int64_t stop = send ? (o.done ? o.done : start) : (o.arrive ? o.arrive : start);
  const int tid = lane(o.peer, send, start, stop);
  event(RC_STR("{\"ph\":\"X\",\"cat\":\"", send ? "send" : "recv", "\",\"name\":\"",
               send ? "send " : "recv ", where, send ? " -> r" : " <- r", o.peer,
               "\",\"pid\":", rank_, ",\"tid\":", tid, ",\"ts\":", us(start),
               ",\"dur\":", dur(stop - start), ",\"args\":", args, "}"));
  if (!send && o.arrive && o.done) {
    event(RC_STR("{\"ph\":\"X\",\"cat\":\"compute\",\"name\":\"",
                 o.kind == OpKind::kRecvReduce ? "reduce " : "copy ", where, " <- r", o.peer,
                 "\",\"pid\":", rank_, ",\"tid\":2,\"ts\":", us(o.arrive),
                 ",\"dur\":", dur(o.done - o.arrive), "}"));
  }
}

}  // namespace ringcoll
