#include "transport/gloo_transport.h"

#include <cstdlib>

#include "common/errors.h"

namespace ringcoll {

namespace {
// Staging buffers per peer: one being consumed while the next arrives.
constexpr size_t kStagingPerPeer = 2;

bool looksLikeTimeout(const std::string& what) {
  return what.find("imed out") != std::string::npos ||
      what.find("imeout") != std::string::npos;
}

std::string firstLine(const std::string& s) { return s.substr(0, s.find('\n')); }

// Posting on a pair gloo already knows is broken throws at once, on the calling
// thread: that is the same peer failure as one a lane sees later.
template <typename Post>
std::unique_ptr<MessagePort::Op> post(Post&& p, int peer, const char* what) {
  try {
    return p();
  } catch (const std::exception& e) {
    throw PeerError(peer, RC_STR(what, " rank ", peer, " failed (gloo: ", firstLine(e.what()),
                                 ")"), looksLikeTimeout(e.what()));
  }
}
}  // namespace

// The operations of one peer and direction, waited for in post order by a thread
// of their own.
class GlooTransport::Lane {
 public:
  Lane(Doorbell& bell, std::chrono::milliseconds timeout, int peer, const char* what)
      : bell_(bell), timeout_(timeout), peer_(peer), what_(what),
        thread_([this] { loop(); }) {}

  ~Lane() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
      for (auto& op : queue_) op->abort();
    }
    cv_.notify_all();
    thread_.join();
  }

  void push(std::unique_ptr<MessagePort::Op> op) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(op));
    }
    cv_.notify_one();
  }

  uint64_t completed() const { return completed_.load(std::memory_order_acquire); }

  // Throws PeerError once an operation of this lane failed.
  void check() {
    if (!failed_.load(std::memory_order_acquire)) return;
    std::lock_guard<std::mutex> lock(mutex_);
    throw PeerError(peer_, RC_STR(what_, " rank ", peer_, " failed (gloo: ", error_, ")"),
                    looksLikeTimeout(error_));
  }

 private:
  void loop() {
    for (;;) {
      MessagePort::Op* op;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (stopping_) return;
        op = queue_.front().get();
      }
      try {
        op->wait(timeout_);
      } catch (const std::exception& e) {
        const std::string msg = e.what();
        {
          std::lock_guard<std::mutex> lock(mutex_);
          error_ = firstLine(msg);
        }
        failed_.store(true, std::memory_order_release);
        bell_.ring();
        return;  // the lane is dead; the executor reports it
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        queue_.pop_front();
      }
      completed_.fetch_add(1, std::memory_order_release);
      bell_.ring();
    }
  }

  Doorbell& bell_;
  const std::chrono::milliseconds timeout_;
  const int peer_;
  const char* what_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<MessagePort::Op>> queue_;
  bool stopping_ = false;
  std::atomic<uint64_t> completed_{0};
  std::atomic<bool> failed_{false};
  std::string error_;
  std::thread thread_;  // last: starts once everything above exists
};

GlooTransport::GlooTransport(std::shared_ptr<MessagePort> port, Doorbell* bell,
                             size_t slotBytes, std::chrono::milliseconds timeout)
    : port_(std::move(port)), slotBytes_(slotBytes), timeout_(timeout) {
  RC_ASSERT(port_, "GlooTransport needs a message port");
  if (bell == nullptr) {
    // gloo messages take tens of microseconds at least: sleep at once, no spinning.
    ownBell_ = std::make_unique<Doorbell>(&ownWord_, /*shared=*/false, WaitPolicy{});
    bell = ownBell_.get();
  }
  bell_ = bell;
  peers_.resize(static_cast<size_t>(port_->size()));
}

GlooTransport::~GlooTransport() {
  bool pendingRecvs = false;
  for (auto& pr : peers_) {
    pr.sends.reset();
    if (pr.recvs && pr.recvs->completed() < pr.consumed + pr.posted.size()) pendingRecvs = true;
    pr.recvs.reset();
  }
  // After a failure gloo may still hold receives posted into staging: keep that
  // memory (a few segments) rather than let gloo write into freed memory.
  if (!pendingRecvs) {
    for (void* p : staging_) std::free(p);
  }
}

GlooTransport::Lane& GlooTransport::lane(std::unique_ptr<Lane>& slot, int peer,
                                         const char* what) {
  // A gloo wait that times out closes its pair, which the peer then sees as a
  // failure of this rank; ringcoll's own timeout (the executor's, counted from the
  // last progress) must come first, so the lanes wait four times as long.
  if (!slot) slot = std::make_unique<Lane>(*bell_, 4 * timeout_, peer, what);
  return *slot;
}

bool GlooTransport::trySend(int peer, const void* src, size_t bytes) {
  Lane& l = lane(peers_[peer].sends, peer, "send to");
  l.check();
  l.push(post([&] { return port_->send(peer, src, bytes); }, peer, "send to"));
  return true;
}

uint64_t GlooTransport::sendsDone(int peer) {
  auto& l = peers_[peer].sends;
  if (!l) return 0;
  l->check();
  return l->completed();
}

bool GlooTransport::tryPostRecv(int peer, void* dst, size_t bytes) {
  RC_ASSERT(bytes <= slotBytes_, "message of ", bytes, " bytes > slot ", slotBytes_);
  Peer& pr = peers_[peer];
  Lane& l = lane(pr.recvs, peer, "receive from");
  l.check();
  bool staged = false;
  if (dst == nullptr) {
    if (pr.freeStaging.empty()) {
      if (pr.stagingCount >= kStagingPerPeer) return false;
      void* buf = std::aligned_alloc(64, (slotBytes_ + 63) / 64 * 64);
      RC_ASSERT(buf != nullptr, "staging allocation of ", slotBytes_, " bytes");
      staging_.push_back(buf);
      ++pr.stagingCount;
      pr.freeStaging.push_back(buf);
    }
    dst = pr.freeStaging.back();
    pr.freeStaging.pop_back();
    staged = true;
  }
  l.push(post([&] { return port_->recv(peer, dst, bytes); }, peer, "receive from"));
  pr.posted.push_back(Posted{dst, staged});
  return true;
}

const void* GlooTransport::recvView(int peer) {
  Peer& pr = peers_[peer];
  if (pr.posted.empty()) return nullptr;
  if (pr.recvs->completed() > pr.consumed) return pr.posted.front().ptr;
  pr.recvs->check();
  return nullptr;
}

void GlooTransport::releaseRecv(int peer) {
  Peer& pr = peers_[peer];
  RC_ASSERT(!pr.posted.empty(), "release without a receive from rank ", peer);
  if (pr.posted.front().staged) pr.freeStaging.push_back(pr.posted.front().ptr);
  pr.posted.pop_front();
  ++pr.consumed;
}

}  // namespace ringcoll
