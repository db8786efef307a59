// CPU transport over torch's ProcessGroupGloo point-to-point (send/recv on an
// unbound buffer per message). gloo does the networking, so this transport works
// between hosts; ringcoll only pairs the two halves of each step and bounds every
// wait by the group's timeout.
#pragma once

#include <chrono>

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include "transport/transport.h"

namespace ringcoll {

class GlooTransport final : public Transport {
 public:
  // `p2p`: a gloo process group over the same ranks (created by ringcoll/ on a
  // prefixed store). `tag`: the gloo tag all of ringcoll's messages use, so user
  // send/recv forwarded to the same group never match them.
  GlooTransport(c10::intrusive_ptr<c10d::Backend> p2p, std::chrono::milliseconds timeout,
                int tag);

  int rank() const override { return p2p_->getRank(); }
  int size() const override { return p2p_->getSize(); }
  const char* name() const override { return "gloo"; }

  std::unique_ptr<Pending> start(int toRank, const void* sendBuf, size_t sendBytes,
                                 int fromRank, void* recvBuf, size_t recvBytes) override;

 private:
  class GlooPending;
  c10::intrusive_ptr<c10d::Backend> p2p_;
  std::chrono::milliseconds timeout_;
  int tag_;
};

}  // namespace ringcoll
