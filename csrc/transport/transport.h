// The one transport interface. A transport moves bytes between the ranks of one
// group and knows nothing else: no chunks, no dtypes, no reduce ops.
//
// Messages between two ranks flow in post order, per direction: the k-th send from
// a to b is the k-th receive on b from a, so two ranks that walk the same schedule
// match every message without tags. Every verb is non-blocking; the executor calls
// them from one thread and, when nothing moved, sleeps in idle().
//
//   sends     trySend(peer, src, bytes)  the transport copies src before returning
//                                        (shared memory) or reads it until the send
//                                        completes (gloo, NCCL); false = no room yet
//             sendSlot / commitSlot      copying transports only: the caller writes
//                                        the message straight into the transport's
//                                        memory (receive-reduce-forward)
//             sendsDone(peer)            how many sends to peer no longer read their
//                                        source (monotonic)
//   receives  tryPostRecv(peer, dst, n)  announces the next receive from peer; with
//                                        dst the bytes may land there; false = no
//                                        room yet
//             recvView(peer)             the oldest announced receive from peer once
//                                        its bytes are there: a pointer to them (a
//                                        shared slot, a staging buffer, or dst),
//                                        else null; valid until releaseRecv(peer)
//             recvViewAny(peer, &got)    the same, whatever the message's size
//                                        (copying transports)
//   batching  flush()                    ends a batch of posts (NCCL: one group)
//             fence()                    stream-ordered transports: what the
//                                        executor does next to its memory outside a
//                                        receive (AVG's division) is ordered after
//                                        every transfer posted so far
//   waiting   idleToken(), idle(token, until)
//                                        idle returns once something may have moved
//                                        since the token was taken (a message came,
//                                        a slot freed, a send completed), or at
//                                        `until`; it spins briefly, then yields, then
//                                        sleeps, so ranks that outnumber the cores
//                                        still make progress.
//             wake()                     the one verb another thread may call: makes
//                                        a concurrent (or the next) idle() return,
//                                        for a thread that drives the transport and
//                                        must also see work queued from outside
//
// A transport's completion is either host-observed (shared memory, gloo: a view is
// returned once the bytes are in memory, a send is done once its source may be
// reused) or stream-ordered (NCCL: a view is returned as soon as the receive is
// enqueued and work on it is ordered after the transfer on the device; a send is
// done once enqueued). A stream-ordered transport runs each batch as one unit that
// must pair with the peers' batches, so the executor posts to it in waves, the
// same on every rank (engine/executor.h).
//
// A peer that failed (exited, closed its connection, sent a message of the wrong
// size) makes any verb throw PeerError naming it. Timeouts are the executor's.
//
// Implementations (one file each, parallel names):
//   shm_transport     ranks on one host: shared-memory mailboxes, receive views
//   gloo_transport    any two ranks: gloo point-to-point through a MessagePort
//   routed_transport  one transport per link: shared memory within a host, gloo
//                     between hosts
//   nccl_transport    CUDA memory: ncclSend/ncclRecv, stream-ordered
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace ringcoll {

class Transport {
 public:
  using Clock = std::chrono::steady_clock;

  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "shm", "gloo", "nccl"; a routed transport names its links ("shm+gloo").
  virtual std::string name() const = 0;

  virtual bool trySend(int peer, const void* src, size_t bytes) = 0;
  // Whether sends to peer copy into transport memory, so that sendSlot() can be
  // used to write a message in place.
  virtual bool copiesSends(int /*peer*/) const { return false; }
  virtual void* sendSlot(int /*peer*/, size_t /*bytes*/) { return nullptr; }
  virtual void commitSlot(int /*peer*/, size_t /*bytes*/) {}
  virtual uint64_t sendsDone(int peer) = 0;

  virtual bool tryPostRecv(int peer, void* dst, size_t bytes) = 0;
  virtual const void* recvView(int peer) = 0;
  // recvView, except that a message of another size than announced is returned
  // too, its size in *got, instead of failing: for a receiver that tells from the
  // message itself what its sender meant (a fingerprint header at its start,
  // engine/small.h). Only copying transports (shared memory) can; the others
  // return recvView's and leave *got as it was.
  virtual const void* recvViewAny(int peer, size_t* /*got*/) { return recvView(peer); }
  virtual void releaseRecv(int peer) = 0;

  virtual bool streamOrdered() const { return false; }
  virtual void flush() {}
  virtual void fence() {}
  virtual uint32_t idleToken() = 0;
  virtual void idle(uint32_t token, Clock::time_point until) = 0;
  // Thread-safe. Host transports ring their doorbell; NCCL is never idle-waited.
  virtual void wake() {}
};

}  // namespace ringcoll
