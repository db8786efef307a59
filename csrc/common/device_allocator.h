// Device memory for the stream path's own buffers (staging, a schedule's scratch),
// from whoever owns the device's allocator: the backend passes torch's caching
// allocator on the comm stream (backend/cuda_device.cc), so the buffers show in
// torch.cuda.memory_* and come from its pool (a cudaMalloc per call would cost
// the host tens of microseconds). No torch here.
#pragma once

#include <cstddef>
#include <functional>

namespace ringcoll {

struct DeviceAllocator {
  std::function<void*(size_t)> alloc;  // null on failure
  std::function<void(void*)> free;
};

}  // namespace ringcoll
