// The naive fp32 attention backward: the GPU reference for the backward
// kernels, with a caller's modifiers compiled in as the forward reference
// (reference_attention.cuh) takes them. Like it, deliberately independent of
// the fast kernels' building blocks (no mma, no common/*.cuh beyond the
// modifiers policy the prelude brings); it shares that file's parameter
// block and element helpers, so a program of this file also holds the
// forward reference's kernel.
//
// Per query head h, row i and key j (reference/cpu_attention_backward.h):
//   s = scale·q·k, then softcap·tanh(s/softcap), then score_mod where the
//   sequence holds i and j; visible = the built-in window and mask_mod;
//   P = exp(s − LSE_i) from the forward's LSE (0 where invisible, and for a
//   row that sees nothing: its LSE is +inf);
//   D_i = rowsum(dO ∘ O) from the forward's O; dP = dO·Vᵀ;
//   dS = P ∘ (dP − D) · score_mod_grad(s before score_mod) · (1 − tanh²);
//   dQ = scale·dS·K, dK = scale·dSᵀ·Q, dV = Pᵀ·dO (dK, dV of a KV head
//   summed over its query heads); d sink_h = −Σ_i exp(sink_h − LSE_i)·D_i.
// same_precision rounds what a 16-bit kernel rounds: P before Pᵀ·dO (dS
// takes the fp32 P), dS (with both derivatives, without the scale) before
// dS·K and dSᵀ·Q, and the outputs; D is the given O's.
//
// Three kernels, kRefThreads threads each, in stream order:
//   flashjit_reference_attention_bwd_dq    one CTA per (kRefBwdRows query
//     rows, query head, batch): D of its rows (written to dsum for the
//     others), then over the key tiles of kRefBwdKeys keys the built-in
//     window leaves (one key per lane, kRefBwdRows / 4 rows per warp) P
//     and dS, and dQ += dS·K in registers (each thread owns a column, or
//     two at d > 128, of every row);
//   flashjit_reference_attention_bwd_dkdv  one CTA per (kRefBwdKeyRows keys,
//     KV head, batch): over the group's query heads and the query tiles of
//     kRefBwdQueries queries the window leaves (one query per lane,
//     kRefBwdKeyRows / 4 keys per warp) P and dS again, and dV += Pᵀ·dO,
//     dK += dSᵀ·Q in registers (columns per thread as above);
//   flashjit_reference_attention_bwd_sinks one CTA per query head, learned
//     sinks only: the head's rows in a fixed order.
// Every output element is written once by one thread in a fixed order: no
// atomics, the same bits run to run.
//
// The parameter block is plain data, so the host includes this file too.
#pragma once

#include "reference_attention.cuh"

namespace flashjit {

struct RefBackwardParams {
  // q, k, v and their strides, the sizes, the mask, scale, softcap, dtype,
  // same_precision, sinks and aux, as the forward reference reads them; its
  // o and lse are not read.
  RefAttentionParams fwd;
  // The forward's output and the output's gradient: 16-bit elements,
  // [batch, seqlen_q, heads_q, head_dim_v] with strides.
  const void *o;
  const void *dout;
  long long o_batch_stride, o_row_stride, o_head_stride;
  long long do_batch_stride, do_row_stride, do_head_stride;
  const float *lse;  // the forward's, [batch, heads_q, seqlen_q]
  float *dsum;       // D, [batch, heads_q, seqlen_q]: the dq kernel writes it
  float *dq;         // [batch, seqlen_q, heads_q, head_dim_qk], packed fp32
  float *dk;         // [batch, seqlen_k, heads_kv, head_dim_qk]
  float *dv;         // [batch, seqlen_k, heads_kv, head_dim_v]
  float *dsinks;     // [heads_q]; the sinks kernel only
  int batch;
};

constexpr int kRefBwdRows = 16;     // dq kernel: query rows per CTA
constexpr int kRefBwdKeys = 32;     // dq kernel: keys per tile, one per lane
constexpr int kRefBwdKeyRows = 16;  // dkdv kernel: keys per CTA
constexpr int kRefBwdQueries = 32;  // dkdv kernel: queries per tile, one per lane
static_assert(kRefBwdRows % (kRefThreads / 32) == 0 && kRefBwdKeyRows % (kRefThreads / 32) == 0,
              "rows and keys split evenly over the warps");
static_assert(kRefBwdKeys == 32 && kRefBwdQueries == 32, "one key or query per lane");

// Shared memory (floats) of the dq kernel: Q and dO rows, K and V tiles, dS,
// and each row's D and LSE. Every piece is a multiple of 4 floats, so the
// float4 rows stay aligned.
FLASHJIT_REF_HD constexpr int ref_bwd_dq_smem_floats(int head_dim_qk, int head_dim_v) {
  return (kRefBwdRows + kRefBwdKeys) * (ref_smem_pitch(head_dim_qk) + ref_smem_pitch(head_dim_v)) +
         kRefBwdRows * kRefBwdKeys + 2 * kRefBwdRows;
}
// Of the dkdv kernel: K and V rows, Q and dO tiles, P and dS, and each
// query's D and LSE.
FLASHJIT_REF_HD constexpr int ref_bwd_dkdv_smem_floats(int head_dim_qk, int head_dim_v) {
  return (kRefBwdKeyRows + kRefBwdQueries) *
             (ref_smem_pitch(head_dim_qk) + ref_smem_pitch(head_dim_v)) +
         2 * kRefBwdKeyRows * kRefBwdQueries + 2 * kRefBwdQueries;
}

}  // namespace flashjit

#if defined(__CUDACC__)

namespace flashjit {
namespace ref_bwd {

using ref::load_element;
using ref::load_tile;
using ref::round_element;
using ref::warp_sum;
constexpr int kWarps = kRefThreads / 32;
constexpr int kMaxColsPerThread = kRefMaxHeadDim / kRefThreads;
__device__ __forceinline__ float pos_inf() { return __uint_as_float(0x7f800000u); }

// One score's probability and its gradient's factor, from q·k: the forward
// reference's arithmetic (tile_scores), and the derivatives of what it
// applied to the scaled score.
struct ScoreGrad {
  float prob;          // P = exp(s − LSE), 0 where the key is invisible
  float mod_grad;      // score_mod_grad (1 without a score_mod)
  float softcap_grad;  // 1 − tanh² (1 without a softcap)
};
__device__ __forceinline__ ScoreGrad score_grad(const RefAttentionParams &p, float dot, float lse,
                                                int b, int h, int i, int j) {
  using Modifiers = cfg::Modifiers;
  const int offset = p.seqlen_k - p.seqlen_q;
  const bool inside = i < p.seqlen_q && j < p.seqlen_k;
  bool visible = inside && (p.window_left < 0 || j >= i + offset - p.window_left) &&
                 (p.window_right < 0 || j <= i + offset + p.window_right) &&
                 ref::same_chunk(i + offset, j, p.attention_chunk);
  float x = dot * p.scale;
  float softcap_grad = 1.f;
  if (p.softcap > 0.f) {
    const float t = tanhf(x / p.softcap);
    x = p.softcap * t;
    softcap_grad = 1.f - t * t;
  }
  float mod_grad = 1.f;
  if constexpr (Modifiers::kScore)
    if (inside) {
      // Both at the score score_mod receives (after the softcap).
      mod_grad = Modifiers::score_grad(x, b, h, i, j, p.aux);
      x = Modifiers::score(x, b, h, i, j, p.aux);
    }
  if constexpr (Modifiers::kMask)
    if (visible) visible = Modifiers::visible(b, h, i, j, p.aux);
  return {visible ? expf(x - lse) : 0.f, mod_grad, softcap_grad};
}

// dS of one score, the scale not applied: P ∘ (dP − D) times the
// derivatives in the fast kernels' order (score_mod's, then the softcap's),
// rounded where a kernel rounds it.
__device__ __forceinline__ float score_gradient(const RefAttentionParams &p, const ScoreGrad &g,
                                                float dp, float d) {
  float ds = g.prob * (dp - d);
  if constexpr (cfg::Modifiers::kScore) ds *= g.mod_grad;
  if (p.softcap > 0.f) ds *= g.softcap_grad;
  return p.same_precision ? round_element(ds, p.is_fp16 != 0) : ds;
}

// The dot products of the warp's kCount rows of a tile (row first + kWarps·t
// of `rows`, read by every lane: a broadcast) with the lane's own row
// `lane_row`, over `dim` columns (the padding columns are zeros). The
// padded pitch makes the lanes' float4 reads of 32 rows conflict-free.
template <int kCount>
__device__ __forceinline__ void dots(const float *rows, int pitch, int first, const float *lane_row,
                                     int dim, float (&out)[kCount]) {
#pragma unroll
  for (int t = 0; t < kCount; ++t) out[t] = 0.f;
  const float4 *mine = reinterpret_cast<const float4 *>(lane_row);
  const int chunks = (dim + 3) / 4;
  for (int c = 0; c < chunks; ++c) {
    const float4 a = mine[c];
#pragma unroll
    for (int t = 0; t < kCount; ++t) {
      const float4 r = reinterpret_cast<const float4 *>(rows + (first + kWarps * t) * pitch)[c];
      out[t] += r.x * a.x + r.y * a.y + r.z * a.z + r.w * a.w;
    }
  }
}

// Where (b, row, h) starts in a strided [batch, seqlen, heads, dim] tensor.
__device__ __forceinline__ long long offset_of(long long batch_stride, long long row_stride,
                                               long long head_stride, int b, int row, int h) {
  return b * batch_stride + row * row_stride + h * head_stride;
}

}  // namespace ref_bwd

// D and dQ of kRefBwdRows query rows of one head.
extern "C" __global__ void __launch_bounds__(kRefThreads)
    flashjit_reference_attention_bwd_dq(const RefBackwardParams bp) {
  using namespace ref_bwd;
  constexpr int kRowsPerWarp = kRefBwdRows / kWarps;
  const RefAttentionParams &p = bp.fwd;
  extern __shared__ float4 smem4[];
  float *smem = reinterpret_cast<float *>(smem4);
  const int h = blockIdx.y, b = blockIdx.z;
  const int hk = h / p.heads_per_kv;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int first_row = blockIdx.x * kRefBwdRows;
  const bool fp16 = p.is_fp16 != 0;
  const bool rounded = p.same_precision != 0;

  const int qk_pitch = ref_smem_pitch(p.head_dim_qk), v_pitch = ref_smem_pitch(p.head_dim_v);
  const int dqk_padded = (p.head_dim_qk + 3) / 4 * 4, dv_padded = (p.head_dim_v + 3) / 4 * 4;
  float *qs = smem;
  float *dos = qs + kRefBwdRows * qk_pitch;
  float *ks = dos + kRefBwdRows * v_pitch;
  float *vs = ks + kRefBwdKeys * qk_pitch;
  float *dss = vs + kRefBwdKeys * v_pitch;  // [kRefBwdRows][kRefBwdKeys]
  float *row_d = dss + kRefBwdRows * kRefBwdKeys;
  float *row_lse = row_d + kRefBwdRows;

  load_tile(qs, qk_pitch, kRefBwdRows, p.q,
            offset_of(p.q_batch_stride, 0, p.q_head_stride, b, 0, h), p.q_row_stride, first_row,
            p.seqlen_q, p.head_dim_qk, dqk_padded, fp16);
  load_tile(dos, v_pitch, kRefBwdRows, bp.dout,
            offset_of(bp.do_batch_stride, 0, bp.do_head_stride, b, 0, h), bp.do_row_stride,
            first_row, p.seqlen_q, p.head_dim_v, dv_padded, fp16);
  __syncthreads();

  // D = rowsum(dO ∘ O): a warp per row, its lanes over the columns. Rows
  // past the sequence get D = 0 and LSE = +inf (P = 0).
  const long long lse_row0 = (static_cast<long long>(b) * p.heads_q + h) * p.seqlen_q;
#pragma unroll
  for (int t = 0; t < kRowsPerWarp; ++t) {
    const int r = warp + kWarps * t, i = first_row + r;
    float sum = 0.f;
    if (i < p.seqlen_q) {
      const long long o_row =
          offset_of(bp.o_batch_stride, bp.o_row_stride, bp.o_head_stride, b, i, h);
      for (int c = lane; c < p.head_dim_v; c += 32)
        sum += load_element(bp.o, o_row + c, fp16) * dos[r * v_pitch + c];
    }
    sum = warp_sum(sum);
    if (lane == 0) {
      row_d[r] = sum;
      row_lse[r] = i < p.seqlen_q ? bp.lse[lse_row0 + i] : pos_inf();
      if (i < p.seqlen_q) bp.dsum[lse_row0 + i] = sum;
    }
  }
  __syncthreads();
  float my_d[kRowsPerWarp], my_lse[kRowsPerWarp];
#pragma unroll
  for (int t = 0; t < kRowsPerWarp; ++t)
    my_d[t] = row_d[warp + kWarps * t], my_lse[t] = row_lse[warp + kWarps * t];

  // Keys any row of this block can see (the forward reference's range).
  const int offset = p.seqlen_k - p.seqlen_q;
  const int last_row = min(first_row + kRefBwdRows, p.seqlen_q) - 1;
  int key_begin = 0, key_end = p.seqlen_k;
  if (p.window_left >= 0) key_begin = max(0, first_row + offset - p.window_left);
  if (p.window_right >= 0) key_end = min(p.seqlen_k, last_row + offset + p.window_right + 1);
  const long long k_base = offset_of(p.k_batch_stride, 0, p.k_head_stride, b, 0, hk);
  const long long v_base = offset_of(p.v_batch_stride, 0, p.v_head_stride, b, 0, hk);

  float acc[kRefBwdRows][kMaxColsPerThread];
#pragma unroll
  for (int r = 0; r < kRefBwdRows; ++r)
#pragma unroll
    for (int j = 0; j < kMaxColsPerThread; ++j) acc[r][j] = 0.f;
  for (int n0 = key_begin / kRefBwdKeys * kRefBwdKeys; n0 < key_end; n0 += kRefBwdKeys) {
    __syncthreads();
    load_tile(ks, qk_pitch, kRefBwdKeys, p.k, k_base, p.k_row_stride, n0, p.seqlen_k, p.head_dim_qk,
              dqk_padded, fp16);
    load_tile(vs, v_pitch, kRefBwdKeys, p.v, v_base, p.v_row_stride, n0, p.seqlen_k, p.head_dim_v,
              dv_padded, fp16);
    __syncthreads();
    // This lane's key against the warp's rows: S and dP = dO·Vᵀ, then dS.
    float dot[kRowsPerWarp], dp[kRowsPerWarp];
    dots(qs, qk_pitch, warp, ks + lane * qk_pitch, p.head_dim_qk, dot);
    dots(dos, v_pitch, warp, vs + lane * v_pitch, p.head_dim_v, dp);
#pragma unroll
    for (int t = 0; t < kRowsPerWarp; ++t) {
      const int r = warp + kWarps * t;
      const ScoreGrad g = score_grad(p, dot[t], my_lse[t], b, h, first_row + r, n0 + lane);
      dss[r * kRefBwdKeys + lane] = score_gradient(p, g, dp[t], my_d[t]);
    }
    __syncthreads();
    // dQ += dS·K.
    for (int n = 0; n < kRefBwdKeys; n += 4) {
      float kk[4][kMaxColsPerThread];
#pragma unroll
      for (int j = 0; j < kMaxColsPerThread; ++j) {
        const int c = threadIdx.x + kRefThreads * j;
#pragma unroll
        for (int u = 0; u < 4; ++u) kk[u][j] = c < p.head_dim_qk ? ks[(n + u) * qk_pitch + c] : 0.f;
      }
#pragma unroll
      for (int r = 0; r < kRefBwdRows; ++r) {
        const float4 d4 = reinterpret_cast<const float4 *>(dss + r * kRefBwdKeys + n)[0];
#pragma unroll
        for (int j = 0; j < kMaxColsPerThread; ++j)
          acc[r][j] += d4.x * kk[0][j] + d4.y * kk[1][j] + d4.z * kk[2][j] + d4.w * kk[3][j];
      }
    }
  }

#pragma unroll
  for (int r = 0; r < kRefBwdRows; ++r) {
    const int i = first_row + r;
    if (i >= p.seqlen_q) break;
    float *dq_row = bp.dq + ((static_cast<long long>(b) * p.seqlen_q + i) * p.heads_q + h) *
                                static_cast<long long>(p.head_dim_qk);
#pragma unroll
    for (int j = 0; j < kMaxColsPerThread; ++j) {
      const int c = threadIdx.x + kRefThreads * j;
      if (c >= p.head_dim_qk) continue;
      const float x = acc[r][j] * p.scale;
      dq_row[c] = rounded ? round_element(x, fp16) : x;
    }
  }
}

// dK and dV of kRefBwdKeyRows keys of one KV head. The bounds ask for one
// CTA per SM only: with the thread count alone, ptxas 13.0 for sm_80 held
// it to 128 registers and spilled 16 bytes; so it takes 187 and spills
// nothing (-Xptxas -v; for sm_90a 137 or 181, no spill either way).
extern "C" __global__ void __launch_bounds__(kRefThreads, 1)
    flashjit_reference_attention_bwd_dkdv(const RefBackwardParams bp) {
  using namespace ref_bwd;
  constexpr int kKeysPerWarp = kRefBwdKeyRows / kWarps;
  const RefAttentionParams &p = bp.fwd;
  extern __shared__ float4 smem4[];
  float *smem = reinterpret_cast<float *>(smem4);
  const int hk = blockIdx.y, b = blockIdx.z;
  const int heads_kv = p.heads_q / p.heads_per_kv;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int first_key = blockIdx.x * kRefBwdKeyRows;
  const bool fp16 = p.is_fp16 != 0;
  const bool rounded = p.same_precision != 0;

  const int qk_pitch = ref_smem_pitch(p.head_dim_qk), v_pitch = ref_smem_pitch(p.head_dim_v);
  const int dqk_padded = (p.head_dim_qk + 3) / 4 * 4, dv_padded = (p.head_dim_v + 3) / 4 * 4;
  float *ks = smem;
  float *vs = ks + kRefBwdKeyRows * qk_pitch;
  float *qs = vs + kRefBwdKeyRows * v_pitch;
  float *dos = qs + kRefBwdQueries * qk_pitch;
  float *ps = dos + kRefBwdQueries * v_pitch;  // [kRefBwdKeyRows][kRefBwdQueries]
  float *dss = ps + kRefBwdKeyRows * kRefBwdQueries;
  float *query_d = dss + kRefBwdKeyRows * kRefBwdQueries;
  float *query_lse = query_d + kRefBwdQueries;

  load_tile(ks, qk_pitch, kRefBwdKeyRows, p.k,
            offset_of(p.k_batch_stride, 0, p.k_head_stride, b, 0, hk), p.k_row_stride, first_key,
            p.seqlen_k, p.head_dim_qk, dqk_padded, fp16);
  load_tile(vs, v_pitch, kRefBwdKeyRows, p.v,
            offset_of(p.v_batch_stride, 0, p.v_head_stride, b, 0, hk), p.v_row_stride, first_key,
            p.seqlen_k, p.head_dim_v, dv_padded, fp16);

  // Queries that can see any key of this block: the window's bounds solved
  // for the query (i <= j - offset + left, i >= j - offset - right).
  const int offset = p.seqlen_k - p.seqlen_q;
  const int last_key = min(first_key + kRefBwdKeyRows, p.seqlen_k) - 1;
  int query_begin = 0, query_end = p.seqlen_q;
  if (p.window_right >= 0) query_begin = max(0, first_key - offset - p.window_right);
  if (p.window_left >= 0) query_end = min(p.seqlen_q, last_key - offset + p.window_left + 1);

  float acc_dk[kRefBwdKeyRows][kMaxColsPerThread], acc_dv[kRefBwdKeyRows][kMaxColsPerThread];
#pragma unroll
  for (int n = 0; n < kRefBwdKeyRows; ++n)
#pragma unroll
    for (int j = 0; j < kMaxColsPerThread; ++j) acc_dk[n][j] = 0.f, acc_dv[n][j] = 0.f;
  for (int hh = 0; hh < p.heads_per_kv; ++hh) {
    const int h = hk * p.heads_per_kv + hh;
    const long long q_base = offset_of(p.q_batch_stride, 0, p.q_head_stride, b, 0, h);
    const long long do_base = offset_of(bp.do_batch_stride, 0, bp.do_head_stride, b, 0, h);
    const long long lse_row0 = (static_cast<long long>(b) * p.heads_q + h) * p.seqlen_q;
    for (int m0 = query_begin / kRefBwdQueries * kRefBwdQueries; m0 < query_end;
         m0 += kRefBwdQueries) {
      __syncthreads();
      load_tile(qs, qk_pitch, kRefBwdQueries, p.q, q_base, p.q_row_stride, m0, p.seqlen_q,
                p.head_dim_qk, dqk_padded, fp16);
      load_tile(dos, v_pitch, kRefBwdQueries, bp.dout, do_base, bp.do_row_stride, m0, p.seqlen_q,
                p.head_dim_v, dv_padded, fp16);
      if (threadIdx.x < kRefBwdQueries) {
        // Queries past the sequence: P = 0 (LSE +inf), D = 0.
        const int i = m0 + threadIdx.x;
        query_lse[threadIdx.x] = i < p.seqlen_q ? bp.lse[lse_row0 + i] : pos_inf();
        query_d[threadIdx.x] = i < p.seqlen_q ? bp.dsum[lse_row0 + i] : 0.f;
      }
      __syncthreads();
      // This lane's query against the warp's keys: P and dS, stored as their
      // transposes' rows (one per key).
      float dot[kKeysPerWarp], dp[kKeysPerWarp];
      dots(ks, qk_pitch, warp, qs + lane * qk_pitch, p.head_dim_qk, dot);
      dots(vs, v_pitch, warp, dos + lane * v_pitch, p.head_dim_v, dp);
      const float lse = query_lse[lane], d = query_d[lane];
#pragma unroll
      for (int t = 0; t < kKeysPerWarp; ++t) {
        const int n = warp + kWarps * t;
        const ScoreGrad g = score_grad(p, dot[t], lse, b, h, m0 + lane, first_key + n);
        ps[n * kRefBwdQueries + lane] = rounded ? round_element(g.prob, fp16) : g.prob;
        dss[n * kRefBwdQueries + lane] = score_gradient(p, g, dp[t], d);
      }
      __syncthreads();
      // dV += Pᵀ·dO, dK += dSᵀ·Q.
      for (int m = 0; m < kRefBwdQueries; m += 4) {
        float dov[4][kMaxColsPerThread], qv[4][kMaxColsPerThread];
#pragma unroll
        for (int j = 0; j < kMaxColsPerThread; ++j) {
          const int c = threadIdx.x + kRefThreads * j;
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            dov[u][j] = c < p.head_dim_v ? dos[(m + u) * v_pitch + c] : 0.f;
            qv[u][j] = c < p.head_dim_qk ? qs[(m + u) * qk_pitch + c] : 0.f;
          }
        }
#pragma unroll
        for (int n = 0; n < kRefBwdKeyRows; ++n) {
          const float4 p4 = reinterpret_cast<const float4 *>(ps + n * kRefBwdQueries + m)[0];
          const float4 d4 = reinterpret_cast<const float4 *>(dss + n * kRefBwdQueries + m)[0];
#pragma unroll
          for (int j = 0; j < kMaxColsPerThread; ++j) {
            acc_dv[n][j] +=
                p4.x * dov[0][j] + p4.y * dov[1][j] + p4.z * dov[2][j] + p4.w * dov[3][j];
            acc_dk[n][j] += d4.x * qv[0][j] + d4.y * qv[1][j] + d4.z * qv[2][j] + d4.w * qv[3][j];
          }
        }
      }
    }
  }

#pragma unroll
  for (int n = 0; n < kRefBwdKeyRows; ++n) {
    const int j = first_key + n;
    if (j >= p.seqlen_k) break;
    const long long row = (static_cast<long long>(b) * p.seqlen_k + j) * heads_kv + hk;
#pragma unroll
    for (int jj = 0; jj < kMaxColsPerThread; ++jj) {
      const int c = threadIdx.x + kRefThreads * jj;
      if (c < p.head_dim_qk) {
        const float x = acc_dk[n][jj] * p.scale;
        bp.dk[row * p.head_dim_qk + c] = rounded ? round_element(x, fp16) : x;
      }
      if (c < p.head_dim_v)
        bp.dv[row * p.head_dim_v + c] =
            rounded ? round_element(acc_dv[n][jj], fp16) : acc_dv[n][jj];
    }
  }
}

// d sink_h = −Σ over the head's rows of every batch of exp(sink_h − LSE)·D
// (a sink is a key with no value: dP = 0, so its dS is −P·D), in fp32 and
// never rounded; after the dq kernel has written D.
extern "C" __global__ void __launch_bounds__(kRefThreads)
    flashjit_reference_attention_bwd_sinks(const RefBackwardParams bp) {
  using namespace ref_bwd;
  const RefAttentionParams &p = bp.fwd;
  __shared__ float warp_sums[kWarps];
  const int h = blockIdx.x;
  const float sink = p.sinks[h];
  float sum = 0.f;
  for (int b = 0; b < bp.batch; ++b) {
    const long long row0 = (static_cast<long long>(b) * p.heads_q + h) * p.seqlen_q;
    for (int i = threadIdx.x; i < p.seqlen_q; i += kRefThreads)
      sum += expf(sink - bp.lse[row0 + i]) * bp.dsum[row0 + i];
  }
  sum = warp_sum(sum);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.f;
    for (int w = 0; w < kWarps; ++w) total += warp_sums[w];
    bp.dsinks[h] = -total;
  }
}

}  // namespace flashjit

#endif  // __CUDACC__
