// Where the ranks of a process group live, and the CPU transport that follows:
// every rank publishes its host name and a /dev/shm probe through the group's
// store; ranks that can open each other's probe share a host. The ring runs host by host (hosts in order of their
// lowest rank, ranks ascending within a host), so it crosses each host boundary
// once. Links: RINGCOLL_TRANSPORT=auto uses shared memory between ranks of one host
// and gloo between hosts; `shm` and `gloo` force one for every link (`shm` across
// hosts is an error that names the two ranks and their hosts).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "transport/doorbell.h"
#include "transport/message_port.h"
#include "transport/rendezvous.h"
#include "transport/routed_transport.h"

namespace ringcoll {

struct Topology {
  std::vector<std::string> hostOf;  // per rank
  std::vector<int> order;           // the ring order
  std::vector<int> local;           // the ranks on this rank's host, ascending
};

// hostname and boot id: what a host is called in messages and RINGCOLL_DEBUG.
std::string thisHost();

// `host`: this rank's host name (RINGCOLL_HOST, else thisHost()). `agreed`: what
// every rank must have the same of (Knobs::shared()), sent along with it; a rank
// whose value differs makes every rank throw std::invalid_argument naming both.
// `probe`: ranks share a host when they can open each other's file in /dev/shm
// (transport/shm_transport.h's ShmProbe), not when their names agree; the host is
// then named "<name of its lowest rank> (/dev/shm of rank L)". Without it (a
// RINGCOLL_HOST given, which pretends ranks live apart) the names decide.
Topology exchangeTopology(Rendezvous& rv, int rank, int size, const std::string& host,
                          const std::string& agreed, bool probe);

// The CPU transport of one backend (see above). `port`: gloo point-to-point over
// the same ranks; chunkBytes: the largest message; `wait`: how its shared memory's
// waiters wait (transport/doorbell.h).
std::unique_ptr<RoutedTransport> makeCpuTransport(
    const Topology& topo, const std::string& transport, Rendezvous& rv,
    std::shared_ptr<MessagePort> port, int rank, int size, size_t chunkBytes,
    std::chrono::milliseconds timeout, const WaitPolicy& wait);

}  // namespace ringcoll
