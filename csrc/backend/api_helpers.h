// Helpers the c10d API files share (api.cc, api_exchange.cc): working views of the
// user's tensors and the call's fingerprint.
#pragma once

#include <ATen/ATen.h>

#include "engine/collectives.h"
#include "engine/fingerprint.h"
#include "reduce/types.h"

namespace ringcoll {

// Flat contiguous view of t's memory when t is contiguous, else a contiguous copy;
// the caller copies results back with writeBack(). The view is internal to the
// collective (autograd never sees it), so it is made below autograd: through the
// whole dispatcher a view cost about a fifth of a small all-reduce's CPU time, and a
// tensor that is already flat is used as it is.
inline at::Tensor flatWorking(const at::Tensor& t) {
  if (t.dim() == 1 && t.is_contiguous()) return t;
  at::Tensor c = t.contiguous();
  at::AutoDispatchBelowADInplaceOrView below;
  return c.view({-1});
}

inline void writeBack(at::Tensor& dst, const at::Tensor& flat) {
  if (dst.numel() == 0) return;
  if (dst.is_contiguous() && dst.data_ptr() == flat.data_ptr()) return;
  dst.copy_(flat.view(dst.sizes()));
}

inline size_t bytesOf(const at::Tensor& t) { return t.numel() * t.element_size(); }

// Whether the memory of a and b (contiguous, or flat working copies) overlaps.
inline bool overlaps(const at::Tensor& a, const at::Tensor& b) {
  if (a.numel() == 0 || b.numel() == 0) return false;
  const char* pa = static_cast<const char*>(a.data_ptr());
  const char* pb = static_cast<const char*>(b.data_ptr());
  return pa < pb + bytesOf(b) && pb < pa + bytesOf(a);
}

// A call's fingerprint as this rank sees it (engine/fingerprint.h); launch() adds
// the sequence number, the rank and the algorithm. `count`: the elements of one
// rank's contribution as the user passed them (all_gather: its input; reduce_scatter:
// its output; the coalesced variants: all tensors together; gather and scatter:
// one block; all-to-all: 0, its counts are pairwise, per peer).
inline algo::Fingerprint callPrint(algo::Method method, DType dtype, int64_t count,
                                   const algo::Reduction* red = nullptr, int root = -1) {
  algo::Fingerprint fp;
  fp.method = method;
  fp.dtype = dtype;
  fp.hasDtype = 1;
  fp.count = static_cast<uint64_t>(count);
  if (red != nullptr) algo::describeReduction(fp, *red);
  fp.root = root;
  return fp;
}

}  // namespace ringcoll
