// The score policy: what happens to one score between Q K^T and the
// softmax, written once for every kernel, forward and backward, in this
// order:
//   scale -> softcap -> score_mod -> the built-in mask and mask_mod
// (and sinks, which join the softmax's finish: common/online_softmax.cuh,
// common/split_merge.cuh, and d sink in bwd_rowwise.cuh). The prelude picks
// it with one line, `using Score = ScorePolicy<Mask, kSoftcap, Modifiers>`
// (generator/source.cpp).
//
// Its hooks take one element and its logical indices (batch, query head,
// query position, key position), never a register layout, as FlashInfer's
// variant hooks (LogitsTransform, LogitsMask) do: each kernel walks its own
// fragments (sm80 and sm90, S or S^T) and calls them, and the mask's
// bounds arithmetic (common/mask.cuh, host-tested) gives whole rows of
// visible keys or columns of visible queries, so a tile no edge cuts is
// never tested element-wise.
//
// Units. S is Q K^T unscaled. With a softcap the score is cap * tanh(S *
// scale / cap): the kernels keep tanh(S * score_scale) (score_scale = scale
// / cap) and softmax_scale_log2 carries cap * scale * log2(e), so the
// softmax's FFMA is the same with or without one. score_mod sees scores
// in the softmax's natural units (the logit before exp): S times
// natural_unit(p), the softcap applied.
#pragma once

#include "common/mask.cuh"
#include "common/modifiers.cuh"
#include "common/ptx.cuh"

namespace flashjit {

template <class MaskPolicy, bool kSoftcapOn, class ModifierPolicy>
struct ScorePolicy {
  using Mask = MaskPolicy;
  using Modifiers = ModifierPolicy;
  static constexpr bool kSoftcap = kSoftcapOn;
  static constexpr bool kModified = Modifiers::kScore || Modifiers::kMask;

  // ---- scale and softcap ------------------------------------------------------
  // The softcap of a score in S's units (the identity without one).
  template <class Params>
  __device__ __forceinline__ static float softcap(float s, const Params &p) {
    if constexpr (kSoftcap) return tanh_approx(s * p.score_scale);
    else return s;
  }
  // The softcap's derivative from its result, d tanh = 1 - tanh^2, in the
  // units softmax_scale_log2 carries (1 without one): the backward's dS
  // picks it up with score_mod's.
  __device__ __forceinline__ static float softcap_grad(float capped) {
    if constexpr (kSoftcap) return 1.f - capped * capped;
    else return 1.f;
  }
  // A score in S's units (softcap applied) times this is in natural units.
  template <class Params>
  __device__ __forceinline__ static float natural_unit(const Params &p) {
    return p.softmax_scale_log2 * 0.6931471805599453f;
  }

  // ---- score_mod and mask_mod (common/modifiers.cuh) ---------------------------
  // score_mod of a score in natural units; queries and keys the sequence holds.
  __device__ __forceinline__ static float modify(float natural, int b, int h, int q, int k,
                                                 const void *aux) {
    return Modifiers::score(natural, b, h, q, k, aux);
  }
  // Whether mask_mod shows key k to query q (always without one).
  __device__ __forceinline__ static bool shown(int b, int h, int q, int k, const void *aux) {
    return Modifiers::visible(b, h, q, k, aux);
  }

  // The backward's recomputation of one score: `s` in S's units after the
  // softcap (s * softmax_scale_log2 is the forward's base-2 logit without
  // modifiers). Returns the base-2 logit of score_mod's result (-inf where
  // mask_mod hides the key) and sets `grad` to score_mod_grad's derivative,
  // both as the forward computed them; queries and keys past the sequence
  // keep the plain logit (the built-in mask handles them). `masked` false: a
  // block map shows the tile whole, mask_mod is not called. score_mod runs
  // on every element, at positions clamped into the sequence, and its result
  // is kept only inside: under a branch per element each of its loads
  // (aux.slopes[h]) was conditional and issued once per score, not once per
  // tile. mask_mod stays under the branch: its loads differ per position
  // anyway, and hoisted they held a register each (spills). Called only for
  // tiles of a sequence with queries and keys (q, k >= 0).
  template <class Params>
  __device__ __forceinline__ static float logit2(const Params &p, float s, int b, int h, int q,
                                                 int k, int seqlen_q, int seqlen_k, float &grad,
                                                 bool masked = true) {
    float logit = s * p.softmax_scale_log2;
    const bool inside = q < seqlen_q && k < seqlen_k;
    if constexpr (Modifiers::kScore) {
      const int qc = min(q, seqlen_q - 1), kc = min(k, seqlen_k - 1);
      const float score = s * natural_unit(p);
      const float modified = Modifiers::score(score, b, h, qc, kc, p.aux) * 1.4426950408889634f;
      const float derivative = Modifiers::score_grad(score, b, h, qc, kc, p.aux);
      if (inside) {
        logit = modified;
        grad = derivative;
      }
    }
    if constexpr (Modifiers::kMask)
      if (inside && masked && !Modifiers::visible(b, h, q, k, p.aux))
        logit = __int_as_float(0xff800000);
    return logit;
  }

  // ---- the built-in mask (common/mask.cuh) -------------------------------------
  // The key tiles of `block` keys any of queries [m0, m0 + rows) sees: the
  // others are never loaded.
  template <class Params>
  __device__ __forceinline__ static TileSpan key_tiles(const Params &p, int seqlen_k, int m0,
                                                       int rows, i64 offset, int block) {
    return visible_key_tiles<Mask>(p, seqlen_k, m0, rows, offset, block);
  }
  // The query tiles of `block` rows any of keys [n0, n0 + cols) is seen by.
  template <class Params>
  __device__ __forceinline__ static TileSpan query_tiles(const Params &p, int seqlen_q, int n0,
                                                         int cols, i64 offset, int block) {
    return visible_query_tiles<Mask>(p, seqlen_q, n0, cols, offset, block);
  }
  // Whether the mask or the key tail hides any score of queries [m0, m0 +
  // rows) x keys [n0, n0 + cols): only such tiles are masked element-wise.
  template <class Params>
  __device__ __forceinline__ static bool tile_is_cut(const Params &p, int seqlen_k, int m0,
                                                     int rows, int n0, int cols, i64 offset) {
    return flashjit::tile_is_cut<Mask>(p, seqlen_k, m0, rows, n0, cols, offset);
  }
  // The keys query `row` sees, [lo, hi] relative to key n0, clamped to [-1, n].
  template <class Params>
  __device__ __forceinline__ static void visible_keys(const Params &p, int seqlen_k, i64 row,
                                                      int n0, int n, i64 offset, int &lo,
                                                      int &hi) {
    visible_keys_in_tile<Mask>(p, seqlen_k, row, n0, n, offset, lo, hi);
  }
  // The queries that see key `key`, [lo, hi] relative to query m0, clamped
  // to [-1, n].
  template <class Params>
  __device__ __forceinline__ static void visible_queries(const Params &p, int seqlen_k, int key,
                                                         int m0, int n, i64 offset, int &lo,
                                                         int &hi) {
    visible_queries_in_tile<Mask>(p, seqlen_k, key, m0, n, offset, lo, hi);
  }
};

}  // namespace flashjit
