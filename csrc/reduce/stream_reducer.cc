#include "reduce/stream_reducer.h"

#include <array>
#include <cstring>

#include "common/errors.h"

namespace ringcoll {

StreamReducer::StreamReducer(CpuStream& stream, size_t headerSlots, size_t latchBytes)
    : StreamOrderedReducer(latchBytes), stream_(stream), headers_(headerSlots * kHeaderBytes) {}

void StreamReducer::reduce(void* dst, const void* a, const void* b, size_t count, DType dtype,
                           RedOp op) {
  if (count == 0) return;  // as CudaReducer: no operation, none counted
  enqueue(StreamStats::Kernel::kReduce, count * elementSize(dtype),
          [=, this] { cpu_.reduce(dst, a, b, count, dtype, op); });
}

void StreamReducer::reduce2(void* dst, void* dst2, const void* a, const void* b, size_t count,
                            DType dtype, RedOp op) {
  if (count == 0) return;
  enqueue(StreamStats::Kernel::kReduce, count * elementSize(dtype),
          [=, this] { cpu_.reduce2(dst, dst2, a, b, count, dtype, op); });
}

void StreamReducer::reduceMany(void* dst, const void* const* srcs, size_t k, size_t count,
                               DType dtype, RedOp op) {
  if (count == 0 || k == 0) return;
  std::vector<const void*> in(srcs, srcs + k);  // read at the call, as a kernel's arguments
  enqueue(StreamStats::Kernel::kReduce, count * elementSize(dtype), [=, this, in = std::move(in)] {
    cpu_.reduceMany(dst, in.data(), in.size(), count, dtype, op);
  });
}

void StreamReducer::divide(void* buf, size_t count, DType dtype, int divisor) {
  if (count == 0) return;
  enqueue(StreamStats::Kernel::kScale, count * elementSize(dtype),
          [=, this] { cpu_.divide(buf, count, dtype, divisor); });
}

void StreamReducer::multiply(void* buf, size_t count, DType dtype, double factor) {
  if (count == 0) return;
  enqueue(StreamStats::Kernel::kScale, count * elementSize(dtype),
          [=, this] { cpu_.multiply(buf, count, dtype, factor); });
}

void StreamReducer::copy(void* dst, const void* src, size_t bytes, bool streaming) {
  if (bytes == 0 || dst == src) return;
  enqueue(StreamStats::Kernel::kCopy, bytes, [=, this] { cpu_.copy(dst, src, bytes, streaming); });
}

void* StreamReducer::headerSlot(size_t slot) {
  RC_ASSERT((slot + 1) * kHeaderBytes <= headers_.size(), "header slot ", slot);
  return headers_.data() + slot * kHeaderBytes;
}

void StreamReducer::writeHeader(void* dst, const void* bytes, size_t n) {
  RC_ASSERT(n == kHeaderBytes, "a header of ", n, " bytes");
  std::array<uint8_t, kHeaderBytes> h;
  std::memcpy(h.data(), bytes, kHeaderBytes);  // copied at the call, as the kernel's argument
  countKernels(StreamStats::Kernel::kHeader);
  stream_.enqueue([dst, h] { std::memcpy(dst, h.data(), kHeaderBytes); });
}

void StreamReducer::checkHeader(const void* got, const void* want, size_t n, int peer) {
  RC_ASSERT(n == kHeaderBytes, "a header of ", n, " bytes");
  std::array<uint8_t, kHeaderBytes> w;
  std::memcpy(w.data(), want, kHeaderBytes);
  // One block on the device: reads the host word; sets both words, as the kernel.
  enqueue(StreamStats::Kernel::kHeader, 0, [this, got, w, peer] {
    if (std::memcmp(got, w.data(), kHeaderBytes) == 0 || mismatchPeer() != -1) return;
    std::memcpy(want_, w.data(), kHeaderBytes);
    std::memcpy(got_, got, kHeaderBytes);
    mismatchPeer_.store(peer, std::memory_order_release);
    latched_.store(true, std::memory_order_release);
    stopKernels();
  });
}

void StreamReducer::mismatchBytes(uint8_t* want, uint8_t* got) const {
  std::memcpy(want, want_, kHeaderBytes);
  std::memcpy(got, got_, kHeaderBytes);
}

}  // namespace ringcoll
