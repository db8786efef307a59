// Which algorithm runs a collective of a given size: RINGCOLL_ALGO (and
// ringcoll.Options(algo=...)), parsed once when a backend is created.
//
//   ring                   one name for every collective (the default: ring)
//   allreduce=twoshot:0-64K,rhd:64K-1M,ring;broadcast=tree
//                          per collective, by the byte size of its buffer
//
//   value      := body ['#' note]
//   body       := name | entry (';' entry)*
//   entry      := collective '=' choice (',' choice)*
//   choice     := name | name ':' size '-' size
//   size       := digits, optionally followed by K, M or G (times 2^10, 2^20, 2^30)
//   collective := allreduce | reducescatter | allgather | broadcast | reduce | barrier
//               | gather | scatter | alltoall
//
// A range lo-hi covers lo <= bytes < hi; ranges of one collective may not overlap.
// A choice without a range covers every size the ranges before it do not, and must
// be the collective's last. Sizes that no choice covers, and collectives the value
// does not name, run the collective's default (defaultAlgorithm: ring, or direct for
// gather, scatter and all-to-all). The size is that of the collective's buffer: the
// tensor (all-reduce, broadcast, reduce), the whole input (reduce-scatter), the
// whole output (all-gather, gather), the root's whole input (scatter), what this
// rank sends (all-to-all), p bytes (barrier, an all-reduce of one byte per rank).
//
// A bad value is a std::invalid_argument naming RINGCOLL_ALGO, the bad part and
// what is accepted. An algorithm named for a collective it does not provide is
// refused here. One name for everything (RINGCOLL_ALGO=rhd) applies to each
// collective the algorithm provides, and leaves the others at their default (ring;
// direct for gather, scatter and all-to-all), with a reason RINGCOLL_DEBUG prints:
// a DDP script under RINGCOLL_ALGO=rhd runs rhd's all-reduce and ring's broadcast.
//
// The note says where a generated value came from: RINGCOLL_DEBUG prints it as the
// reason of every choice the value makes. `auto` never reaches this parser: the
// Python creator of the backend replaces it with the cost model's choice, written
// as an ordinary value with the note "auto: predicted fastest (model ...)"
// (ringcoll/model/auto.py); here it is refused with a message saying so.
#pragma once

#include <cstddef>
#include <iterator>
#include <string>
#include <vector>

#include "schedules/registry.h"

namespace ringcoll::algo {

struct Choice {
  const Algorithm* algorithm = nullptr;
  std::string why;  // e.g. "RINGCOLL_ALGO all_reduce range 0-64K"; empty unless asked for
};

class Selector {
 public:
  // Throws std::invalid_argument on a bad value.
  explicit Selector(const std::string& value);

  // The algorithm for collective c over `bytes` bytes (always one that provides c).
  // `explain`: fill Choice::why (for RINGCOLL_DEBUG; costs a formatted string).
  Choice pick(Collective c, size_t bytes, bool explain = false) const;

  const std::string& value() const { return value_; }

 private:
  struct Rule {
    const Algorithm* algorithm;
    bool ranged;
    size_t lo, hi;     // ranged: lo <= bytes < hi
    std::string text;  // "0-64K", for the reason
  };
  void parseEntry(const std::string& entry);
  std::string noted(const std::string& why) const;  // the note, then why

  std::string value_;  // the body
  std::string note_;   // after '#', trimmed; may be empty
  bool single_ = false;  // one name for everything
  std::vector<Rule> rules_[std::size(kCollectives)];
};

// The selection CUDA tensors (and the stream emulation, which stands for them in CI)
// run when neither RINGCOLL_GPU_ALGO nor RINGCOLL_ALGO is set, for a group of p
// ranks. Up to p = 8, where a small call's cost is its batches (one NCCL group
// each) rather than its bytes: all-reduce by one-shot (one batch, one fused
// reduction) while the (p - 1) n bytes each rank receives stay under
// kGpuOneShotBytes, then two-shot (two batches, each rank's bytes as the ring's)
// below kGpuTwoShotBytes; reduce-scatter and all-gather by two-shot (one batch
// each) below kGpuTwoShotBytes; the ring above, and for larger groups (not
// measured). Side by side on an H200 shared by 2-4 ranks (docs/GPU.md,
// benchmarks/results/gpu-ab-h200.txt): one-shot was the fastest all-reduce up to
// 256 KiB at p = 2, 32 KiB at p = 4, two-shot the fastest at 2 MiB for p = 3 and 4
// (a tie at p = 2), and the fastest or tied reduce-scatter and all-gather at
// every size to 2 MiB.
constexpr size_t kGpuOneShotBytes = size_t{384} << 10;
constexpr size_t kGpuTwoShotBytes = size_t{4} << 20;
std::string gpuDefault(int p);

}  // namespace ringcoll::algo
