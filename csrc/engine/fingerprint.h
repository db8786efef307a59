// The fingerprint of a collective call: what this rank believes the group is doing
// (which c10d method, sequence number, dtype, element count, op, root, algorithm).
//
// Ranks that disagree about a collective must not exchange its payload: a count
// that differs changes message sizes (gloo aborts the process on a size it did not
// expect), a dtype or op that differs reduces garbage that looks fine, two ranks
// that both believe they are the root of a broadcast wait for each other. So the
// executor opens every collective by sending this 64-byte header to every peer it
// will talk to and to its two ring neighbours, and touches no payload before every
// header it receives matched its own (engine/executor.h). The ring neighbours make
// detection certain: if any two ranks disagree, some two ring neighbours disagree,
// and both of them see it.
//
// The header is plain bytes with a fixed layout (both ends are the same build):
// `magic` and `version` catch a stray payload read as a header.
//
// Pairwise calls (all-to-all): each pair of ranks exchanges its own amounts, so the
// header sent to peer q says how many elements this rank sends to q (`count`) and
// expects from q (`countBack`); the two ranks agree when each one's count is the
// other's countBack. Every other call sends the same header to every peer.
//
// Coalesced calls (several tensors in one collective): `count` is the elements of
// all tensors together, and `layout` a digest of the list (layoutDigest), so that
// ranks passing [3, 5] and [5, 3] elements, or the same bytes in other dtypes,
// disagree instead of moving blocks to the wrong tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>

#include "reduce/types.h"

namespace ringcoll::algo {

// The c10d method a call came through; two methods that happen to move the same
// bytes (all_gather and all_gather_into_tensor) still disagree, as torch's
// TORCH_DISTRIBUTED_DEBUG=DETAIL check says.
enum class Method : uint8_t {
  kAllreduce,
  kAllreduceCoalesced,
  kReduce,
  kBroadcast,
  kAllgather,
  kAllgatherIntoTensor,
  kReduceScatter,
  kReduceScatterTensor,
  kBarrier,
  kGather,
  kScatter,
  kAlltoall,
  kAlltoallBase,
  kAllgatherCoalesced,            // all_gather_coalesced (a list of outputs per rank)
  kAllgatherIntoTensorCoalesced,  // all_gather_into_tensor under _coalescing_manager
  kReduceScatterTensorCoalesced,  // reduce_scatter_tensor under _coalescing_manager
  // A stream path's send/recv/batch_isend_irecv between two ranks (pairwise: bytes
  // each way; `layout`: the digest of both directions' messages, sizes and tags;
  // `seq`: the pair's call number).
  kPointToPoint,
};

// How the call reduces: not at all, by an element op (Fingerprint::op), or by AVG
// or PREMUL_SUM (SUM underneath).
enum class Reduces : uint8_t { kNo, kOp, kAvg, kPremulSum };

// Not over-aligned: it is a member of every Job, Execution and queued task, and a
// 64-byte alignment made each of those a memalign (about 5% of a small call's CPU
// time); transports copy headers as bytes and need no alignment.
struct Fingerprint {
  static constexpr uint32_t kMagic = 0x50464352;  // "RCFP"
  static constexpr uint16_t kVersion = 4;  // 3: `layout` is compared; 4: the digest

  uint32_t magic = kMagic;
  uint16_t version = kVersion;
  Method method = Method::kBarrier;
  DType dtype = DType::kUInt8;
  Reduces reduces = Reduces::kNo;
  RedOp op = RedOp::kSum;  // with Reduces::kOp
  uint8_t hasDtype = 0;    // barrier has none
  uint8_t pairwise = 0;    // count/countBack are per peer (see above)
  int32_t root = -1;     // broadcast, reduce; -1 otherwise
  int32_t rank = -1;     // the sender; not compared
  uint32_t layout = 0;   // coalesced calls: layoutDigest of the tensor list; else 0
  uint64_t seq = 0;      // the group's sequence number of this call
  uint64_t count = 0;    // elements per rank as the user passed them (see api.cc);
                         // pairwise: elements sent to the header's recipient
  uint64_t countBack = 0;   // pairwise: elements expected from the recipient
  // The schedule's name, NUL-padded (truncated to 15 characters). A schedule
  // with a digest (schedules/schedule.h: a Python algorithm's) keeps 11 of them,
  // a NUL, then the 4 bytes of its digest, which is never 0: ranks whose
  // definitions of one name differ send different bytes here. (A name of 12 or
  // more characters has no NUL at [11], so the two forms never read alike.)
  char algorithm[16] = {};

  void setAlgorithm(const std::string& name, uint32_t digest = 0);
  // 0 if none (above).
  uint32_t digest() const;
};
static_assert(sizeof(Fingerprint) == 64, "the header is one 64-byte message");

const char* methodName(Method m);

// The digest of a coalesced call's tensor list: FNV-1a over the number of tensors
// and each one's (dtype, element count) in order. Never 0, so a coalesced call
// never matches a plain one by accident. Both ends are the same build.
struct LayoutDigest {
  uint32_t h = 2166136261u;
  void add(uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= static_cast<uint8_t>(v >> (8 * i));
      h *= 16777619u;
    }
  }
  uint32_t value() const { return h == 0 ? 1 : h; }
};

// The one comparison rule, used on the host (sameCall, mismatch) and on the device
// (the executor sends canonical() headers, and the reducer's checkHeader compares
// the bytes it received with expectedFrom(); reduce/reducer.h): two calls agree
// when these 64 bytes are equal.
//   canonical: the header without what is not part of the call (the sender's rank;
//              the element op unless the call reduces by one);
//   expectedFrom: the canonical header a peer making the same call sends to this
//              rank (pairwise: its count is our countBack and the other way round).
Fingerprint canonical(Fingerprint fp);
Fingerprint expectedFrom(const Fingerprint& mine);
// `mine` and `theirs` (received) are the same call: the bytes above are equal.
bool sameCall(const Fingerprint& mine, const Fingerprint& theirs);

// "rank 1 called allreduce(float32, 12 elements, SUM, ring-all-reduce) #7", with
// " schedule #1a2b3c4d" after a digest's name; a pairwise
// header names its recipient `to`: "... alltoall_base(float32, 3 elements to rank
// 0, 4 from it, pairwise-a2a) #7".
std::string describe(const Fingerprint& fp, int to = -1);

// The header message received from `peer` that does not match `mine`: the error
// text naming both calls, or "" when they match. `bytes` that are not a header
// at all (wrong magic) are described as such.
std::string mismatch(const Fingerprint& mine, const void* received, int peer);

// What is wrong with a message from `peer` that opens a collective (`got` bytes
// where this rank announced `want`), null if nothing: with `mine`, its header is
// compared first, whatever the size, since it names the peer's call (MismatchError);
// then the size (PeerError). A peer in a small collective sends its header at the
// start of a longer message (engine/small.h), one in a scheduled collective a
// header alone, so the two still report both calls.
std::exception_ptr openingError(const Fingerprint* mine, const void* received, size_t got,
                                size_t want, int peer);

}  // namespace ringcoll::algo
