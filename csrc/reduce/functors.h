// Per-element reduction functors shared by the CPU reducer and the CUDA kernels.
//
// Contract (as NCCL's reduce_kernel.h states for its functors): every functor is a
// pure function of two values of the accumulation type `Elem<T>::Acc` and returns
// one; it is commutative and associative up to floating-point rounding. A reducer
// computes, for each element i,
//
//     dst[i] = Elem<T>::store(Op{}(Elem<T>::load(a[i]), Elem<T>::load(b[i])))
//
// so half and bfloat16 inputs are widened to float, combined once, and rounded back
// to nearest-even: each element op accumulates in float, as torch does for its own
// half arithmetic. Because the CPU loops and the CUDA kernels both call exactly
// these functions (RC_HD = __host__ __device__), the CPU tests cover the GPU
// arithmetic bit for bit. Nothing here includes torch or the CUDA runtime.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__CUDACC__)
#define RC_HD __host__ __device__ __forceinline__
#else
#define RC_HD inline
#endif

namespace ringcoll {

// Storage types for 16-bit floats: raw bits, so this header needs neither
// cuda_fp16.h nor c10. Layout-compatible with __half/__nv_bfloat16/c10::Half.
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};
static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2, "16-bit storage");

RC_HD uint32_t floatBits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}
RC_HD float bitsFloat(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

// IEEE binary16 -> binary32, exact.
RC_HD float halfToFloat(Half h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  uint32_t exp = (h.bits >> 10) & 0x1fu;
  uint32_t mant = h.bits & 0x3ffu;
  if (exp == 0x1fu) return bitsFloat(sign | 0x7f800000u | (mant << 13));  // inf/nan
  if (exp == 0) {
    if (mant == 0) return bitsFloat(sign);  // signed zero
    // Subnormal half: value = mant * 2^-24; normalise into a float.
    exp = 113;  // 127 - 15 + 1
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --exp;
    }
    mant &= 0x3ffu;
    return bitsFloat(sign | (exp << 23) | (mant << 13));
  }
  return bitsFloat(sign | ((exp + 112u) << 23) | (mant << 13));
}

// binary32 -> binary16, round to nearest even; overflow gives inf, NaN stays NaN.
RC_HD Half floatToHalf(float f) {
  uint32_t x = floatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  uint16_t out;
  if (x >= 0x47800000u) {  // >= 65536 (beyond the rounding range), inf or nan
    out = x > 0x7f800000u ? 0x7e00u : 0x7c00u;
  } else if (x < 0x38800000u) {  // below 2^-14: the result is subnormal or zero
    // Adding 0.5 shifts the value so the float adder's own round-to-nearest-even
    // rounds at the half-subnormal quantum (2^-24); the low bits are the result.
    const float shifted = bitsFloat(x) + 0.5f;
    out = static_cast<uint16_t>(floatBits(shifted) - 0x3f000000u);
  } else {
    const uint32_t odd = (x >> 13) & 1u;
    x += 0xc8000fffu + odd;  // rebias exponent (-112 << 23) and round half to even
    out = static_cast<uint16_t>(x >> 13);
  }
  return Half{static_cast<uint16_t>(out | sign)};
}

RC_HD float bf16ToFloat(BFloat16 b) {
  return bitsFloat(static_cast<uint32_t>(b.bits) << 16);
}

// binary32 -> bfloat16, round to nearest even; NaN stays a quiet NaN.
RC_HD BFloat16 floatToBf16(float f) {
  const uint32_t x = floatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    return BFloat16{static_cast<uint16_t>((x >> 16) | 0x40u)};
  }
  const uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);
  return BFloat16{static_cast<uint16_t>(rounded >> 16)};
}

// 8-bit floats (OCP FP8, as torch.float8_e4m3fn / torch.float8_e5m2).
//   e4m3fn: bias 7, 3 mantissa bits, no infinities, 0x7f/0xff is NaN, max 448;
//           a value beyond 448 (infinity too) saturates to +-448, as torch's
//           conversion does.
//   e5m2:   bias 15, 2 mantissa bits, IEEE-like inf/NaN, max 57344; overflow is inf.
// Conversions from float round to nearest even, like torch's.
struct Float8E4M3 {
  uint8_t bits;
};
struct Float8E5M2 {
  uint8_t bits;
};

template <int kExpBits, int kMantBits, int kBias>
RC_HD float miniToFloat(uint8_t v, bool ieeeSpecials) {
  const uint32_t sign = static_cast<uint32_t>(v & 0x80u) << 24;
  const uint32_t exp = (v >> kMantBits) & ((1u << kExpBits) - 1u);
  const uint32_t mant = v & ((1u << kMantBits) - 1u);
  const uint32_t expMax = (1u << kExpBits) - 1u;
  if (ieeeSpecials && exp == expMax) {
    return bitsFloat(sign | 0x7f800000u | (mant ? 0x400000u : 0u));
  }
  if (!ieeeSpecials && exp == expMax && mant == (1u << kMantBits) - 1u) {
    return bitsFloat(sign | 0x7fc00000u);  // e4m3fn's only NaN pattern
  }
  if (exp == 0) {
    // Subnormal: mant * 2^(1 - bias - mantBits), exact in float.
    const float mag = static_cast<float>(mant) *
        bitsFloat(static_cast<uint32_t>(127 + 1 - kBias - kMantBits) << 23);
    return sign ? -mag : mag;
  }
  return bitsFloat(sign | ((exp - kBias + 127u) << 23) | (mant << (23 - kMantBits)));
}

template <int kExpBits, int kMantBits, int kBias>
RC_HD uint8_t floatToMini(float f, bool ieeeSpecials) {
  const uint32_t x = floatBits(f);
  const uint8_t sign = static_cast<uint8_t>((x >> 24) & 0x80u);
  const uint32_t ax = x & 0x7fffffffu;
  const uint8_t expMax = static_cast<uint8_t>((1u << kExpBits) - 1u);
  const uint8_t nan = ieeeSpecials ? static_cast<uint8_t>((expMax << kMantBits) | 2u)
                                   : static_cast<uint8_t>(0x7fu);
  // e5m2 overflows to inf; e4m3fn, which has none, saturates to its largest finite.
  const uint8_t overflow = ieeeSpecials ? static_cast<uint8_t>(expMax << kMantBits)
                                        : static_cast<uint8_t>(0x7eu);
  if (ax > 0x7f800000u) return static_cast<uint8_t>(sign | nan);
  if (ax == 0x7f800000u) return static_cast<uint8_t>(sign | overflow);
  const float mag = bitsFloat(ax);
  const int minNormalExp = 1 - kBias;
  const int fexp = static_cast<int>(ax >> 23) - 127;
  if (fexp < minNormalExp) {
    // Subnormal (or zero) result: count quanta of 2^(1 - bias - mantBits), round
    // half to even; a count of 2^mantBits is exactly the smallest normal's code.
    const float quantum = bitsFloat(static_cast<uint32_t>(127 + 1 - kBias - kMantBits) << 23);
    const uint32_t q = static_cast<uint32_t>(rintf(mag / quantum));
    return static_cast<uint8_t>(sign | q);
  }
  // Normal: keep kMantBits of the float mantissa, round half to even on the rest.
  const uint32_t mant = ax & 0x7fffffu;
  const int drop = 23 - kMantBits;
  uint32_t q = mant >> drop;
  const uint32_t rest = mant & ((1u << drop) - 1u);
  const uint32_t half = 1u << (drop - 1);
  if (rest > half || (rest == half && (q & 1u))) ++q;
  int e = fexp + kBias;
  if (q == (1u << kMantBits)) {
    q = 0;
    ++e;
  }
  const uint32_t code = (static_cast<uint32_t>(e) << kMantBits) | q;
  const uint32_t maxFinite = ieeeSpecials ? ((static_cast<uint32_t>(expMax) - 1u) << kMantBits) |
                                                ((1u << kMantBits) - 1u)
                                          : 0x7eu;
  if (e > static_cast<int>(expMax) || code > maxFinite) return static_cast<uint8_t>(sign | overflow);
  return static_cast<uint8_t>(sign | code);
}

// How a storage type is widened for arithmetic and narrowed back.
template <typename T>
struct Elem {
  using Acc = T;
  RC_HD static Acc load(T v) { return v; }
  RC_HD static T store(Acc v) { return v; }
};
template <>
struct Elem<Half> {
  using Acc = float;
  RC_HD static float load(Half v) { return halfToFloat(v); }
  RC_HD static Half store(float v) { return floatToHalf(v); }
};
template <>
struct Elem<BFloat16> {
  using Acc = float;
  RC_HD static float load(BFloat16 v) { return bf16ToFloat(v); }
  RC_HD static BFloat16 store(float v) { return floatToBf16(v); }
};

template <>
struct Elem<Float8E4M3> {
  using Acc = float;
  RC_HD static float load(Float8E4M3 v) { return miniToFloat<4, 3, 7>(v.bits, false); }
  RC_HD static Float8E4M3 store(float v) { return Float8E4M3{floatToMini<4, 3, 7>(v, false)}; }
};
template <>
struct Elem<Float8E5M2> {
  using Acc = float;
  RC_HD static float load(Float8E5M2 v) { return miniToFloat<5, 2, 15>(v.bits, true); }
  RC_HD static Float8E5M2 store(float v) { return Float8E5M2{floatToMini<5, 2, 15>(v, true)}; }
};

// The functors. Integer results wrap like torch's (two's complement); for bool,
// SUM is logical or and PRODUCT logical and, as gloo computes them.
struct SumOp {
  template <typename A>
  RC_HD A operator()(A a, A b) const { return static_cast<A>(a + b); }
};
struct ProductOp {
  template <typename A>
  RC_HD A operator()(A a, A b) const { return static_cast<A>(a * b); }
};
struct MinOp {
  template <typename A>
  RC_HD A operator()(A a, A b) const { return b < a ? b : a; }
};
struct MaxOp {
  template <typename A>
  RC_HD A operator()(A a, A b) const { return a < b ? b : a; }
};
struct BandOp {
  template <typename A>
  RC_HD A operator()(A a, A b) const {
    // Instantiated for every type by the dispatch; reached only for integers and
    // bool (opSupported rejects floating types before any reducer runs).
    if constexpr (std::is_integral<A>::value) {
      return static_cast<A>(a & b);
    } else {
      return a;
    }
  }
};
struct BorOp {
  template <typename A>
  RC_HD A operator()(A a, A b) const {
    // Instantiated for every type by the dispatch; reached only for integers and
    // bool (opSupported rejects floating types before any reducer runs).
    if constexpr (std::is_integral<A>::value) {
      return static_cast<A>(a | b);
    } else {
      return a;
    }
  }
};
struct BxorOp {
  template <typename A>
  RC_HD A operator()(A a, A b) const {
    // Instantiated for every type by the dispatch; reached only for integers and
    // bool (opSupported rejects floating types before any reducer runs).
    if constexpr (std::is_integral<A>::value) {
      return static_cast<A>(a ^ b);
    } else {
      return a;
    }
  }
};

template <typename T, typename Op>
RC_HD T applyOp(T a, T b) {
  return Elem<T>::store(Op{}(Elem<T>::load(a), Elem<T>::load(b)));
}

// The scaling passes that turn SUM into AVG and PREMUL_SUM (see collectives.h).
// Floating types compute in Acc (float for 16-bit types) and round once;
// integers divide with C++ semantics (truncation toward zero), as NCCL's integer
// average does.
template <typename T>
RC_HD T divideBy(T v, int divisor) {
  using Acc = typename Elem<T>::Acc;
  if constexpr (std::is_integral<Acc>::value) {
    return static_cast<T>(static_cast<int64_t>(v) / divisor);
  } else {
    return Elem<T>::store(static_cast<Acc>(Elem<T>::load(v) / static_cast<Acc>(divisor)));
  }
}
template <typename T>
RC_HD T multiplyBy(T v, double factor) {
  using Acc = typename Elem<T>::Acc;
  if constexpr (std::is_integral<Acc>::value) {
    return static_cast<T>(static_cast<double>(v) * factor);
  } else {
    return Elem<T>::store(static_cast<Acc>(Elem<T>::load(v) * static_cast<Acc>(factor)));
  }
}

}  // namespace ringcoll
