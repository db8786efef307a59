#include "schedules/registry.h"

#include <algorithm>
#include <cctype>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "common/errors.h"

namespace ringcoll::algo {

// The algorithms, one file each, each defining its entry.
Algorithm ringAlgorithm();     // ring.cc
Algorithm rhdAlgorithm();      // rhd.cc
Algorithm treeAlgorithm();     // tree.cc
Algorithm twoshotAlgorithm();  // twoshot.cc
Algorithm oneshotAlgorithm();  // oneshot.cc
Algorithm directAlgorithm();   // direct.cc
Algorithm biringAlgorithm();   // biring.cc

namespace {
// The built-in algorithms first, then those registered at run time. A deque keeps
// every entry where it is as entries are added (selections hold pointers to them),
// and the registry is never destroyed: run-time entries hold Python functions,
// which must not be released after the interpreter has gone at exit.
struct Registry {
  std::mutex mutex;
  std::deque<Algorithm> entries;
  size_t builtins = 0;
};

Registry& registry() {
  static Registry* r = [] {
    auto* reg = new Registry;
    for (Algorithm (*make)() : {ringAlgorithm, rhdAlgorithm, treeAlgorithm, twoshotAlgorithm,
                                oneshotAlgorithm, directAlgorithm, biringAlgorithm}) {
      reg->entries.push_back(make());
    }
    reg->builtins = reg->entries.size();
    return reg;
  }();
  return *r;
}

std::string knownNames() {
  std::string known;
  for (const auto& n : algorithmNames()) known += (known.empty() ? "" : ", ") + n;
  return known;
}
}  // namespace

namespace {
// torch.distributed's name where it differs from c10d's.
const char* torchName(Collective c) {
  switch (c) {
    case Collective::kAllreduce: return "all_reduce";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kAllgather: return "all_gather";
    case Collective::kAlltoall: return "all_to_all";
    default: return nullptr;
  }
}
}  // namespace

bool collectiveFromName(const std::string& name, Collective* out) {
  for (Collective c : kCollectives) {
    const char* alt = torchName(c);
    if (name == collectiveName(c) || (alt != nullptr && name == alt)) {
      *out = c;
      return true;
    }
  }
  return false;
}

std::string collectiveNames() {
  std::string out;
  for (Collective c : kCollectives) {
    out += (out.empty() ? "" : ", ") + std::string(collectiveName(c));
    if (const char* alt = torchName(c)) out += RC_STR(" (", alt, ")");
  }
  return out;
}

const char* torchCollectiveName(Collective c) {
  const char* t = torchName(c);
  return t != nullptr ? t : collectiveName(c);
}

const char* collectiveName(Collective c) {
  switch (c) {
    case Collective::kAllreduce: return "allreduce";
    case Collective::kReduceScatter: return "reducescatter";
    case Collective::kAllgather: return "allgather";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kReduce: return "reduce";
    case Collective::kBarrier: return "barrier";
    case Collective::kGather: return "gather";
    case Collective::kScatter: return "scatter";
    case Collective::kAlltoall: return "alltoall";
  }
  return "?";
}

const Builder& Algorithm::builder(Collective c) const {
  switch (c) {
    case Collective::kAllreduce: return allreduce;
    case Collective::kReduceScatter: return reduceScatter;
    case Collective::kAllgather: return allgather;
    case Collective::kBroadcast: return broadcast;
    case Collective::kReduce: return reduce;
    case Collective::kBarrier: return allreduce;
    case Collective::kGather: return gather;
    case Collective::kScatter: return scatter;
    case Collective::kAlltoall: return alltoall;
  }
  RC_ASSERT(false, "collective ", static_cast<int>(c));
}

namespace {
std::string bytesText(size_t b) {
  for (const auto& [shift, unit] : {std::pair{30, "GiB"}, {20, "MiB"}, {10, "KiB"}}) {
    if (b >= (size_t{1} << shift) && b % (size_t{1} << shift) == 0) {
      return RC_STR(b >> shift, " ", unit);
    }
  }
  return RC_STR(b, " B");
}
}  // namespace

std::string Applies::breaks(int p, size_t n, size_t bytes, int root) const {
  if (powersOfTwo && (p & (p - 1)) != 0) return RC_STR("p=", p, " is not a power of two");
  if (!worldSizes.empty() &&
      !std::binary_search(worldSizes.begin(), worldSizes.end(), p)) {
    return RC_STR("p=", p, " is not among its world sizes");
  }
  if (n != SIZE_MAX && countMultiple > 1 && n % countMultiple != 0) {
    return RC_STR("n=", n, " is not a multiple of ", countMultiple);
  }
  if (root >= 0 && !roots.empty() && !std::binary_search(roots.begin(), roots.end(), root)) {
    return RC_STR("root ", root, " is not among its roots");
  }
  if (bytes != SIZE_MAX && bytes < minBytes) {
    return RC_STR(bytes, " bytes is below ", bytesText(minBytes));
  }
  if (bytes != SIZE_MAX && bytes >= maxBytes) {
    return RC_STR(bytes, " bytes is not below ", bytesText(maxBytes));
  }
  return "";
}

const Applies& Algorithm::applies(Collective c) const {
  return where[static_cast<size_t>(c == Collective::kBarrier ? Collective::kAllreduce : c)];
}

std::string Algorithm::refusal(Collective c, int p, size_t n, size_t bytes, int root) const {
  const Applies& a = applies(c);
  if (a.everywhere()) return "";
  const bool rooted = c == Collective::kBroadcast || c == Collective::kReduce ||
                      c == Collective::kGather || c == Collective::kScatter;
  const std::string why =
      a.breaks(p, n, c == Collective::kBarrier ? SIZE_MAX : bytes, rooted ? root : -1);
  if (why.empty()) return "";
  std::string call = RC_STR("p=", p);
  if (n != SIZE_MAX) call += RC_STR(", n=", n);
  if (rooted && root >= 0) call += RC_STR(", root ", root);
  if (bytes != SIZE_MAX && c != Collective::kBarrier) call += RC_STR(" (", bytes, " bytes)");
  return RC_STR("algorithm '", name, "' does not apply to ", torchCollectiveName(c), " at ",
                call, ": ", why, " (", name, " declares for ", torchCollectiveName(c), ": ",
                a.declared, ")");
}

std::string Algorithm::provided() const {
  std::string out;
  for (Collective c : kCollectives) {
    if (provides(c)) out += (out.empty() ? "" : ", ") + std::string(collectiveName(c));
  }
  return out.empty() ? "nothing" : out;
}

void Algorithm::require(Collective c) const {
  RC_CHECK_ARG(provides(c), "algorithm '", name, "' does not provide ", collectiveName(c),
               " (", name, " provides: ", provided(), ")");
}

const Algorithm& findAlgorithm(const std::string& name) {
  Registry& reg = registry();
  {
    std::lock_guard<std::mutex> lock(reg.mutex);
    for (auto it = reg.entries.rbegin(); it != reg.entries.rend(); ++it) {
      if (it->name == name) return *it;
    }
  }
  throw std::invalid_argument(
      RC_STR("RINGCOLL_ALGO: unknown algorithm '", name, "' (known: ", knownNames(), ")"));
}

std::vector<std::string> algorithmNames() {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mutex);
  std::vector<std::string> names;
  for (const auto& a : reg.entries) {
    if (std::find(names.begin(), names.end(), a.name) == names.end()) names.push_back(a.name);
  }
  return names;
}

namespace {
std::vector<std::string> builtinNames() {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mutex);
  std::vector<std::string> names;
  for (size_t i = 0; i < reg.builtins; ++i) names.push_back(reg.entries[i].name);
  return names;
}
}  // namespace

bool isBuiltin(const std::string& name) {
  const auto names = builtinNames();
  return std::find(names.begin(), names.end(), name) != names.end();
}

void registerAlgorithm(Algorithm a) {
  const bool parses = !a.name.empty() && std::all_of(a.name.begin(), a.name.end(), [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-';
  });
  RC_CHECK_ARG(parses, "algorithm name '", a.name,
               "' is not letters, digits, '_' and '-' (RINGCOLL_ALGO could not name it)");
  RC_CHECK_ARG(a.name != "auto", "'auto' is RINGCOLL_ALGO's word for the cost model's "
               "choice, not an algorithm name");
  if (isBuiltin(a.name)) {
    std::string builtin;
    for (const auto& n : builtinNames()) builtin += (builtin.empty() ? "" : ", ") + n;
    throw std::invalid_argument(RC_STR("'", a.name, "' is a built-in algorithm: give yours "
                                       "another name (built-in: ", builtin, ")"));
  }
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mutex);
  reg.entries.push_back(std::move(a));
}

namespace {
// `a`'s name with `one` as the builder of c alone.
Prepared withBuilder(const Algorithm& a, Collective c, Builder one) {
  auto out = std::make_shared<Algorithm>();
  out->name = a.name;
  switch (c) {
    case Collective::kAllreduce: case Collective::kBarrier: out->allreduce = one; break;
    case Collective::kReduceScatter: out->reduceScatter = one; break;
    case Collective::kAllgather: out->allgather = one; break;
    case Collective::kBroadcast: out->broadcast = one; break;
    case Collective::kReduce: out->reduce = one; break;
    case Collective::kGather: out->gather = one; break;
    case Collective::kScatter: out->scatter = one; break;
    case Collective::kAlltoall: out->alltoall = one; break;
  }
  return out;
}
}  // namespace

Prepared pinned(const Algorithm& a, Collective c, const Params& prm, Schedule schedule) {
  auto s = std::make_shared<const Schedule>(std::move(schedule));
  return withBuilder(a, c, [s, prm, c](const Params& asked) {
    RC_ASSERT(asked == prm, s->name, " ", collectiveName(c), " was prepared for rank ",
              prm.rank, " of ", prm.size, ", n ", prm.n, ", root ", prm.root,
              " but the job asks for rank ", asked.rank, " of ", asked.size, ", n ", asked.n,
              ", root ", asked.root);
    return *s;
  });
}

Prepared refused(const Algorithm& a, Collective c, const std::string& why) {
  return withBuilder(a, c, [why](const Params&) -> Schedule { throw std::runtime_error(why); });
}

const Algorithm& defaultAlgorithm(Collective c) {
  // Built-in names are never defined again: look them up once (every call's
  // selection asks).
  static const Algorithm& ring = findAlgorithm("ring");
  static const Algorithm& direct = findAlgorithm("direct");
  const bool exchange =
      c == Collective::kGather || c == Collective::kScatter || c == Collective::kAlltoall;
  return exchange ? direct : ring;
}

}  // namespace ringcoll::algo
