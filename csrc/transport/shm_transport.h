// Transport between ranks of one host through shared memory.
//
// Every rank owns one segment: a header (its doorbell, pid), and one mailbox per
// local peer that sends to it. A mailbox is a ring of kSlots slots of slotBytes;
// the sender copies a message into the next free slot (or writes it there in place:
// sendSlot/commitSlot), publishes it by bumping `written`, and rings the receiver's
// doorbell; the receiver hands the slot to the executor as the receive view (the
// reducer reads it in place, nothing is copied), then bumps `released` and rings
// the sender only if the ring was full. One copy per message, by the sender.
//
//   segment of rank r:  [header | mailbox from local peer 0 | ... ]  [slots ...]
//   mailbox:            written (sender's line) | released (receiver's line) | sizes
//
// Hygiene: segment names are "/ringcoll-<group token>-<rank>", the token random
// per process group, so a stale segment of a crashed job is never opened by a new
// one; created with O_EXCL and mode 0600 (a name taken by a file nobody holds the
// liveness lock of, left by a job that died during set-up, is replaced; one held
// is an error); every rank unlinks its own segment as
// soon as all its local peers have mapped it (the store says when), so after set-up
// nothing is left in /dev/shm even if a rank is killed with SIGKILL, and the
// memory goes away with the last process that maps it. Slots are sparse: pages are
// only used once a peer writes them.
//
// A peer that exits is noticed while waiting and reported, once, as PeerError
// naming it, instead of waiting out the timeout. Liveness is a record lock: every
// rank holds a write lock on its own segment's file for as long as its transport
// lives, and keeps a descriptor of each peer's segment; the kernel drops a lock
// when its process dies, so a peer whose lock is gone (F_GETLK, checked between
// sleeps) has exited. Unlike a pid, this works between PID namespaces (containers
// sharing /dev/shm with --ipc=host), and a process forked from a rank inherits no
// record lock, so a data loader worker that outlives its rank does not keep it
// "alive".
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/doorbell.h"
#include "transport/rendezvous.h"
#include "transport/transport.h"

namespace ringcoll {

class ShmTransport final : public Transport {
 public:
  static constexpr uint32_t kSlots = 4;

  // `local`: the ranks of this group on this host, this one included. Blocks until
  // every local rank has mapped every segment (through `rv`).
  ShmTransport(Rendezvous& rv, int rank, int size, const std::vector<int>& local,
               size_t slotBytes, WaitPolicy policy);
  ~ShmTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "shm"; }

  bool trySend(int peer, const void* src, size_t bytes) override;
  bool copiesSends(int) const override { return true; }
  void* sendSlot(int peer, size_t bytes) override;
  void commitSlot(int peer, size_t bytes) override;
  uint64_t sendsDone(int peer) override;
  bool tryPostRecv(int peer, void* dst, size_t bytes) override;
  const void* recvView(int peer) override;
  const void* recvViewAny(int peer, size_t* got) override;
  void releaseRecv(int peer) override;

  uint32_t idleToken() override { return bell_->token(); }
  void idle(uint32_t token, Clock::time_point until) override;
  void wake() override { bell_->ring(); }

  // The doorbell peers ring; other transports of the same backend ring it too.
  Doorbell& doorbell() { return *bell_; }
  // Throws PeerError if a local peer this rank still needs has exited: a receive
  // from it is posted whose message has not arrived, or a send to it waits for a
  // free slot. A peer that exited with nothing owed (a rank that left at the end of
  // a program, its last messages delivered) is reported only once something is
  // wanted from it. Each exit once (a caller that keeps using the transport for its
  // other peers, as point-to-point does, then learns of a second exit too).
  void checkPeers();

 private:
  struct Header;
  struct Mailbox;
  struct Segment {
    void* base = nullptr;
    size_t bytes = 0;
    Header* header() const { return static_cast<Header*>(base); }
  };
  struct Link {  // with one local peer
    int localIndex = -1;
    Segment seg;          // the peer's segment
    int fd = -1;   // the peer's segment, for its lock (-1 once the peer exited)
    int pid = 0;   // in the peer's own PID namespace: for messages only
    bool exitReported = false;
    bool sendBlocked = false;  // the last send to it found its ring full
    uint64_t written = 0;   // messages this rank published to the peer
    uint64_t consumed = 0;  // messages this rank released from the peer
    std::vector<size_t> expected;  // sizes of announced receives, oldest first
    size_t expectedHead = 0;
  };

  Mailbox* mailbox(const Segment& seg, int senderLocal) const;
  char* slot(const Segment& seg, int senderLocal, uint64_t seq) const;
  Link& link(int peer);

  const int rank_;
  const int size_;
  const size_t slotBytes_;
  size_t stride_ = 0;      // bytes between slots (page-aligned)
  size_t dataOffset_ = 0;  // first slot
  int localCount_ = 0;
  int myLocal_ = -1;
  std::string name_;
  int fd_ = -1;  // this rank's segment, holding its liveness lock
  Segment mine_;
  std::vector<Link> links_;         // by rank; localIndex < 0 for remote ranks
  std::unique_ptr<Doorbell> bell_;
  bool unlinked_ = false;
};

// Proof that two ranks share a /dev/shm (engine/topology.cc): a small file there
// named by a random token and holding it. A rank that can open another's probe
// and read its token back shares that rank's /dev/shm, whatever the host names
// say: two containers may share a host name and not /dev/shm, or share /dev/shm
// (docker --ipc=host) under different host names.
class ShmProbe {
 public:
  // Creates the file; on failure (no /dev/shm) name() is empty and no rank reaches it.
  ShmProbe();
  ~ShmProbe();  // removes it
  ShmProbe(const ShmProbe&) = delete;
  ShmProbe& operator=(const ShmProbe&) = delete;
  const std::string& name() const { return name_; }
  // Whether this process can open the probe called `name` and read its token.
  static bool reachable(const std::string& name);

 private:
  std::string name_;
};

// Tests only: names every group's segments created from now on by `token` instead of
// a random one (0: random again), so that a test can place stale files where a
// group will create its segments.
void setShmTokenForTests(uint64_t token);

}  // namespace ringcoll
