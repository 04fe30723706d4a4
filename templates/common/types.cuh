// Element types and fixed-width integers for kernels compiled by NVRTC with
// no system headers (NVRTC 13 ships no cuda_bf16.h / cuda_fp16.h): 16-bit
// floats are raw storage, converted by inline PTX.
#pragma once

namespace flashjit {

using u16 = unsigned short;
using u32 = unsigned int;
using i64 = long long;

struct alignas(16) U32x4 {
  u32 x, y, z, w;
};
struct alignas(8) U32x2 {
  u32 x, y;
};
struct alignas(16) F32x4 {
  float x, y, z, w;
};
struct alignas(8) F32x2 {
  float x, y;
};

struct bf16 {
  u16 bits;
};
struct fp16 {
  u16 bits;
};

// fp8 e4m3 (1 sign, 4 exponent, 3 mantissa bits; no infinities, 448 at
// most): raw storage, read by the sm90 forward's k32 wgmma.
struct e4m3 {
  unsigned char bits;
};

// Whether T is an 8-bit element.
template <typename T>
struct IsFp8 {
  static constexpr bool value = false;
};
template <>
struct IsFp8<e4m3> {
  static constexpr bool value = true;
};

// Four fp32 values -> packed e4m3x4, `a0` in the low byte, round to nearest
// even and saturate to +-448 (finite P never saturates: it is at most 256).
__device__ __forceinline__ u32 pack_e4m3x4(float a0, float a1, float a2, float a3) {
  u32 r;
  asm("{\n.reg .b16 lo, hi;\n"
      "cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n"
      "cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
      "mov.b32 %0, {lo, hi};\n}\n"
      : "=r"(r)
      : "f"(a0), "f"(a1), "f"(a2), "f"(a3));
  return r;
}

template <typename T>
struct ElementOps;

template <>
struct ElementOps<bf16> {
  // Two fp32 values -> packed bf16x2, `lo` in the low half (the element with
  // the smaller index), round to nearest even.
  static __device__ __forceinline__ u32 pack(float lo, float hi) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
  }
  static __device__ __forceinline__ float to_float(u16 x) {
    float f;
    asm("mov.b32 %0, %1;" : "=f"(f) : "r"(static_cast<u32>(x) << 16));
    return f;
  }
  // D = A * B + D, m16n8k16, fp32 accumulation.
  static __device__ __forceinline__ void mma(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

template <>
struct ElementOps<fp16> {
  static __device__ __forceinline__ u32 pack(float lo, float hi) {
    u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
  }
  static __device__ __forceinline__ float to_float(u16 x) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));
    return f;
  }
  static __device__ __forceinline__ void mma(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

// A compile-time bool as a value, for lambdas that take either (no <type_traits>).
template <bool B>
struct BoolConstant {
  static constexpr bool value = B;
};

}  // namespace flashjit
