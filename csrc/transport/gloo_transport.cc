#include "transport/gloo_transport.h"

#include <string>

#include "common/errors.h"

namespace ringcoll {

namespace {
// A uint8 tensor viewing caller memory; gloo's point-to-point takes tensors.
at::Tensor view(const void* ptr, size_t bytes) {
  return at::from_blob(const_cast<void*>(ptr), {static_cast<int64_t>(bytes)},
                       at::TensorOptions().dtype(at::kByte).device(at::kCPU));
}

bool looksLikeTimeout(const std::string& what) {
  return what.find("imed out") != std::string::npos ||
      what.find("imeout") != std::string::npos;
}
}  // namespace

class GlooTransport::GlooPending final : public Transport::Pending {
 public:
  GlooPending(GlooTransport& owner, int to, c10::intrusive_ptr<c10d::Work> send, int from,
              c10::intrusive_ptr<c10d::Work> recv)
      : owner_(owner), to_(to), from_(from), send_(std::move(send)), recv_(std::move(recv)) {}

  void wait() override {
    // Receive first: a missing peer shows up as the receive that never arrives.
    finish(recv_, from_, "receive from");
    finish(send_, to_, "send to");
  }

 private:
  void finish(c10::intrusive_ptr<c10d::Work>& work, int peer, const char* what) {
    if (!work) return;
    owner_.waitingFor_.store(peer, std::memory_order_relaxed);
    try {
      work->wait(owner_.timeout_);
    } catch (const std::exception& e) {
      owner_.waitingFor_.store(-1, std::memory_order_relaxed);
      const std::string msg = e.what();
      const bool timedOut = looksLikeTimeout(msg);
      throw PeerError(peer,
                      RC_STR(timedOut ? "timed out after " : "failed after ",
                             owner_.timeout_.count(), " ms timeout: ", what, " rank ",
                             peer, " (gloo: ", msg.substr(0, msg.find('\n')), ")"),
                      timedOut);
    }
    owner_.waitingFor_.store(-1, std::memory_order_relaxed);
    work.reset();
  }

  GlooTransport& owner_;
  int to_;
  int from_;
  c10::intrusive_ptr<c10d::Work> send_;
  c10::intrusive_ptr<c10d::Work> recv_;
};

GlooTransport::GlooTransport(c10::intrusive_ptr<c10d::Backend> p2p,
                             std::chrono::milliseconds timeout, int tag)
    : p2p_(std::move(p2p)), timeout_(timeout), tag_(tag) {
  RC_ASSERT(p2p_, "GlooTransport needs a point-to-point process group");
}

std::unique_ptr<Transport::Pending> GlooTransport::start(int toRank, const void* sendBuf,
                                                         size_t sendBytes, int fromRank,
                                                         void* recvBuf, size_t recvBytes) {
  c10::intrusive_ptr<c10d::Work> recv;
  c10::intrusive_ptr<c10d::Work> send;
  // Post the receive before the send so a peer's message always finds its buffer.
  if (fromRank >= 0 && recvBytes > 0) {
    std::vector<at::Tensor> t{view(recvBuf, recvBytes)};
    recv = p2p_->recv(t, fromRank, tag_);
  }
  if (toRank >= 0 && sendBytes > 0) {
    std::vector<at::Tensor> t{view(sendBuf, sendBytes)};
    send = p2p_->send(t, toRank, tag_);
  }
  return std::make_unique<GlooPending>(*this, toRank, std::move(send), fromRank,
                                       std::move(recv));
}

}  // namespace ringcoll
