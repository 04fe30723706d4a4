// The hook of a caller's modifiers (include/flashjit/modifiers.h) in the
// kernels: a policy with switches and functions of logical
// indices (batch, query head, query position, key position), which the
// kernel calls per element of its S tile, having mapped its fragments to
// those indices. The generator's prelude defines cfg::Modifiers: NoModifiers,
// or a struct of the same shape that calls the caller's score_mod and
// mask_mod (generator/modifier_source.cpp); the backward kernels also call
// score_grad, the caller's score_mod_grad (1 where there is none: the
// backward of a score_mod without one is refused on the host). `aux` points at the call's extra
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
  __device__ __forceinline__ static float score_grad(float, int, int, int, int, const void *) {
    return 1.f;
  }
};

// The backward's recomputation of one score under a policy M (cfg::Modifiers):
// `s` is the score in S's units after the softcap (s * softmax_scale_log2 is
// the forward's base-2 logit without modifiers). Returns the base-2 logit of
// score_mod's result (-inf where mask_mod hides the key) and sets `grad` to
// score_mod_grad's derivative, both as the forward computed them; queries
// and keys past the sequence keep the plain logit (the masks handle them).
// `masked` false: a block map shows the tile whole, mask_mod is not called.
template <class M, class Params>
__device__ __forceinline__ float modified_logit2(const Params &p, float s, int b, int h, int q,
                                                 int k, int seqlen_q, int seqlen_k, float &grad,
                                                 bool masked = true) {
  float logit = s * p.softmax_scale_log2;
  if (q >= seqlen_q || k >= seqlen_k) return logit;
  if constexpr (M::kScore) {
    const float score = s * (p.softmax_scale_log2 * 0.6931471805599453f);
    logit = M::score(score, b, h, q, k, p.aux) * 1.4426950408889634f;
    grad = M::score_grad(score, b, h, q, k, p.aux);
  }
  if constexpr (M::kMask)
    if (masked && !M::visible(b, h, q, k, p.aux)) logit = __int_as_float(0xff800000);
  return logit;
}

}  // namespace flashjit
