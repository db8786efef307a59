#include "transport/routed_transport.h"

#include "common/errors.h"

namespace ringcoll {

RoutedTransport::RoutedTransport(int rank, int size, std::vector<Transport*> byPeer,
                                 Transport* sleeper,
                                 std::vector<std::unique_ptr<Transport>> owned)
    : rank_(rank), size_(size), byPeer_(std::move(byPeer)), sleeper_(sleeper),
      owned_(std::move(owned)) {
  RC_ASSERT(static_cast<int>(byPeer_.size()) == size_ && sleeper_ != nullptr);
  for (const auto& t : owned_) name_ += (name_.empty() ? "" : "+") + t->name();
}

RoutedTransport::~RoutedTransport() {
  while (!owned_.empty()) owned_.pop_back();
}

void RoutedTransport::flush() {
  for (const auto& t : owned_) t->flush();
}

}  // namespace ringcoll
