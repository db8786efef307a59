// The point-to-point c10d API of RingcollBackend over its P2PEngine
// (engine/p2p.h): send, recv, recv from any source; start/endCoalescing, which
// torch's batch_isend_irecv uses once a backend supports coalescing; and
// monitoredBarrier, built from the same messages on a channel of its own.
//
// Point-to-point Works are numbered apart from the collectives (a send has no
// counterpart on the ranks it does not involve, and the collectives' sequence
// numbers must agree on every rank): "ringcoll::recv #3 (rank 0 of 2)" is this
// rank's third point-to-point call.
//
// CUDA tensors (and CPU tensors under RINGCOLL_TRANSPORT=stream, the emulation CI
// runs) go over a stream path of their own (stream_path.h) with NCCL's semantics
// instead of the engine's: a send or recv is one job of one step, its transfers
// enqueued as one batch (one NCCL group) on the path's streams; a
// batch_isend_irecv (the calls between startCoalescing and endCoalescing) is one
// job, so that sends and receives that need each other run together. Messages
// between two ranks pair in call order, as NCCL's do: a tag does not reorder them.
// With the fingerprint on (the emulation's default; RINGCOLL_GPU_FINGERPRINT on
// CUDA) each pair of ranks exchanges a header per job, compared on the device, so
// calls that disagree (sizes, tags, a send matched by a send, one side batching
// differently) raise "ranks disagree about point-to-point call #k" naming both
// instead of pairing wrong bytes. There is no receive from any source (NCCL has
// none) and no message to oneself.
#include <Python.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "backend/api_helpers.h"
#include "backend/backend.h"
#include "backend/checks.h"
#include "backend/cpu_stream_device.h"
#include "backend/work.h"
#ifdef RINGCOLL_WITH_CUDA
#include "backend/cuda_device.h"
#endif

namespace ringcoll {

namespace {
// The Work's error: "<label>: <what happened>", a DistBackendError.
std::exception_ptr labelled(const CallLabel& label, const std::string& what) {
  try {
    C10_THROW_ERROR(DistBackendError, c10::str(label, ": ", what));
  } catch (...) {
    return std::current_exception();
  }
}

// A blocking request for monitoredBarrier: the engine completes it (success,
// failure, or "Timed out" after its timeout), so waiting for it never hangs.
struct Pending {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  P2PEngine::Result result;
  std::string payload;  // a send's bytes, alive until it completed

  P2PEngine::Result wait() {
    // The progress thread may need the GIL (dropping the last reference to a
    // Python-owned tensor of another request): never wait holding it.
    auto block = [this] {
      std::unique_lock<std::mutex> lock(mutex);
      cv.wait(lock, [this] { return done; });
    };
    if (Py_IsInitialized() && PyGILState_Check()) {
      Py_BEGIN_ALLOW_THREADS
      block();
      Py_END_ALLOW_THREADS
    } else {
      block();
    }
    std::lock_guard<std::mutex> lock(mutex);
    return result;
  }
};

std::shared_ptr<Pending> postControl(P2PEngine& engine, bool send, int peer, int64_t tag,
                                     std::string payload, std::chrono::milliseconds timeout) {
  auto p = std::make_shared<Pending>();
  p->payload = std::move(payload);
  P2PEngine::Request r;
  r.send = send;
  r.peer = peer;
  r.channel = P2PEngine::Channel::kMonitoredBarrier;
  r.tag = tag;
  r.buf = p->payload.data();
  r.bytes = send ? p->payload.size() : 0;
  r.anySize = !send && peer == 0;  // releases carry rank 0's verdict
  r.timeout = timeout;
  r.done = [p](P2PEngine::Result& res) {
    std::lock_guard<std::mutex> lock(p->mutex);
    p->result = std::move(res);
    p->done = true;
    p->cv.notify_all();
  };
  engine.post(std::move(r));
  return p;
}

std::string joinRanks(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}
}  // namespace

c10::intrusive_ptr<c10d::Work> RingcollBackend::send(std::vector<at::Tensor>& tensors,
                                                     int dstRank, int tag) {
  return postPointToPoint("send", c10d::OpType::SEND, tensors, dstRank, tag);
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::recv(std::vector<at::Tensor>& tensors,
                                                     int srcRank, int tag) {
  return postPointToPoint("recv", c10d::OpType::RECV, tensors, srcRank, tag);
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::recvAnysource(
    std::vector<at::Tensor>& tensors, int tag) {
  return postPointToPoint("recv", c10d::OpType::RECVANYSOURCE, tensors, P2PEngine::kAnySource,
                          tag);
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::postPointToPoint(
    const char* op, c10d::OpType type, std::vector<at::Tensor>& tensors, int peer, int tag) {
  const bool isSend = type == c10d::OpType::SEND;
  at::Tensor t = checks::single(op, tensors, "tensor");
  const bool onStream = t.is_cuda() || knobs_.transport == "stream";
  if (!onStream) checks::cpuOnly(op, t, "tensor");
  TORCH_CHECK(t.layout() == at::kStrided, "ringcoll::", op, ": tensor has layout ", t.layout(),
              "; only dense tensors can be sent or received");
  if (peer != P2PEngine::kAnySource) {
    TORCH_CHECK(peer >= 0 && peer < getSize(), "ringcoll::", op, ": ",
                isSend ? "destination" : "source", " rank ", peer, " is not a rank of this ",
                getSize(), "-rank group");
  }
  const uint64_t seq = ++p2pSeq_;
  const CallLabel label{op, seq, getRank(), getSize()};
  throwIfStopped(label);
  // The engine reads or writes contiguous memory: a non-contiguous tensor goes
  // through a copy (back into the tensor once received).
  at::Tensor flat = t.contiguous();
  if (onStream) {
    const std::string where =
        t.is_cuda() ? std::string("CUDA tensors") : std::string("RINGCOLL_TRANSPORT=stream");
    TORCH_CHECK(peer != P2PEngine::kAnySource, "ringcoll::", op, ": receiving from any source ",
                "is not supported for ", where, " (NCCL has no such receive): name the source "
                "rank");
    TORCH_CHECK(peer != getRank(), "ringcoll::", op, ": ", isSend ? "destination" : "source",
                " rank ", peer, " is this rank; ", where, " do not send to themselves");
    StreamMessage m;
    m.send = isSend;
    m.peer = peer;
    m.tag = tag;
    m.tensor = t;
    m.flat = flat;
    {
      std::lock_guard<Mutex> lock(coalesceMutex_);
      if (coalescing_) {
        // Sent with the rest of the block at endCoalescing; this Work completes
        // with that job's (torch's batch_isend_irecv waits for that one).
        auto work = c10::make_intrusive<RingcollWork>(
            getRank(), type, label, seq, timeout_, std::vector<at::Tensor>{},
            [] { return std::string("it was waiting for its coalesced batch"); });
        streamBatch_.push_back(std::move(m));
        streamBatchWorks_.push_back(work);
        return work;
      }
    }
    return launchStreamMessages(type, label, seq, {std::move(m)});
  }
  refuseUnderCapture(label, "it runs on a host transport");
  const std::string whom =
      isSend ? c10::str("it was sending to rank ", peer, " (tag ", tag, ")")
             : c10::str("it was waiting for a message from ",
                        peer == P2PEngine::kAnySource ? std::string("any rank")
                                                      : c10::str("rank ", peer),
                        " (tag ", tag, ")");
  auto work = c10::make_intrusive<RingcollWork>(
      getRank(), type, label, seq, timeout_,
      isSend ? std::vector<at::Tensor>{} : std::vector<at::Tensor>{t},
      [whom] { return whom; });
  P2PEngine::Request r;
  r.send = isSend;
  r.peer = peer;
  r.tag = tag;
  r.buf = flat.numel() ? flat.data_ptr() : nullptr;
  r.bytes = bytesOf(flat);
  r.timeout = timeout_;
  // Holds both tensors until the engine is done with their memory. It runs on the
  // engine's progress thread (or a caller's, once stopped): the Work's future's
  // callbacks go to the callback threads, since one may wait for another request
  // that thread must serve (common/callbacks.h). Weak: the runner is the backend's,
  // joined by stop(), and only ever destroyed there.
  std::weak_ptr<CallbackRunner> callbacks = callbacks_;
  r.done = [work, t, flat, label, isSend, callbacks](P2PEngine::Result& res) mutable {
    std::shared_ptr<CallbackRunner> runner = callbacks.lock();
    if (!res.error.empty()) {
      work->finishWithError(labelled(label, res.error), runner.get());
      return;
    }
    work->setSourceRank(res.source);
    try {
      if (!isSend && !flat.is_same(t)) t.copy_(flat);
    } catch (...) {
      work->finishWithError(std::current_exception(), runner.get());
      return;
    }
    work->finish(runner.get());
  };
  pointToPoint_->post(std::move(r));
  noteCoalesced(work);
  return work;
}

// ---------------------------------------------------------------------------------
// Point-to-point on a stream path (see the top of this file).

std::shared_ptr<StreamPath> RingcollBackend::pointToPointPathFor(const at::Tensor& t,
                                                                 const char* op,
                                                                 const CallLabel& label) {
  // A communicator of its own (its id under a prefix of its own), so that messages
  // between two ranks never pair with a collective's; made at the first call, which
  // every rank of the group must make (as NCCL's point-to-point communicator).
  auto pstore = c10::make_intrusive<c10d::PrefixStore>(
      t.is_cuda() ? "ringcoll/p2p" : "ringcoll/user-p2p-stream", store_);
  if (!t.is_cuda()) {
    TORCH_CHECK(p2pStreamHost_, "ringcoll::", op, ": no point-to-point stream path");
    return lazyPath(p2pStream_, label, [this, pstore](const Stopping& stopping) {
      emulateCommInit("ringcoll/stream-comm/p2p", *pstore, stopping);
      auto device = std::make_shared<CpuStreamDevice>(*p2pStreamHost_, knobs_.chunkBytes,
                                                      knobs_.streamDelayUs, 0,
                                                      knobs_.stopLatchBytes,
                                                      knobs_.maxBatchesInFlight);
      auto path = std::make_shared<StreamPath>(std::move(device), pstore, getRank(), getSize(),
                                               knobs_, std::vector<int>{}, knobs_.fingerprint);
      path->setEmulatedCapture(capture_);
      return path;
    });
  }
#ifdef RINGCOLL_WITH_CUDA
  const c10::DeviceIndex index = t.device().index();
  checkCudaIndex(op, index);
  return lazyPath(p2pCuda_, label, [this, pstore, index](const Stopping& stopping) {
    auto device = std::make_shared<CudaDevice>(pstore, getRank(), getSize(), timeout_,
                                               knobs_.gpuChunkBytes, index, nullptr,
                                               knobs_.ncclBlocking, /*connectAll=*/false,
                                               knobs_.stopLatchBytes, knobs_.maxBatchesInFlight,
                                               stopping);
    return std::make_shared<StreamPath>(std::move(device), pstore, getRank(), getSize(), knobs_,
                                        std::vector<int>{},
                                        knobs_.fingerprint && knobs_.gpuFingerprint);
  });
#else
  (void)label;
  TORCH_CHECK(false, "ringcoll::", op, ": this ringcoll build has no CUDA support");
#endif
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::launchStreamMessages(
    c10d::OpType type, const CallLabel& label, uint64_t seq,
    std::vector<StreamMessage> messages) {
  const char* op = type == c10d::OpType::SEND ? "send"
                   : type == c10d::OpType::RECV ? "recv" : "coalesced";
  const at::Tensor& first = messages.front().tensor;
  for (const auto& m : messages) {
    TORCH_CHECK(m.tensor.device() == first.device(), "ringcoll::", op, ": a batch holds ",
                "tensors on ", first.device(), " and on ", m.tensor.device(),
                "; one batch runs on one device");
  }
  std::shared_ptr<StreamPath> path = pointToPointPathFor(first, op, label);
  // A lone receive's future holds its tensor; a batch's (batch_isend_irecv) holds
  // none, as ProcessGroupNCCL's coalesced Work and the host path's batch Work. The
  // inputs keep every tensor the device touches alive either way.
  std::vector<at::Tensor> inputs, outputs;
  for (const auto& m : messages) {
    inputs.push_back(m.flat);  // read or written by the device until the end
    if (!m.send && type != c10d::OpType::COALESCED) outputs.push_back(m.tensor);
  }
  std::vector<uint64_t>* pairSeq = &pairSeq_[first.is_cuda() ? 1 : 0];
  const int me = getRank();
  const int p = getSize();
  Body body = [messages, pairSeq, me, p](algo::Executor&) {
    Staged staged;
    algo::Job& job = staged.job;
    job.schedule.name = "p2p";
    job.dtype = DType::kUInt8;
    // One step: every message is one transfer of its bytes, in a region of its own
    // (the offsets are only names for the regions).
    algo::Step step;
    size_t offset = 0;
    for (const auto& m : messages) {
      const size_t bytes = bytesOf(m.flat);
      if (bytes == 0) continue;
      step.transfers.push_back({m.send ? algo::Kind::kSend : algo::Kind::kRecvCopy, m.peer,
                                algo::Range{offset, offset + bytes}});
      job.regions.push_back({offset, offset + bytes, m.flat.data_ptr()});
      offset += bytes;
    }
    if (!step.transfers.empty()) job.schedule.steps.push_back(std::move(step));
    job.n = offset;
    // Each pair of ranks makes a call of its own: the header to peer q describes
    // the messages between this rank and q only, both ways, so that q computes the
    // same bytes from its side. Its peers also get a header when no byte moves.
    job.peerFingerprints.assign(static_cast<size_t>(p), algo::Fingerprint{});
    for (const auto& m : messages) {
      if (std::find(job.neighbours.begin(), job.neighbours.end(), m.peer) != job.neighbours.end()) {
        continue;
      }
      job.neighbours.push_back(m.peer);
      const int q = m.peer;
      algo::Fingerprint& fp = job.peerFingerprints[q];
      fp.method = algo::Method::kPointToPoint;
      fp.pairwise = 1;
      fp.rank = me;
      fp.seq = ++(*pairSeq)[q];
      fp.setAlgorithm("p2p");
      // Both directions, the lower rank's sends first: the same list on both sides.
      algo::LayoutDigest digest;
      for (const bool fromLower : {true, false}) {
        digest.add(fromLower ? 0x10 : 0x20);
        for (const auto& n : messages) {
          if (n.peer != q || n.send != (fromLower == (me < q))) continue;
          digest.add(bytesOf(n.flat));
          digest.add(static_cast<uint64_t>(static_cast<int64_t>(n.tag)));
        }
      }
      fp.layout = digest.value();
      for (const auto& n : messages) {
        if (n.peer != q) continue;
        (n.send ? fp.count : fp.countBack) += bytesOf(n.flat);
      }
    }
    // A non-contiguous receiving tensor gets its bytes once they arrived, on the
    // compute stream after the job.
    std::vector<std::pair<at::Tensor, at::Tensor>> copies;
    for (const auto& m : messages) {
      if (!m.send && !m.flat.is_same(m.tensor)) copies.emplace_back(m.tensor, m.flat);
    }
    if (!copies.empty()) {
      staged.finish = [copies]() mutable {
        for (auto& [t, flat] : copies) t.copy_(flat);
      };
    }
    return staged;
  };
  algo::Fingerprint fp;  // the job's headers are its peerFingerprints
  fp.method = algo::Method::kPointToPoint;
  fp.seq = seq;
  fp.rank = me;
  // Whom it waits for, for its errors (the path has no ring neighbours to name).
  std::string whom;
  for (const auto& m : messages) {
    whom += c10::str(whom.empty() ? "" : ", ", "rank ", m.peer, " (", m.send ? "send" : "receive",
                     ", tag ", m.tag, ")");
  }
  return path->launch(type, traceTag(op, seq), label, seq, fp, timeout_, inputs,
                      std::move(outputs), body, whom);
}

// ---------------------------------------------------------------------------------
// Coalescing. torch's batch_isend_irecv, on a backend that supports coalescing,
// calls startCoalescing, the sends and receives, then endCoalescing, and waits for
// the one Work that returns. Every call in between (point-to-point or collective)
// still runs as it would alone; the coalesced Work completes once they all did,
// with the first error if any failed.

namespace {

// "it was waiting for 2 of 3 coalesced operations: ringcoll::recv #4 (rank 0 of 3),
// which was waiting for a message from rank 2 (tag 0); ...".
std::string describeUnfinished(const std::vector<c10::weak_intrusive_ptr<c10d::Work>>& parts) {
  std::string text;
  size_t unfinished = 0;
  for (const auto& weak : parts) {
    c10::intrusive_ptr<c10d::Work> w = weak.lock();
    if (!w || w->isCompleted()) continue;
    ++unfinished;
    text += unfinished == 1 ? ": " : "; ";
    if (auto* own = dynamic_cast<RingcollWork*>(w.get())) {
      std::string whom = own->describeWait();
      // "it was waiting for ..." reads "which was waiting for ..." after the label.
      if (whom.rfind("it ", 0) == 0) whom = "which " + whom.substr(3);
      text += c10::str(own->label(), whom.empty() ? "" : ", ", whom);
    } else {
      text += c10::str(c10d::opTypeToString(w->retrieveOpType()), " #",
                       w->getSequencenumber());
    }
  }
  return c10::str("it was waiting for ", unfinished, " of ", parts.size(), " coalesced operations",
                  text);
}

}  // namespace

void RingcollBackend::noteCoalesced(const c10::intrusive_ptr<c10d::Work>& work) {
  if (!coalescingNow_.load(std::memory_order_acquire)) return;  // the common case: no lock
  std::lock_guard<Mutex> lock(coalesceMutex_);
  if (coalescing_) coalesced_.push_back(work);
}

void RingcollBackend::startCoalescing() {
  // Left from a block that never ended: let go after the lock (common/locks.h).
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  std::vector<StreamMessage> batch;
  std::vector<c10::intrusive_ptr<RingcollWork>> batchWorks;
  std::lock_guard<Mutex> lock(coalesceMutex_);
  TORCH_CHECK(!coalescing_, "ringcoll::startCoalescing: already coalescing (no endCoalescing "
                            "since the last startCoalescing)");
  coalescing_ = true;
  coalescingNow_.store(true, std::memory_order_release);
  works.swap(coalesced_);
  batch.swap(streamBatch_);
  batchWorks.swap(streamBatchWorks_);
}

c10::intrusive_ptr<c10d::Work> RingcollBackend::endCoalescing() {
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  std::vector<StreamMessage> batch;
  std::vector<c10::intrusive_ptr<RingcollWork>> batchWorks;
  {
    std::lock_guard<Mutex> lock(coalesceMutex_);
    TORCH_CHECK(coalescing_, "ringcoll::endCoalescing: called without startCoalescing");
    coalescing_ = false;
    coalescingNow_.store(false, std::memory_order_release);
    works.swap(coalesced_);
    batch.swap(streamBatch_);
    batchWorks.swap(streamBatchWorks_);
  }
  const uint64_t seq = ++p2pSeq_;
  const CallLabel label{"coalesced", seq, getRank(), getSize()};
  if (!batch.empty()) {
    c10::intrusive_ptr<c10d::Work> job;
    try {
      job = launchStreamMessages(c10d::OpType::COALESCED, label, seq, std::move(batch));
    } catch (...) {
      for (auto& w : batchWorks) w->finishWithError(std::current_exception());
      throw;
    }
    job->getFuture()->addCallback([batchWorks](c10::ivalue::Future& f) {
      for (auto& w : batchWorks) {
        if (f.hasError()) {
          w->finishWithError(f.exception_ptr());
        } else {
          w->finish();
        }
      }
    });
    // The job's own Work, when it is all there is: on CUDA its wait() orders the
    // caller's stream after the transfers, which a Work made of futures cannot.
    if (works.empty()) return job;
    works.push_back(job);
  }
  const size_t count = works.size();
  // On timeout it names each operation still unfinished and whom that one waits
  // for (its own timeout's text), so the error names the peer as a lone call's
  // does. Weak: the operations' futures hold `all` through their callbacks.
  std::vector<c10::weak_intrusive_ptr<c10d::Work>> parts(works.begin(), works.end());
  auto all = c10::make_intrusive<RingcollWork>(
      getRank(), c10d::OpType::COALESCED, label, seq, timeout_, std::vector<at::Tensor>{},
      [parts] { return describeUnfinished(parts); });
  if (works.empty()) {
    all->finish();
    return all;
  }
  struct Countdown {
    std::mutex mutex;
    size_t left;
    std::exception_ptr first;
  };
  auto state = std::make_shared<Countdown>();
  state->left = count;
  for (auto& w : works) {
    w->getFuture()->addCallback([state, all](c10::ivalue::Future& f) {
      bool last;
      std::exception_ptr error;
      {
        std::lock_guard<std::mutex> lock(state->mutex);
        if (f.hasError() && !state->first) state->first = f.exception_ptr();
        last = --state->left == 0;
        error = state->first;
      }
      if (!last) return;
      if (error) {
        all->finishWithError(error);
      } else {
        all->finish();
      }
    });
  }
  return all;
}

// ---------------------------------------------------------------------------------
// monitoredBarrier: every other rank sends rank 0 an arrival, then waits for rank
// 0's release; rank 0 waits for the arrivals within the timeout, in rank order, and
// releases everybody, or names the ranks that did not arrive (the first one, or
// with waitAllRanks every one) and sends its verdict to the ranks that arrived so
// that they raise too instead of waiting out their timeout. The messages go on a
// channel of their own, all with one tag, as gloo's do: a rank that skips a call
// (or reaches it after rank 0 gave up) is counted at rank 0's next call, and no
// message is ever left for a rank that did not arrive.

void RingcollBackend::monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) {
  const uint64_t call = ++monitoredSeq_;
  const CallLabel label{"monitored_barrier", call, getRank(), getSize()};
  throwIfStopped(label);
  refuseUnderCapture(label, "it waits on the host for every rank");
  TORCH_CHECK(!cudaCapturing(), label, ": cannot be captured into a CUDA graph: it waits on "
              "the host for every rank, which a replay does not repeat");
  const auto timeout = opts.timeout.count() >= 0 ? opts.timeout : timeout_;
  const int p = getSize();
  const int me = getRank();
  if (p == 1) return;
  constexpr int64_t tag = 0;
  P2PEngine& engine = *pointToPoint_;

  if (me != 0) {
    // Rank 0 may take the whole timeout to decide before it answers: wait for its
    // answer twice as long, so that a verdict is not left for the next call.
    auto arrival = postControl(engine, true, 0, tag, "", 2 * timeout);
    auto release = postControl(engine, false, 0, tag, "", 2 * timeout);
    P2PEngine::Result res = release.get()->wait();
    std::string why = res.error;
    if (why.empty() && !res.data.empty()) {
      why = "rank 0 reported: " + std::string(res.data.begin(), res.data.end());
    }
    if (!why.empty()) {
      C10_THROW_ERROR(DistBackendError,
                      c10::str(label, ": Rank ", me, " successfully reached monitoredBarrier, "
                               "but received errors while waiting for send/recv from rank 0: ",
                               why));
    }
    arrival->wait();  // delivered: rank 0 released us after it
    return;
  }

  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout;
  std::vector<std::shared_ptr<Pending>> arrivals(static_cast<size_t>(p));
  for (int r = 1; r < p; ++r) arrivals[r] = postControl(engine, false, r, tag, "", timeout);
  std::string verdict;
  std::vector<int> missing;
  std::string details;
  for (int r = 1; r < p; ++r) {
    bool arrivedAlready;
    {
      std::lock_guard<std::mutex> lock(arrivals[r]->mutex);
      arrivedAlready = arrivals[r]->done && arrivals[r]->result.error.empty();
    }
    if (!waitAllRanks && !arrivedAlready && Clock::now() >= deadline) {
      // The time ran out before this rank was even looked at (timeout 0, or
      // earlier ranks came just in time): rank 0 is the one that timed out.
      std::vector<int> arrived;
      for (int q = 1; q < r; ++q) arrived.push_back(q);
      verdict = c10::str("Rank 0 timed out in monitoredBarrier after ", timeout.count(),
                         " ms: Timed out before rank ", r, " was checked (ranks that "
                         "arrived: ", arrived.empty() ? "none" : joinRanks(arrived), ")");
      break;
    }
    const P2PEngine::Result res = arrivals[r]->wait();
    if (res.error.empty()) continue;
    const std::string what =
        res.timedOut ? std::string("Timed out waiting for its arrival") : res.error;
    if (!waitAllRanks) {
      verdict = c10::str("Rank ", r, " failed to pass monitoredBarrier in ", timeout.count(),
                         " ms: ", what);
      break;
    }
    missing.push_back(r);
    if (!res.timedOut) details += c10::str("; rank ", r, ": ", res.error);
  }
  if (waitAllRanks && !missing.empty()) {
    verdict = c10::str("Ranks ", joinRanks(missing), " failed to pass monitoredBarrier in ",
                       timeout.count(), " ms: Timed out waiting for their arrival", details);
  }
  // The release (empty) or the verdict, to every rank whose arrival came: they
  // wait for it. A rank whose arrival did not come gets nothing, so nothing is left
  // over for a later call (an arrival that comes after this still meets this
  // call's receive; that rank then times out waiting for its release). Not waited
  // for: delivery is the engine's (destroy_process_group lets pending sends finish).
  for (int r = 1; r < p; ++r) {
    bool arrived;
    {
      std::lock_guard<std::mutex> lock(arrivals[r]->mutex);
      arrived = arrivals[r]->done && arrivals[r]->result.error.empty();
    }
    if (arrived) postControl(engine, true, r, tag, verdict, timeout_);
  }
  if (!verdict.empty()) C10_THROW_ERROR(DistBackendError, c10::str(label, ": ", verdict));
}

}  // namespace ringcoll
