// The adapters that give transports what they need of torch without including it:
// a MessagePort over a ProcessGroupGloo's point-to-point (for the gloo transport)
// and a Rendezvous over the process group's c10d store (for set-up).
#pragma once

#include <memory>
#include <string>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "transport/message_port.h"
#include "transport/rendezvous.h"

namespace ringcoll {

// `tag`: the gloo tag of every message, so that user send/recv forwarded to the
// same gloo group never match ringcoll's own.
std::shared_ptr<MessagePort> makeGlooPort(c10::intrusive_ptr<c10d::Backend> gloo, int tag);

class StoreRendezvous final : public Rendezvous {
 public:
  explicit StoreRendezvous(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace ringcoll
