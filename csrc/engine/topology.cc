#include "engine/topology.h"

#include <sched.h>
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

Topology exchangeTopology(Rendezvous& rv, int rank, int size, const std::string& host,
                          const std::string& agreed) {
  // One value per rank: "<agreed>\n<host>" (knob values hold no newline).
  rv.set(RC_STR("ringcoll/host/", rank), agreed + "\n" + host);
  Topology t;
  for (int r = 0; r < size; ++r) {
    if (r == rank) {
      t.hostOf.push_back(host);
      continue;
    }
    const std::string v = rv.get(RC_STR("ringcoll/host/", r));
    const size_t nl = v.find('\n');
    RC_REQUIRE(nl != std::string::npos, "rank ", r, " published '", v,
               "' (another version of ringcoll?)");
    RC_CHECK_ARG(v.compare(0, nl, agreed) == 0, "ranks must use the same knobs: rank ", r,
                 " has ", v.substr(0, nl), " but rank ", rank, " has ", agreed);
    t.hostOf.push_back(v.substr(nl + 1));
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
    if (t.hostOf[r] == host) t.local.push_back(r);
  }
  return t;
}

namespace {
int usableCores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
}
}  // namespace

std::unique_ptr<RoutedTransport> makeCpuTransport(
    const Topology& topo, const std::string& transport, Rendezvous& rv,
    std::shared_ptr<MessagePort> port, int rank, int size, size_t chunkBytes,
    std::chrono::milliseconds timeout) {
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
    auto s = std::make_unique<ShmTransport>(
        rv, rank, size, topo.local, chunkBytes,
        WaitPolicy::forRanksPerCore(static_cast<int>(topo.local.size()), usableCores()));
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
