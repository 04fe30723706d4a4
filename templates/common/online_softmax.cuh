// The softmax, written once for every kernel: the forward's online
// softmax (FlashAttention-2's, in base 2 with an unnormalised O) for both
// families, with the running row max and row sum, each S tile's
// exponentials and O's rescale, and the row's finish (normalisation and
// log-sum-exp, a learned sink joining it); and the backward's P from the
// saved LSE.
//
// Fragments. A thread holds rows of m16n8 accumulator fragments: of each
// m16 row tile, rows `group` and `group + 8` (lane / 4), and of each n8
// column tile the column pair 2 * (lane % 4) + {0, 1}. Element i (0..3) of
// column tile nt is row 2 * mt + i / 2 of the thread's, column 8 nt + 2 *
// (lane % 4) + i % 2. The sm80 forward's warps own kMTiles such row tiles
// (acc[mt][nt][i]); an sm90 consumer warp owns one (wgmma's m64nN
// accumulator is that fragment per warp, acc[4 nt + i]). The kernels pass
// accessors `(mt, nt, i) -> float &` over their own arrays, which inline to
// the same registers.
//
// Units. Scores arrive in S's units (Q K^T after the score policy,
// common/score_policy.cuh); times `scale_log2` they are base-2 logits, so
// the scale is one FFMA with the max's subtraction. Row sums stay a quarter
// row per thread until the finish: the quad's sum once, not once per tile.
#pragma once

#include "common/ptx.cuh"

namespace flashjit {

// A row's output factor (O's accumulator times it) and natural-log LSE.
struct RowFinish {
  float inv, lse;
};

// The whole row's finish from its running max (`row_max`, in S's units)
// and its sum of exponentials against that max (`sum`, the quad's whole).
// Without a sink: 1/sum and the LSE of the keys; a row that saw no key (sum
// 0, or NaN) writes O = 0 and LSE = +inf, as FlashAttention does. With
// kSinks, `sink` (natural units, like the scaled scores) joins the sum as a
// key with no value: O shrinks by the sink's share, and a row that saw no
// key writes O = 0 and LSE = sink.
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

// A split-KV partial's finish (the combine merges partials by their LSEs
// and adds a sink once, common/split_merge.cuh): O over its own sum, and
// LSE -inf where the split saw no key, so it weighs nothing in the merge.
__device__ __forceinline__ RowFinish finish_partial(float row_max, float sum, float scale_log2) {
  const bool empty = !(sum > 0.f);
  return {empty ? 0.f : 1.f / sum,
          empty ? __int_as_float(0xff800000)
                : (row_max * scale_log2 + __log2f(sum)) * 0.6931471805599453f};
}

// The backward's P, recomputed from the forward's LSE (times log2(e)) and a
// score's base-2 logit (ScorePolicy::logit2): the forward's normalised
// probability, with no max or sum to carry.
__device__ __forceinline__ float probability_from_lse(float logit2, float lse_log2) {
  return exp2_approx(logit2 - lse_log2);
}

template <int kRowTiles>  // m16 row tiles the thread's warp owns
struct OnlineSoftmax {
  static constexpr int kRows = 2 * kRowTiles;
  // (In this order: the sm90 kernel's registers then come out as they did
  // before this struct, its SASS unchanged.)
  float row_sum[kRows];  // against row_max, this thread's quarter of the row
  float row_max[kRows];  // in S's units; -inf until a visible key

  __device__ __forceinline__ void reset() {
#pragma unroll
    for (int r = 0; r < kRows; ++r) row_max[r] = __int_as_float(0xff800000);
#pragma unroll
    for (int r = 0; r < kRows; ++r) row_sum[r] = 0.f;
  }

  // Folds the S tile of kNTiles column tiles (`score(mt, nt, i)`) into the
  // rows' statistics; the tile becomes unnormalised P in place. Once a row
  // is done, `rescale(r, factor)` gets the factor O's row r must be scaled
  // by: the sm80 kernel scales there, the sm90 one keeps it until its P V
  // in flight completes.
  // kPExponent: P comes out times 2^kPExponent (the sum with it), for an
  // 8-bit P whose small values would otherwise underflow (the sm90 e4m3
  // forward; the finish takes it back out of the LSE).
  template <int kNTiles, int kPExponent = 0, class Score, class Rescale>
  __device__ __forceinline__ void update(Score &&score, float scale_log2, Rescale &&rescale) {
    const float kNegInf = __int_as_float(0xff800000);
#pragma unroll
    for (int mt = 0; mt < kRowTiles; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = 2 * mt + h;
        float m = row_max[r];
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt)
          m = fmaxf(m, fmaxf(score(mt, nt, 2 * h), score(mt, nt, 2 * h + 1)));
        m = quad_max(m);
        // A row that has seen only masked keys keeps max -inf: subtract 0
        // instead so exp2 gives 0, not NaN.
        const float m_scaled = m == kNegInf ? 0.f : m * scale_log2;
        const float correction = exp2_approx(row_max[r] * scale_log2 - m_scaled);
        row_max[r] = m;
        const float p_shift = kPExponent ? m_scaled - static_cast<float>(kPExponent) : m_scaled;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            float &s = score(mt, nt, 2 * h + c);
            s = exp2_approx(s * scale_log2 - p_shift);
            sum += s;
          }
        row_sum[r] = row_sum[r] * correction + sum;
        rescale(r, correction);
      }
  }

  // O's row r (kNTiles column tiles of `acc(mt, nt, i)`) times `factor`.
  template <int kNTiles, class Acc>
  __device__ __forceinline__ static void rescale_row(Acc &&acc, int r, float factor) {
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
      acc(r / 2, nt, (r % 2) * 2) *= factor;
      acc(r / 2, nt, (r % 2) * 2 + 1) *= factor;
    }
  }

  // Every row of O by its factor, column tile by column tile (the order
  // the sm90 consumer's registers are laid out in).
  template <int kNTiles, class Acc>
  __device__ __forceinline__ static void rescale(Acc &&acc, const float (&factor)[kRows]) {
#pragma unroll
    for (int mt = 0; mt < kRowTiles; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          acc(mt, nt, 2 * h) *= factor[2 * mt + h];
          acc(mt, nt, 2 * h + 1) *= factor[2 * mt + h];
        }
  }

  // Row r's sum of exponentials, the quad's whole, for the finish
  // (finish_row, or finish_partial for a split's partial).
  __device__ __forceinline__ float total(int r) const { return quad_sum(row_sum[r]); }
};

}  // namespace flashjit
