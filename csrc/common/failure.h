// The failure protocol, one copy for the CPU path (backend.cc), the stream paths
// (backend/stream_path.h: CUDA and its CPU emulation) and the point-to-point engine
// (engine/p2p.h).
#pragma once

#include <chrono>

namespace ringcoll {

// shutdown() (destroy_process_group) lets work in flight finish while it makes
// progress; work that waited this long for its peers is failed instead of waiting
// out the group's timeout, so a clean exit never hangs on a dead peer.
constexpr std::chrono::milliseconds kShutdownGrace{2000};

// How often work that waits looks in the group's store for a failure another rank
// reported there (one store round trip, tens of microseconds). Work younger than
// this does not look at all, so collectives on time never touch the store.
constexpr std::chrono::milliseconds kReportPoll{100};

// How often one rank of a group of `size` reads the store for a report while its
// work waits: kReportPoll up to 16 ranks, then longer in proportion, so that a
// group's waiting ranks together read it at most about 160 times a second
// however large the group (one store serves them all). Abort and shutdown are
// still seen every kReportPoll.
inline std::chrono::milliseconds reportPollFor(int size) {
  return kReportPoll * (size > 16 ? (size + 15) / 16 : 1);
}

// The group's store key under which the first rank that saw a failure (a
// disagreement, a peer that exited, a timeout) leaves it for the others, on every
// path: CPU collectives, the stream paths (CUDA and its emulation).
constexpr const char* kFailureKey = "ringcoll/failure";

}  // namespace ringcoll
