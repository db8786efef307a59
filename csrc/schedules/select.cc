#include "schedules/select.h"

#include <cctype>
#include <stdexcept>

#include "common/errors.h"

namespace ringcoll::algo {

namespace {

constexpr const char* kSizes =
    "a whole number of bytes, optionally followed by K, M or G (powers of 1024)";

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::vector<std::string> splitOn(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == sep) {
      parts.push_back(trim(s.substr(start, i - start)));
      start = i + 1;
    }
  }
  return parts;
}

std::string known() {
  std::string out;
  for (const auto& n : algorithmNames()) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// `in`: the part of the value it came from, for the message.
const Algorithm& algorithmNamed(const std::string& name, const std::string& in) {
  RC_CHECK_ARG(name != "auto", "RINGCOLL_ALGO: 'auto' in '", in,
               "' is resolved by ringcoll's Python backend creator (ringcoll.model.auto) "
               "into explicit choices; this parser needs those (known: ", known(), ")");
  for (const auto& n : algorithmNames()) {
    if (n == name) return findAlgorithm(name);
  }
  throw std::invalid_argument(RC_STR("RINGCOLL_ALGO: unknown algorithm '", name, "' in '", in,
                                     "' (known: ", known(), ")"));
}

size_t parseSize(const std::string& s, const std::string& in) {
  size_t i = 0, v = 0;
  bool ok = !s.empty() && std::isdigit(static_cast<unsigned char>(s[0]));
  for (; ok && i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); ++i) {
    if (v > (SIZE_MAX - 9) / 10) ok = false;
    v = v * 10 + static_cast<size_t>(s[i] - '0');
  }
  if (ok && i < s.size()) {
    const char u = static_cast<char>(std::toupper(static_cast<unsigned char>(s[i])));
    const int shift = u == 'K' ? 10 : u == 'M' ? 20 : u == 'G' ? 30 : -1;
    ok = shift > 0 && i + 1 == s.size() && v <= (SIZE_MAX >> shift);
    if (ok) v <<= shift;
  }
  RC_CHECK_ARG(ok, "RINGCOLL_ALGO: bad size '", s, "' in '", in, "' (", kSizes, ")");
  return v;
}

}  // namespace

Selector::Selector(const std::string& value) {
  const size_t hash = value.find('#');
  value_ = trim(value.substr(0, hash));
  if (hash != std::string::npos) note_ = trim(value.substr(hash + 1));
  RC_CHECK_ARG(!value_.empty(), "RINGCOLL_ALGO is empty (an algorithm name, e.g. ring, or "
               "per collective, e.g. 'allreduce=twoshot:0-64K,ring;broadcast=tree')");
  if (value_.find('=') == std::string::npos) {
    RC_CHECK_ARG(value_.find_first_of(";,:") == std::string::npos, "RINGCOLL_ALGO: '", value_,
                 "' is neither one algorithm name nor per-collective entries "
                 "(collective=algorithm[:lo-hi],...;...), e.g. "
                 "'allreduce=twoshot:0-64K,ring;broadcast=tree'");
    const Algorithm& a = algorithmNamed(value_, value_);
    single_ = true;
    for (auto& rules : rules_) rules.push_back({&a, false, 0, 0, ""});
    return;
  }
  for (const auto& entry : splitOn(value_, ';')) parseEntry(entry);
}

void Selector::parseEntry(const std::string& entry) {
  const size_t eq = entry.find('=');
  RC_CHECK_ARG(eq != std::string::npos, "RINGCOLL_ALGO: entry '", entry, "' of '", value_,
               "' is not collective=algorithm[:lo-hi],... (a single algorithm name must be "
               "the whole value)");
  const std::string cname = trim(entry.substr(0, eq));
  Collective c;
  RC_CHECK_ARG(collectiveFromName(cname, &c), "RINGCOLL_ALGO: unknown collective '", cname,
               "' in '", entry, "' (collectives: ", collectiveNames(), ")");
  auto& rules = rules_[static_cast<size_t>(c)];
  RC_CHECK_ARG(rules.empty(), "RINGCOLL_ALGO: ", collectiveName(c), " is named twice in '",
               value_, "'");
  for (const auto& choice : splitOn(entry.substr(eq + 1), ',')) {
    RC_CHECK_ARG(!choice.empty(), "RINGCOLL_ALGO: empty choice in '", entry,
                 "' (choices are algorithm or algorithm:lo-hi, separated by ',')");
    RC_CHECK_ARG(rules.empty() || rules.back().ranged, "RINGCOLL_ALGO: in '", entry, "', '",
                 choice, "' follows '", rules.back().algorithm->name,
                 "', which has no range and so covers every size left: it must be last");
    const size_t colon = choice.find(':');
    const Algorithm& a = algorithmNamed(trim(choice.substr(0, colon)), choice);
    try {
      a.require(c);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(RC_STR("RINGCOLL_ALGO: in '", entry, "': ", e.what()));
    }
    if (colon == std::string::npos) {
      rules.push_back({&a, false, 0, 0, ""});
      continue;
    }
    const std::string range = trim(choice.substr(colon + 1));
    const size_t dash = range.find('-');
    RC_CHECK_ARG(dash != std::string::npos, "RINGCOLL_ALGO: range '", range, "' in '", choice,
                 "' is not lo-hi (sizes: ", kSizes, ")");
    const size_t lo = parseSize(trim(range.substr(0, dash)), choice);
    const size_t hi = parseSize(trim(range.substr(dash + 1)), choice);
    RC_CHECK_ARG(lo < hi, "RINGCOLL_ALGO: range '", range, "' in '", choice,
                 "' is empty (lo-hi covers lo <= bytes < hi)");
    for (const auto& r : rules) {
      RC_CHECK_ARG(hi <= r.lo || r.hi <= lo, "RINGCOLL_ALGO: in '", entry, "', range '", range,
                   "' of ", a.name, " overlaps '", r.text, "' of ", r.algorithm->name);
    }
    rules.push_back({&a, true, lo, hi, range});
  }
}

std::string Selector::noted(const std::string& why) const {
  return note_.empty() ? why : RC_STR(note_, "; ", why);
}

Choice Selector::pick(Collective c, size_t bytes, bool explain) const {
  const auto& rules = rules_[static_cast<size_t>(c)];
  const Algorithm& fallback = defaultAlgorithm(c);
  // The reason is text for RINGCOLL_DEBUG: built only when asked for, as formatting
  // it would cost more than the rest of a small collective's choice.
  auto because = [&](bool withNote, auto&&... parts) {
    if (!explain) return std::string();
    const std::string why = RC_STR(parts...);
    return withNote ? noted(why) : why;
  };
  const char* name = torchCollectiveName(c);
  for (const auto& r : rules) {
    if (r.ranged && (bytes < r.lo || bytes >= r.hi)) continue;
    if (single_) {
      // One name applies to the collectives the algorithm provides; the others run
      // their default (RINGCOLL_DEBUG logs this reason).
      if (!r.algorithm->provides(c)) {
        return {&fallback, because(true, "default: ", r.algorithm->name, " (RINGCOLL_ALGO=",
                                   value_, ") does not provide ", name)};
      }
      return {r.algorithm, because(true, "RINGCOLL_ALGO=", value_)};
    }
    if (r.ranged) return {r.algorithm, because(true, "RINGCOLL_ALGO ", name, " range ", r.text)};
    return {r.algorithm, rules.size() > 1
                             ? because(true, "RINGCOLL_ALGO ", name, ", beyond its ranges")
                             : because(true, "RINGCOLL_ALGO ", name)};
  }
  return {&fallback, rules.empty()
                         ? because(false, "default: RINGCOLL_ALGO names no ", name)
                         : because(false, "default: no RINGCOLL_ALGO ", name, " range covers it")};
}

std::string gpuDefault(int p) {
  if (p > 8) return "ring# the CUDA default for more than 8 ranks";
  // One-shot while each rank receives at most kGpuOneShotBytes, in whole KiB.
  const size_t one = p > 1 ? kGpuOneShotBytes / static_cast<size_t>(p - 1) >> 10 << 10
                           : kGpuOneShotBytes;
  const std::string two = std::to_string(kGpuTwoShotBytes >> 20) + "M";
  const std::string cut = std::to_string(one >> 10) + "K";
  return "allreduce=oneshot:0-" + cut + ",twoshot:" + cut + "-" + two +
         ",ring;reducescatter=twoshot:0-" + two + ",ring;allgather=twoshot:0-" + two +
         ",ring# the CUDA default (schedules/select.h)";
}

}  // namespace ringcoll::algo
