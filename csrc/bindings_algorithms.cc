// Algorithms written in Python (ringcoll/schedules): the registry entries whose
// builders call a Python definition, and their preparation for a call
// (schedules/registry.h: Algorithm::prepare) with the memo that makes every call
// after the first cost what a built-in algorithm's costs.
//
// The Python side (ringcoll/schedules/__init__.py, class _Definition) answers two
// calls, each with (collective, rank, p, n, root, order, hosts, send_counts,
// recv_counts), the collective by torch's name:
//   build    -> (name, (begin, end) result, scratch, steps, scratch_copy), a step being
//               ([(kind, peer, begin, end)], [(begin, end) reduced]) with kind the
//               value of Kind: this rank's schedule as the user's function gives it
//               (what ringcoll.check, .sim and .model read, through _C.schedule);
//   prepare  -> (that schedule, digest): the same once the checker proved every
//               rank's schedule of this call, with a hash of them all (never 0);
//               raises, naming the algorithm, collective, rank and step or the
//               user's exception, if the function raised or the checker refused.
//
// Threads and the GIL. prepare runs on the thread that issues the collective
// (backend.cc: algorithm()), which c10d's bindings let go of the GIL (or which
// still holds it: ringcoll.ops' eager entry); it takes the GIL only when the memo
// has no entry, so a call after the first for the same Params takes no lock but
// the memo's. The worker and the stream path's launch only ever run the prepared
// (pinned) schedule and never call Python: a caller holding the GIL while it waits
// for them cannot deadlock them. During the interpreter's shutdown no new schedule
// is built (a clear error); prepared ones still run. The definitions are kept
// alive for the life of the process and never released: the registry outlives
// the interpreter.
#include "bindings_algorithms.h"

#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/errors.h"
#include "schedules/registry.h"

namespace py = pybind11;

namespace ringcoll {

namespace {

using algo::Collective;
using algo::Params;
using algo::Prepared;
using algo::Schedule;

// The prepared algorithms of one Python algorithm, by (collective, Params): the
// last kEntries calls that differ (a training step's buckets, a benchmark's sizes).
class PreparedMemo {
 public:
  static constexpr size_t kEntries = 64;

  Prepared find(Collective c, const Params& prm) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Entry& e : entries_) {
      if (e.c == c && e.prm.n == prm.n && e.prm == prm) {
        e.used = ++clock_;
        return e.prepared;
      }
    }
    return nullptr;
  }

  void add(Collective c, const Params& prm, Prepared prepared) {
    std::lock_guard<std::mutex> lock(mutex_);
    Entry e{c, prm, std::move(prepared), ++clock_};
    if (entries_.size() < kEntries) {
      entries_.push_back(std::move(e));
      return;
    }
    Entry* oldest = &entries_[0];
    for (Entry& x : entries_) {
      if (x.used < oldest->used) oldest = &x;
    }
    *oldest = std::move(e);
  }

 private:
  struct Entry {
    Collective c;
    Params prm;
    Prepared prepared;
    uint64_t used;
  };
  std::mutex mutex_;
  std::vector<Entry> entries_;
  uint64_t clock_ = 0;
};

bool interpreterGone() {
#if PY_VERSION_HEX >= 0x030D0000
  return !Py_IsInitialized() || Py_IsFinalizing();
#else
  return !Py_IsInitialized() || _Py_IsFinalizing();
#endif
}

Schedule toSchedule(const py::handle& obj) {
  const auto t = obj.cast<py::tuple>();
  Schedule s;
  s.name = t[0].cast<std::string>();
  const auto result = t[1].cast<std::pair<size_t, size_t>>();
  s.result = {result.first, result.second};
  s.scratch = t[2].cast<size_t>();
  s.scratchCopy = t[4].cast<bool>();
  for (const auto& stepObj : t[3]) {
    const auto step = stepObj.cast<py::tuple>();
    algo::Step st;
    for (const auto& tr : step[0]) {
      const auto x = tr.cast<py::tuple>();
      const int kind = x[0].cast<int>();
      RC_ASSERT(kind >= 0 && kind <= 3, "transfer kind ", kind);
      st.transfers.push_back({static_cast<algo::Kind>(kind), x[1].cast<int>(),
                              {x[2].cast<size_t>(), x[3].cast<size_t>()}});
    }
    for (const auto& r : step[1]) {
      const auto x = r.cast<std::pair<size_t, size_t>>();
      st.reduced.push_back({x.first, x.second});
    }
    s.steps.push_back(std::move(st));
  }
  return s;
}

// definition.<method>(collective, rank, p, n, root, order, hosts, send_counts,
// recv_counts); a barrier is the all-reduce's (registry.h). Precondition: the GIL
// is held.
py::object callDefinition(const py::object& def, const char* method, Collective c,
                          const Params& prm) {
  if (c == Collective::kBarrier) c = Collective::kAllreduce;
  return def.attr(method)(algo::torchCollectiveName(c), prm.rank, prm.size, prm.n, prm.root,
                          prm.order, prm.hosts, prm.sendCounts, prm.recvCounts);
}

// The tools' builder: the user's function, through the GIL (reentrant: the
// bindings that call it hold it). A Python exception passes through unchanged.
algo::Builder pythonBuilder(std::shared_ptr<py::object> def, Collective c) {
  return [def, c](const Params& prm) {
    py::gil_scoped_acquire gil;
    return toSchedule(callDefinition(*def, "build", c, prm));
  };
}

algo::Preparer pythonPreparer(std::shared_ptr<py::object> def, std::string name) {
  auto memo = std::make_shared<PreparedMemo>();
  return [def, memo, name](Collective c, const Params& prm) -> Prepared {
    if (Prepared hit = memo->find(c, prm)) return hit;
    if (interpreterGone()) {
      throw std::runtime_error(RC_STR(
          "algorithm '", name, "' is written in Python and the interpreter is shutting "
          "down: no new ", algo::torchCollectiveName(c), " schedule can be built (only the "
          "ones prepared before run)"));
    }
    Schedule s;
    {
      py::gil_scoped_acquire gil;
      try {
        const auto out = callDefinition(*def, "prepare", c, prm).cast<py::tuple>();
        s = toSchedule(out[0]);
        s.digest = out[1].cast<uint32_t>();
      } catch (py::error_already_set& e) {
        // The message, not the traceback: the Python side wrote it to name what
        // failed where (and the user's frame). Built while the GIL is held.
        throw std::runtime_error(py::str(e.value()).cast<std::string>());
      }
    }
    RC_ASSERT(s.digest != 0, "algorithm '", name, "': a digest of 0");
    const algo::Algorithm& entry = algo::findAlgorithm(name);
    Prepared prepared = algo::pinned(entry, c, prm, std::move(s));
    memo->add(c, prm, prepared);
    return prepared;
  };
}

}  // namespace

namespace {
// An Applies from ringcoll.schedules' tuple (world_sizes list, powers_of_two,
// min_bytes, max_bytes (None: no bound), count_multiple, declared text, roots list).
algo::Applies toApplies(const py::handle& obj) {
  const auto t = obj.cast<py::tuple>();
  algo::Applies a;
  a.worldSizes = t[0].cast<std::vector<int>>();
  std::sort(a.worldSizes.begin(), a.worldSizes.end());
  a.powersOfTwo = t[1].cast<bool>();
  a.minBytes = t[2].cast<size_t>();
  a.maxBytes = t[3].is_none() ? SIZE_MAX : t[3].cast<size_t>();
  a.countMultiple = t[4].cast<size_t>();
  a.declared = t[5].cast<std::string>();
  a.roots = t[6].cast<std::vector<int>>();
  std::sort(a.roots.begin(), a.roots.end());
  return a;
}

Collective collectiveNamed(const std::string& name) {
  Collective c;
  TORCH_CHECK(algo::collectiveFromName(name, &c), "unknown collective '", name, "' (",
              algo::collectiveNames(), ")");
  return c;
}
}  // namespace

void bindPythonAlgorithms(py::module_& m) {
  m.def(
      "register_algorithm",
      [](const std::string& name, const std::string& summary,
         const std::vector<std::string>& collectives, py::object definition,
         const py::list& applies) {
        // Never released: a registry entry outlives the interpreter (above).
        auto def = std::shared_ptr<py::object>(new py::object(std::move(definition)),
                                               [](py::object*) {});
        algo::Algorithm a;
        a.name = name;
        a.summary = summary;
        TORCH_CHECK(applies.size() == collectives.size(), "register_algorithm: ",
                    applies.size(), " declarations for ", collectives.size(), " collectives");
        for (size_t i = 0; i < collectives.size(); ++i) {
          const std::string& cname = collectives[i];
          Collective c;
          TORCH_CHECK(algo::collectiveFromName(cname, &c) && c != Collective::kBarrier,
                      "register_algorithm: unknown collective ", cname);
          a.where[static_cast<size_t>(c)] = toApplies(applies[i]);
          algo::Builder b = pythonBuilder(def, c);
          switch (c) {
            case Collective::kAllreduce: a.allreduce = b; break;
            case Collective::kReduceScatter: a.reduceScatter = b; break;
            case Collective::kAllgather: a.allgather = b; break;
            case Collective::kBroadcast: a.broadcast = b; break;
            case Collective::kReduce: a.reduce = b; break;
            case Collective::kGather: a.gather = b; break;
            case Collective::kScatter: a.scatter = b; break;
            case Collective::kAlltoall: a.alltoall = b; break;
            case Collective::kBarrier: break;
          }
        }
        a.prepare = pythonPreparer(def, name);
        algo::registerAlgorithm(std::move(a));  // std::invalid_argument: ValueError
      },
      py::arg("name"), py::arg("summary"), py::arg("collectives"), py::arg("definition"),
      py::arg("applies"),
      "Registers an algorithm written in Python (use ringcoll.schedules.register); applies: "
      "one declaration per collective (registry.h: Applies).");
  m.def(
      "refusal",
      [](const std::string& algoName, const std::string& collective, int p, int64_t n,
         int64_t nbytes, int root) {
        const algo::Algorithm& a = algo::findAlgorithm(algoName);
        return a.refusal(collectiveNamed(collective), p,
                         n < 0 ? SIZE_MAX : static_cast<size_t>(n),
                         nbytes < 0 ? SIZE_MAX : static_cast<size_t>(nbytes), root);
      },
      py::arg("algo"), py::arg("collective"), py::arg("p"), py::arg("n") = -1,
      py::arg("nbytes") = -1, py::arg("root") = -1,
      "'' when the algorithm's collective serves p ranks (and n elements, nbytes bytes, "
      "when given), else why not, in one line naming the algorithm and its declaration.");
  m.def(
      "applicability",
      [](const std::string& algoName, const std::string& collective) {
        const algo::Applies& w = algo::findAlgorithm(algoName).applies(collectiveNamed(collective));
        py::dict d;
        d["world_sizes"] = w.worldSizes.empty() ? py::object(py::none())
                                                : py::object(py::cast(w.worldSizes));
        d["powers_of_two"] = w.powersOfTwo;
        d["min_bytes"] = w.minBytes;
        d["max_bytes"] = w.maxBytes == SIZE_MAX ? py::object(py::none())
                                                : py::object(py::cast(w.maxBytes));
        d["count_multiple"] = w.countMultiple;
        d["roots"] = w.roots.empty() ? py::object(py::none()) : py::object(py::cast(w.roots));
        d["declared"] = w.declared;
        d["everywhere"] = w.everywhere();
        return d;
      },
      py::arg("algo"), py::arg("collective"),
      "Where the algorithm's collective applies (registry.h: Applies), as a dict.");
  m.def("is_builtin", &algo::isBuiltin, py::arg("name"));
}

}  // namespace ringcoll
