// What the gloo transport needs of gloo: blocking point-to-point messages between
// the ranks of one group. The backend implements it over torch's ProcessGroupGloo
// (backend/gloo_port.cc), so no transport includes torch.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>

namespace ringcoll {

class MessagePort {
 public:
  class Op {
   public:
    virtual ~Op() = default;
    // Blocks until the message is sent or received. Throws std::exception whose
    // what() says why (on a timeout, gloo's text says "Timed out").
    virtual void wait(std::chrono::milliseconds timeout) = 0;
    // Makes a blocked or later wait() return; the message may never complete.
    virtual void abort() = 0;
  };

  virtual ~MessagePort() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The buffer must stay valid until the op completed or was aborted.
  virtual std::unique_ptr<Op> send(int peer, const void* buf, size_t bytes) = 0;
  virtual std::unique_ptr<Op> recv(int peer, void* buf, size_t bytes) = 0;
};

}  // namespace ringcoll
