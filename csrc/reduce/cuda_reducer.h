// CUDA reducer: the shared functors (functors.h) in kernels with 16-byte vector
// loads (vector.h), enqueued on one stream. Raw pointers, no torch.
//
// The launch* functions return the launch's cudaError_t; CudaReducer turns a
// failure into an exception naming the kernel.
#pragma once

#include <cuda_runtime_api.h>

#include "reduce/reducer.h"
#include "reduce/types.h"

namespace ringcoll {

cudaError_t launchReduce(void* dst, const void* a, const void* b, size_t count, DType dtype,
                         RedOp op, cudaStream_t stream);
cudaError_t launchDivide(void* buf, size_t count, DType dtype, int divisor,
                         cudaStream_t stream);
cudaError_t launchMultiply(void* buf, size_t count, DType dtype, double factor,
                           cudaStream_t stream);

class CudaReducer final : public Reducer {
 public:
  explicit CudaReducer(cudaStream_t stream) : stream_(stream) {}
  void reduce(void* dst, const void* a, const void* b, size_t count, DType dtype,
              RedOp op) override;
  void reduce2(void* dst, void* dst2, const void* a, const void* b, size_t count,
               DType dtype, RedOp op) override;
  void divide(void* buf, size_t count, DType dtype, int divisor) override;
  void multiply(void* buf, size_t count, DType dtype, double factor) override;
  void copy(void* dst, const void* src, size_t bytes, bool streaming) override;
  // Device copies have no read-for-ownership to avoid: never stream.
  size_t streamingBytes() const override { return static_cast<size_t>(-1); }

 private:
  cudaStream_t stream_;
};

}  // namespace ringcoll
