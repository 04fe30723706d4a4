// The hook of a caller's modifiers (include/flashjit/modifiers.h) in the
// kernels: a policy with switches and functions of logical
// indices (batch, query head, query position, key position), which the
// kernel calls per element of its S tile, having mapped its fragments to
// those indices. The generator's prelude defines cfg::Modifiers: NoModifiers,
// or a struct of the same shape that calls the caller's score_mod and
// mask_mod (generator/modifier_source.cpp); the backward kernels also call
// score_grad, the caller's score_mod_grad, given apart or defined in the
// score_mod snippet (1 without a score_mod; the backward of a score_mod
// without one is refused on the host). `aux` points at the call's extra
// inputs (FwdParams::aux), laid out as the snippet's struct Aux. kMaskQkOnly:
// mask_mod reads only q and k (declared by the caller, or found by the
// host's probe: runtime/modifier_facts.h), so one block map serves every
// batch and head (fwd_block_map.cuh). kSinks: learned
// attention sinks (FwdParams::sinks, one logit per query head), built in:
// the forward's epilogues finish each row with finish_row
// (common/online_softmax.cuh), the split-KV combine adds the sink once
// (split_merge::add_sink), and the backward's flashjit_bwd_sink_grad
// reduces d sink (bwd_rowwise.cuh). The kernels call all of this through
// the score policy (common/score_policy.cuh), not directly.
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

// What score_mod_slope's overload of last resort returns where the snippet
// defines none (generator/modifier_source.cpp): the policy's kScoreSlope is
// false then, and its score_slope, never called, 0.
struct NoScoreSlope {
  __device__ __forceinline__ operator float() const { return 0.f; }
};
template <class T>
inline constexpr bool kIsScoreSlope = true;
template <>
inline constexpr bool kIsScoreSlope<NoScoreSlope> = false;

// The same for score_mod_grad in a backward program where none is given
// apart from the score_mod snippet: its static_assert names the omission
// (the host refuses the call before compiling: runtime/modifier_facts.h).
struct NoScoreModGrad {
  __device__ __forceinline__ operator float() const { return 1.f; }
};
template <class T>
inline constexpr bool kIsScoreModGrad = true;
template <>
inline constexpr bool kIsScoreModGrad<NoScoreModGrad> = false;

struct NoModifiers {
  static constexpr bool kScore = false;
  static constexpr bool kScoreSlope = false;
  static constexpr bool kMask = false;
  static constexpr bool kMaskQkOnly = false;
  static constexpr bool kSinks = false;
  __device__ __forceinline__ static float score(float s, int, int, int, int, const void *) {
    return s;
  }
  __device__ __forceinline__ static float score_slope(int, int, const void *) { return 0.f; }
  __device__ __forceinline__ static bool visible(int, int, int, int, const void *) { return true; }
  __device__ __forceinline__ static float score_grad(float, int, int, int, int, const void *) {
    return 1.f;
  }
};

}  // namespace flashjit
