// Deterministic dQ for the sm80 backward (included after bwd_sm80.cuh when
// the spec asks for determinism): no atomics, so the sum over key tiles runs
// in one fixed order and the result is bit-identical run to run.
//
// Tiling. One CTA per (kBlockM query rows, query head, batch), one warp per
// 16 rows (kBlockM / 16 warps), looping over the visible key tiles of
// kDqBlockN keys like the forward kernel. Per tile, per warp: S = Q K^T and
// dP = dO V^T (both operands in shared memory), P = exp2(S * scale_log2 -
// LSE_log2), dS = P * (dP - D) (times 1 - tanh^2 under softcap), then
// dQ += dS K with dS converted to 16 bits in registers as the A operand,
// exactly as the forward keeps P. K and V tiles stream through a ring of
// kStages cp.async buffers. dQ = softmax_scale * accumulator is staged
// through shared memory for 16-byte stores.
#pragma once

#include "bwd_sm80.cuh"

namespace flashjit {
namespace bwd_dq_sm80 {

using namespace cfg;
using Ops = ElementOps<Element>;

// The layout arithmetic is bwd_sm80.cuh's, which the host twin uses too.
constexpr BwdSm80Layout kLayout = bwd_sm80::kLayout;
constexpr int kWarpsDq = kLayout.dq_warps();
constexpr int kThreadsDq = kLayout.dq_threads();
constexpr int kDqBlockN = BwdSm80Layout::kDqBlockN;  // keys per tile
constexpr int kDimQK = bwd_sm80::kDimQK;
constexpr int kDimV = bwd_sm80::kDimV;
constexpr int kSmemQK = bwd_sm80::kSmemQK;
constexpr int kSmemV = bwd_sm80::kSmemV;
constexpr int kChunksQK = kHeadDimQK / 8;
constexpr int kChunksV = kHeadDimV / 8;
constexpr int kOffDO = kLayout.dq_offset_do();
constexpr int kOffKV = kLayout.dq_offset_kv();
constexpr int kStageKV = kLayout.dq_stage_elements();
constexpr int kSmemElements = kLayout.dq_smem_elements();

}  // namespace bwd_dq_sm80
}  // namespace flashjit

extern "C" __global__ void __launch_bounds__(flashjit::bwd_dq_sm80::kThreadsDq)
    flashjit_bwd_dq(const flashjit::BwdParams p) {
  using namespace flashjit;
  using namespace flashjit::bwd_dq_sm80;
  constexpr int kThreads = kThreadsDq;
  const float kInf = __int_as_float(0x7f800000);

  extern __shared__ __align__(128) unsigned char smem_raw[];
  u16 *const smem = reinterpret_cast<u16 *>(smem_raw);
  const u32 smem_addr = smem_address(smem);
  const u32 sQ = smem_addr, sDO = smem_addr + 2 * kOffDO;

  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int m_block = gridDim.x - 1 - blockIdx.x;  // heavy causal tiles first
  const int head = blockIdx.y;
  const int batch = blockIdx.z;
  const int kv_head = head / p.heads_per_kv;
  const int m0 = m_block * kBlockM;
  // The CTA's sequence (common/sequence.cuh): its lengths and first rows.
  const bwd_sm80::Sequence seq(p, batch);
  const int seqlen_q = seq.seqlen_q;
  const int seqlen_k = seq.seqlen_k;
  const i64 offset = seq.offset;
  const i64 outer = seq.outer;  // the tensors' batch index (0 when packed)

  // None past the sequence's queries (a shorter sequence of a varlen batch).
  const TileSpan key_tiles =
      m0 < seqlen_q ? Score::key_tiles(p, seqlen_k, m0, kBlockM, offset, kDqBlockN)
                    : TileSpan{0, 0};
  const int n_block_begin = key_tiles.first;
  const int num_tiles = key_tiles.count;

  const u16 *const k_base = static_cast<const u16 *>(p.k) + outer * p.k_batch_stride +
                            kv_head * p.k_head_stride + seq.k_row0 * p.k_row_stride;
  const u16 *const v_base = static_cast<const u16 *>(p.v) + outer * p.v_batch_stride +
                            kv_head * p.v_head_stride + seq.k_row0 * p.v_row_stride;
  auto load_kv = [&](int tile, int stage) {
    const int n0 = (n_block_begin + tile) * kDqBlockN;
    const int t = opaque(static_cast<int>(threadIdx.x));
    const u32 k_tile = smem_addr + 2 * (kOffKV + stage * kStageKV);
    load_tile_rows<kThreads, kDqBlockN, kSmemQK, kChunksQK>(
        k_tile, k_base + n0 * p.k_row_stride, p.k_row_stride, seqlen_k - n0, t);
    load_tile_rows<kThreads, kDqBlockN, kSmemV, kChunksV>(
        k_tile + 2 * kDqBlockN * kSmemQK, v_base + n0 * p.v_row_stride, p.v_row_stride,
        seqlen_k - n0, t);
  };

  // ---- prologue: padding, Q, dO, the first K/V tiles --------------------
  zero_chunks<kThreads, kBlockM, kSmemQK, kChunksQK, kDimQK / 8>(sQ, tid);
  zero_chunks<kThreads, kBlockM, kSmemV, kChunksV, kDimV / 8>(sDO, tid);
#pragma unroll
  for (int s = 0; s < kStages; ++s) {
    const u32 k_tile = smem_addr + 2 * (kOffKV + s * kStageKV);
    zero_chunks<kThreads, kDqBlockN, kSmemQK, kChunksQK, kDimQK / 8>(k_tile, tid);
    zero_chunks<kThreads, kDqBlockN, kSmemV, kChunksV, kDimV / 8>(k_tile + 2 * kDqBlockN * kSmemQK,
                                                                  tid);
  }
  load_tile_rows<kThreads, kBlockM, kSmemQK, kChunksQK>(
      sQ,
      static_cast<const u16 *>(p.q) + outer * p.q_batch_stride + head * p.q_head_stride +
          (seq.q_row0 + m0) * p.q_row_stride,
      p.q_row_stride, seqlen_q - m0, tid);
  load_tile_rows<kThreads, kBlockM, kSmemV, kChunksV>(
      sDO,
      static_cast<const u16 *>(p.dout) + outer * p.do_batch_stride + head * p.do_head_stride +
          (seq.q_row0 + m0) * p.do_row_stride,
      p.do_row_stride, seqlen_q - m0, tid);
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_tiles) load_kv(s, s);
    cp_async_commit();
  }

  // This thread's rows: warp * 16 + lane / 4 (+ 8).
  float lse_log2[2], dsum[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = m0 + warp * 16 + lane / 4 + h * 8;
    lse_log2[h] = row < seqlen_q ? p.lse[seq.lse_row(p, head, row)] * bwd_sm80::kLog2e : kInf;
    dsum[h] = row < seqlen_q ? p.dsum[seq.workspace_row(p, head, row)] : 0.f;
  }

  float acc_dq[1][kDimQK / 8][4];
  zero(acc_dq);
  int stage = 0;
  for (int t = 0; t < num_tiles; ++t) {
    if constexpr (kStages > 1) {
      cp_async_wait<kStages - 2>();
      __syncthreads();
      const int ahead = t + kStages - 1;
      int ahead_stage = stage + kStages - 1;
      if (ahead_stage >= kStages) ahead_stage -= kStages;
      if (ahead < num_tiles) load_kv(ahead, ahead_stage);
      cp_async_commit();
    } else {
      __syncthreads();  // everyone is done with tile t-1
      load_kv(t, 0);
      cp_async_commit();
      cp_async_wait<0>();
      __syncthreads();
    }
    const int n0 = (n_block_begin + t) * kDqBlockN;
    const u32 sK = smem_addr + 2 * (kOffKV + stage * kStageKV);
    const u32 sV = sK + 2 * kDqBlockN * kSmemQK;

    float s[1][kDqBlockN / 8][4];
    zero(s);
    warp_gemm<Element, 1, kDqBlockN / 8, kDimQK / 16, false, kSmemQK, false, kSmemQK>(
        s, sQ, warp * 16, sK, 0, 0, lane);
    // The score policy (common/score_policy.cuh), as the main kernel
    // recomputes it: the softcapped scores and score_mod's derivative are
    // kept for dS.
    float capped[kSoftcap ? kDqBlockN / 8 : 1][4];
    if constexpr (kSoftcap) {
#pragma unroll
      for (int nt = 0; nt < kDqBlockN / 8; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          capped[nt][i] = Score::softcap(s[0][nt][i], p);
          s[0][nt][i] = capped[nt][i];
        }
    }
    float grad[Modifiers::kScore ? kDqBlockN / 8 : 1][4];
#pragma unroll
    for (int nt = 0; nt < kDqBlockN / 8; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float logit = s[0][nt][i] * p.softmax_scale_log2;
        if constexpr (Score::kModified) {
          float g = 1.f;
          logit = Score::logit2(p, s[0][nt][i], batch, head, m0 + warp * 16 + lane / 4 + (i / 2) * 8,
                                n0 + nt * 8 + (lane % 4) * 2 + (i & 1), seqlen_q, seqlen_k, g);
          if constexpr (Modifiers::kScore) grad[nt][i] = g;
        }
        s[0][nt][i] = probability_from_lse(logit, lse_log2[i / 2]);
      }

    if (Score::tile_is_cut(p, seqlen_k, m0, kBlockM, n0, kDqBlockN, offset)) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const i64 row = m0 + warp * 16 + lane / 4 + h * 8;
        int lo_local, hi_local;  // visible keys of this row, tile-local
        Score::visible_keys(p, seqlen_k, row, n0, kDqBlockN, offset, lo_local, hi_local);
#pragma unroll
        for (int nt = 0; nt < kDqBlockN / 8; ++nt)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const int col = nt * 8 + (lane % 4) * 2 + c;
            if (col > hi_local || col < lo_local) s[0][nt][h * 2 + c] = 0.f;
          }
      }
    }

    float dp[1][kDqBlockN / 8][4];
    zero(dp);
    warp_gemm<Element, 1, kDqBlockN / 8, kDimV / 16, false, kSmemV, false, kSmemV>(
        dp, sDO, warp * 16, sV, 0, 0, lane);
#pragma unroll
    for (int nt = 0; nt < kDqBlockN / 8; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float ds = s[0][nt][i] * (dp[0][nt][i] - dsum[i / 2]);
        if constexpr (Modifiers::kScore) ds *= grad[nt][i];
        if constexpr (kSoftcap) ds *= Score::softcap_grad(capped[nt][i]);
        dp[0][nt][i] = ds;
      }

    // dQ += dS K: dS's accumulators of n-tiles 2kk, 2kk+1 are the A fragment.
    const int lane_t = opaque(lane);
#pragma unroll
    for (int kk = 0; kk < kDqBlockN / 16; ++kk) {
      const u32 a[4] = {Ops::pack(dp[0][2 * kk][0], dp[0][2 * kk][1]),
                        Ops::pack(dp[0][2 * kk][2], dp[0][2 * kk][3]),
                        Ops::pack(dp[0][2 * kk + 1][0], dp[0][2 * kk + 1][1]),
                        Ops::pack(dp[0][2 * kk + 1][2], dp[0][2 * kk + 1][3])};
#pragma unroll
      for (int np = 0; np < kDimQK / 16; ++np) {
        u32 b[4];
        ldmatrix_x4_trans(
            b, sK + 2 * swizzle<kSmemQK>(kk * 16 + lane_t % 16, np * 2 + lane_t / 16));
        Ops::mma(acc_dq[0][2 * np], a, b[0], b[1]);
        Ops::mma(acc_dq[0][2 * np + 1], a, b[2], b[3]);
      }
    }
    if (++stage == kStages) stage = 0;
  }

  // ---- epilogue: dQ through the Q tile's space ---------------------------
  cp_async_wait<0>();
  __syncthreads();
  store_fragments<Element, 1, kDimQK / 8, kSmemQK>(smem, acc_dq, warp * 16, 0, lane,
                                                   p.softmax_scale);
  __syncthreads();
  store_tile<kThreads, kBlockM, kSmemQK, kChunksQK>(
      static_cast<u16 *>(p.dq) + outer * p.dq_batch_stride + head * p.dq_head_stride +
          (seq.q_row0 + m0) * p.dq_row_stride,
      p.dq_row_stride, smem, seqlen_q - m0, tid);
}
