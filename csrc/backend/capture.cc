#include "backend/capture.h"

#include <c10/util/Exception.h>

namespace ringcoll {

void EmulatedCapture::begin(const void* owner) {
  std::lock_guard<Mutex> lock(mutex_);
  TORCH_CHECK(graph_ == nullptr,
              "ringcoll: a capture is already under way on this group; end it first");
  graph_ = std::make_shared<CapturedGraph>();
  graph_->owner = owner;
  thread_ = std::this_thread::get_id();
  any_.store(true, std::memory_order_release);
}

std::shared_ptr<CapturedGraph> EmulatedCapture::end() {
  std::lock_guard<Mutex> lock(mutex_);
  TORCH_CHECK(graph_ != nullptr && thread_ == std::this_thread::get_id(),
              "ringcoll: no capture of this thread is under way on this group");
  any_.store(false, std::memory_order_release);
  return std::move(graph_);  // holds user tensors: its owner drops it, unlocked
}

bool EmulatedCapture::record(CapturedLaunch launch) {
  std::lock_guard<Mutex> lock(mutex_);
  // Not recorded: `launch` is destroyed by the caller, after the unlock.
  if (!graph_ || thread_ != std::this_thread::get_id()) return false;
  graph_->launches.push_back(std::move(launch));
  return true;
}

}  // namespace ringcoll
