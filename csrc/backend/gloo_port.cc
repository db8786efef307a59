#include "backend/gloo_port.h"

#include <vector>

namespace ringcoll {

namespace {
// A uint8 tensor viewing caller memory; gloo's point-to-point takes tensors.
at::Tensor view(const void* ptr, size_t bytes) {
  return at::from_blob(const_cast<void*>(ptr), {static_cast<int64_t>(bytes)},
                       at::TensorOptions().dtype(at::kByte).device(at::kCPU));
}

class GlooOp final : public MessagePort::Op {
 public:
  explicit GlooOp(c10::intrusive_ptr<c10d::Work> work) : work_(std::move(work)) {}
  // gloo's wait returns false, without throwing, once abort() (below) was called;
  // only a lane's destructor aborts, and nothing reads the lane after that.
  void wait(std::chrono::milliseconds timeout) override { work_->wait(timeout); }
  void abort() override { work_->abort(); }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
};

class GlooPort final : public MessagePort {
 public:
  GlooPort(c10::intrusive_ptr<c10d::Backend> gloo, int tag) : gloo_(std::move(gloo)), tag_(tag) {}
  int rank() const override { return gloo_->getRank(); }
  int size() const override { return gloo_->getSize(); }
  std::unique_ptr<Op> send(int peer, const void* buf, size_t bytes) override {
    std::vector<at::Tensor> t{view(buf, bytes)};
    return std::make_unique<GlooOp>(gloo_->send(t, peer, tag_));
  }
  std::unique_ptr<Op> recv(int peer, void* buf, size_t bytes) override {
    std::vector<at::Tensor> t{view(buf, bytes)};
    return std::make_unique<GlooOp>(gloo_->recv(t, peer, tag_));
  }

 private:
  c10::intrusive_ptr<c10d::Backend> gloo_;
  int tag_;
};
}  // namespace

std::shared_ptr<MessagePort> makeGlooPort(c10::intrusive_ptr<c10d::Backend> gloo, int tag) {
  return std::make_shared<GlooPort>(std::move(gloo), tag);
}

void StoreRendezvous::set(const std::string& key, const std::string& value) {
  store_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
}

std::string StoreRendezvous::get(const std::string& key) {
  const std::vector<uint8_t> v = store_->get(key);
  return std::string(v.begin(), v.end());
}

}  // namespace ringcoll
