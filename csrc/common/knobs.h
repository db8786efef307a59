// Every ringcoll knob, in one place. Each is read once, when a backend is created,
// from the environment and then from the explicit overrides passed through
// ringcoll.Options (pg_options of init_process_group / new_group), which win.
//
//   field       variable              default  meaning
//   algo        RINGCOLL_ALGO         ring     algorithm from algo/registry.cc
//   transport   RINGCOLL_TRANSPORT    auto     CPU tensors: auto|gloo (auto = gloo)
//   chunkBytes  RINGCOLL_CHUNK_BYTES  1048576  largest single transfer (a segment);
//                                              staging memory is 2x this per backend
//   debug       RINGCOLL_DEBUG        0        1: log every collective to stderr
//
// An unknown RINGCOLL_* variable or a bad value is an error naming the variable,
// the value and what is accepted: a typo must never be silently ignored.
#pragma once

#include <cstddef>
#include <map>
#include <string>

namespace ringcoll {

struct Knobs {
  std::string algo = "ring";
  std::string transport = "auto";
  size_t chunkBytes = size_t{1} << 20;
  bool debug = false;

  // Environment, then overrides (keys are the variable names, e.g.
  // "RINGCOLL_ALGO"). Throws std::invalid_argument on any bad name or value.
  static Knobs load(const std::map<std::string, std::string>& overrides);

  // "RINGCOLL_ALGO=ring RINGCOLL_TRANSPORT=auto ..." for logs and tests.
  std::string describe() const;
};

}  // namespace ringcoll
