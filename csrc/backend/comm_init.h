// How a stream path's communicator is made: at the group's first collective on that
// path, as ProcessGroupNCCL makes its NCCL communicator (the CUDA glue,
// cuda_device.h) and as the CPU emulation of it does (backend.cc), so that CI runs
// this logic too. Rank 0 makes an id and puts it in the group's store; every rank
// reads it, then joins (ncclCommInitRank returns once every rank joined; the
// emulation waits for every rank's key under the id).
//
// Both waits can be long: a peer that has not reached its first collective yet, or
// never will (it died before). They poll the store instead of blocking in get(), so
// that they end on their own at `timeout` (a PeerError naming what was waited for
// and who is missing), and at once when `stopping()` says the group is being aborted
// or shut down (abort() or destroy_process_group from another thread). The creating
// call holds no lock a thread with the GIL could want meanwhile.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace ringcoll {

// Why the group is stopping ("the process group was aborted (abort())"), or null.
using Stopping = std::function<const char*()>;

// Rank 0: publishes makeId() under `key` and returns it; the others wait for it.
// `what` names the creation in errors ("creating the NCCL communicator").
std::vector<uint8_t> shareCommId(c10d::Store& store, const std::string& key, int rank,
                                 const std::function<std::vector<uint8_t>()>& makeId,
                                 std::chrono::milliseconds timeout, const Stopping& stopping,
                                 const std::string& what);

// Every rank sets `prefix`/<rank> and waits until every rank has (the emulation's
// stand-in for ncclCommInitRank's rendezvous); a PeerError names the missing ranks.
void joinEveryRank(c10d::Store& store, const std::string& prefix, int rank, int size,
                   std::chrono::milliseconds timeout, const Stopping& stopping,
                   const std::string& what);

}  // namespace ringcoll
