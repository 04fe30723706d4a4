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
// serves every batch and head (fwd_block_map.cuh). kSinks: learned
// attention sinks (FwdParams::sinks, one logit per query head), built in:
// the forward's epilogues finish each row with finish_row, the split-KV
// combine adds the sink once (split_merge::add_sink), and the backward's
// flashjit_bwd_sink_grad reduces d sink (bwd_rowwise.cuh).
#pragma once

namespace flashjit {

// A row's output factor (O's accumulator times it) and natural-log LSE from
// its running max (`row_max`, in S's units: times scale_log2 it is the base-2
// logit) and its sum of exponentials against that max. Without a sink: 1/sum
// and the LSE of the keys; a row that saw no key (sum 0, or NaN) writes O = 0
// and LSE = +inf. With kSinks, `sink` (natural units, like the scaled
// scores) joins the sum, as a key with no value: O shrinks by the sink's
// share, and a row that saw no key writes O = 0 and LSE = sink.
struct RowFinish {
  float inv, lse;
};
template <bool kSinks>
__device__ __forceinline__ RowFinish finish_row(float row_max, float sum, float scale_log2,
                                                float sink) {
  constexpr float kLn2 = 0.6931471805599453f;
  const bool empty = !(sum > 0.f);
  if constexpr (!kSinks) {
    return {empty ? 0.f : 1.f / sum,
            empty ? __int_as_float(0x7f800000) : (row_max * scale_log2 + __log2f(sum)) * kLn2};
  } else {
    // Everything in base 2 against the larger of the keys' max and the sink.
    const float sink2 = sink * 1.4426950408889634f;
    const float keys2 = empty ? sink2 : row_max * scale_log2;
    const float top = fmaxf(keys2, sink2);
    const float keys_scale = empty ? 0.f : exp2f(keys2 - top);
    const float total = sum * keys_scale + exp2f(sink2 - top);
    return {keys_scale / total, (top + __log2f(total)) * kLn2};
  }
}

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

// The backward's recomputation of one score under a policy M (cfg::Modifiers):
// `s` is the score in S's units after the softcap (s * softmax_scale_log2 is
// the forward's base-2 logit without modifiers). Returns the base-2 logit of
// score_mod's result (-inf where mask_mod hides the key) and sets `grad` to
// score_mod_grad's derivative, both as the forward computed them; queries
// and keys past the sequence keep the plain logit (the masks handle them).
// `masked` false: a block map shows the tile whole, mask_mod is not called.
// score_mod runs on every element, at positions clamped into the sequence,
// and its result is kept only inside: under a branch per element each of
// its loads (aux.slopes[h]) was conditional and issued once per score, not
// once per tile. mask_mod stays under the branch: its loads differ per
// position anyway, and hoisted they held a register each (spills).
// Called only for tiles of a sequence with queries and keys (q, k >= 0).
template <class M, class Params>
__device__ __forceinline__ float modified_logit2(const Params &p, float s, int b, int h, int q,
                                                 int k, int seqlen_q, int seqlen_k, float &grad,
                                                 bool masked = true) {
  float logit = s * p.softmax_scale_log2;
  const bool inside = q < seqlen_q && k < seqlen_k;
  if constexpr (M::kScore) {
    const int qc = min(q, seqlen_q - 1), kc = min(k, seqlen_k - 1);
    const float score = s * (p.softmax_scale_log2 * 0.6931471805599453f);
    const float modified = M::score(score, b, h, qc, kc, p.aux) * 1.4426950408889634f;
    const float derivative = M::score_grad(score, b, h, qc, kc, p.aux);
    if (inside) {
      logit = modified;
      grad = derivative;
    }
  }
  if constexpr (M::kMask)
    if (inside && masked && !M::visible(b, h, q, k, p.aux)) logit = __int_as_float(0xff800000);
  return logit;
}

}  // namespace flashjit
