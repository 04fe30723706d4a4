// The hook of a caller's modifiers (include/flashjit/modifiers.h) in the
// forward kernels: a policy with two switches and two functions of logical
// indices (batch, query head, query position, key position), which the
// kernel calls per element of its S tile, having mapped its fragments to
// those indices. The generator's prelude defines cfg::Modifiers: NoModifiers,
// or a struct of the same shape that calls the caller's score_mod and
// mask_mod (generator/modifier_source.cpp). `aux` points at the call's extra
// inputs (FwdParams::aux), laid out as the snippet's struct Aux. kMaskQkOnly:
// the caller declared that mask_mod reads only q and k, so one block map
// serves every batch and head (fwd_block_map.cuh).
#pragma once

namespace flashjit {

// An index or a difference of positions as a float, exact for |i| < 2^22:
// the integer added to the bits of 1.5 * 2^23, whose ulp is 1, then that
// constant taken off. An integer add and a float add on the FMA pipe where
// a conversion (I2F) would go to the pipe the softmax's exp2 needs; for a
// snippet's hot arithmetic, e.g. ALiBi's slope * (k - q).
__device__ __forceinline__ float position_to_float(int i) {
  return __int_as_float(0x4B400000 + i) - 12582912.f;
}

struct NoModifiers {
  static constexpr bool kScore = false;
  static constexpr bool kMask = false;
  static constexpr bool kMaskQkOnly = false;
  __device__ __forceinline__ static float score(float s, int, int, int, int, const void *) {
    return s;
  }
  __device__ __forceinline__ static bool visible(int, int, int, int, const void *) { return true; }
};

}  // namespace flashjit
