#include "engine/topology.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>

#include "common/errors.h"
#include "transport/gloo_transport.h"
#include "transport/shm_transport.h"

namespace ringcoll {

std::string thisHost() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  return RC_STR(name, "/", boot);
}

namespace {
// "<agreed>\n<host>\n<probe>" (knob values and host names hold no newline).
std::vector<std::string> splitLines(const std::string& v) {
  std::vector<std::string> out;
  size_t b = 0;
  for (size_t nl; (nl = v.find('\n', b)) != std::string::npos; b = nl + 1) {
    out.push_back(v.substr(b, nl - b));
  }
  out.push_back(v.substr(b));
  return out;
}
}  // namespace

Topology exchangeTopology(Rendezvous& rv, int rank, int size, const std::string& host,
                          const std::string& agreed, bool probe) {
  // Round 1: what every rank must agree on, its host name, its /dev/shm probe.
  std::unique_ptr<ShmProbe> mine = probe ? std::make_unique<ShmProbe>() : nullptr;
  rv.set(RC_STR("ringcoll/host/", rank),
         RC_STR(agreed, "\n", host, "\n", mine ? mine->name() : std::string()));
  Topology t;
  std::vector<std::string> probes;
  for (int r = 0; r < size; ++r) {
    const auto v = splitLines(rv.get(RC_STR("ringcoll/host/", r)));
    RC_REQUIRE(v.size() == 3, "rank ", r, " published '", v[0],
               "...' (another version of ringcoll?)");
    RC_CHECK_ARG(v[0] == agreed, "ranks must use the same knobs: rank ", r, " has ", v[0],
                 " but rank ", rank, " has ", agreed);
    t.hostOf.push_back(v[1]);
    probes.push_back(v[2]);
  }
  if (probe) {
    // Round 2: a host is the ranks that share a /dev/shm, named after the lowest of
    // them (every rank of one /dev/shm finds the same lowest rank), whatever the
    // host names say.
    int lowest = rank;
    for (int r = 0; r < rank; ++r) {
      if (!probes[r].empty() && ShmProbe::reachable(probes[r])) {
        lowest = r;
        break;
      }
    }
    rv.set(RC_STR("ringcoll/shm-host/", rank),
           RC_STR(t.hostOf[lowest], " (/dev/shm of rank ", lowest, ")"));
    for (int r = 0; r < size; ++r) t.hostOf[r] = rv.get(RC_STR("ringcoll/shm-host/", r));
    // Every rank has probed once every rank published round 2: `mine` may go.
  }
  std::vector<std::string> hosts;  // in order of their lowest rank
  for (const auto& h : t.hostOf) {
    if (std::find(hosts.begin(), hosts.end(), h) == hosts.end()) hosts.push_back(h);
  }
  for (const auto& h : hosts) {
    for (int r = 0; r < size; ++r) {
      if (t.hostOf[r] == h) t.order.push_back(r);
    }
  }
  for (int r = 0; r < size; ++r) {
    if (t.hostOf[r] == t.hostOf[rank]) t.local.push_back(r);
  }
  return t;
}


std::unique_ptr<RoutedTransport> makeCpuTransport(
    const Topology& topo, const std::string& transport, Rendezvous& rv,
    std::shared_ptr<MessagePort> port, int rank, int size, size_t chunkBytes,
    std::chrono::milliseconds timeout, const WaitPolicy& wait) {
  if (transport == "shm") {
    for (int r = 0; r < size; ++r) {
      RC_CHECK_ARG(topo.hostOf[r] == topo.hostOf[rank], "RINGCOLL_TRANSPORT=shm but rank ",
                   r, " is on host '", topo.hostOf[r], "' and rank ", rank, " on host '",
                   topo.hostOf[rank], "' (use auto or gloo across hosts)");
    }
  }
  const bool useShm = transport != "gloo" && topo.local.size() > 1;
  std::vector<std::unique_ptr<Transport>> owned;
  ShmTransport* shm = nullptr;
  if (useShm) {
    auto s = std::make_unique<ShmTransport>(rv, rank, size, topo.local, chunkBytes, wait);
    shm = s.get();
    owned.push_back(std::move(s));
  }
  GlooTransport* gloo = nullptr;
  const bool anyRemote = static_cast<int>(topo.local.size()) < size;
  if (!useShm || anyRemote) {
    auto g = std::make_unique<GlooTransport>(port, shm ? &shm->doorbell() : nullptr,
                                             chunkBytes, timeout);
    gloo = g.get();
    owned.push_back(std::move(g));
  }
  std::vector<Transport*> byPeer(static_cast<size_t>(size), nullptr);
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    const bool local = topo.hostOf[r] == topo.hostOf[rank];
    byPeer[r] = useShm && local ? static_cast<Transport*>(shm) : gloo;
  }
  Transport* sleeper = shm ? static_cast<Transport*>(shm) : gloo;
  return std::make_unique<RoutedTransport>(rank, size, std::move(byPeer), sleeper,
                                           std::move(owned));
}

}  // namespace ringcoll
