// FlashAttention-2 backward for sm_80 and newer (mma.sync tensor cores).
//
// Three kernels, run in order on one stream (the first and last are in
// bwd_rowwise.cuh, shared with the sm90 family):
//   flashjit_bwd_preprocess  D = rowsum(dO * O) in fp32, and the fp32 dQ
//                            accumulator zeroed (one thread per query row);
//   flashjit_bwd_sm80        dK, dV and the dQ contributions (below);
//   flashjit_bwd_convert_dq  dQ = softmax_scale * accumulator, to 16 bits.
// With kDeterministic the main kernel leaves dQ alone and, instead of the
// conversion, flashjit_bwd_dq computes it per query tile, looping over keys
// with no atomics: bit-identical results run to run, for two more GEMMs
// (S and dP are recomputed there).
//
// Tiling of the main kernel. One CTA per (kBlockN keys, KV head, batch). K
// and V of its keys stay in shared memory; dK and dV accumulate in registers
// across every query head of the KV head's group (GQA sums there, for free)
// and every query tile of kBlockM rows that can see these keys (causal and
// window bounds skip the rest). Per query tile, with P never stored in
// global memory (it is recomputed from the forward's LSE):
//   (a) S^T = K Q^T and dP^T = V dO^T, warps tiled over (keys, queries);
//       P^T = exp2(S^T * scale_log2 - LSE_log2), masked where an edge cuts
//       the tile; dS^T = P^T * (dP^T - D) (times 1 - tanh^2 under softcap);
//       P^T and dS^T go to shared memory as 16-bit operands;
//   (b) dV += P^T dO and dK += dS^T Q, warps tiled over (keys, head dim);
//   (c) dQ_tile = dS K, warps tiled over (queries, head dim), added to the
//       fp32 accumulator with atomics (red.global.add).
// Pipeline: with kStages = 2, Q, dO, LSE and D of the next query tile load
// by cp.async into the other half of a double buffer while this one is
// computed; kStages = 1 (large head dims on 163 KB or 99 KB parts) loads
// each tile after the previous one is done. Shared
// tiles are 128-byte swizzled; head dims are padded (with zeros) to
// multiples of 32 for the MMAs.
//
// softmax_scale (and the softcap's chain rule) multiply dS; the scale is
// applied once, to dK at the end and to dQ in the convert kernel.
//
// The generator's prelude defines flashjit::cfg (kHeadDimQK, kHeadDimV,
// kBlockM, kBlockN, kWarps, kStages, kSoftcap, kDeterministic, Element,
// Mask). The layout arithmetic is BwdSm80Layout (common/bwd_sm80_layout.cuh),
// which the host twin (generator/bwd_sm80_traits.cpp) compiles too.
#pragma once

#include "bwd_rowwise.cuh"
#include "common/bwd_params.cuh"
#include "common/bwd_sm80_layout.cuh"
#include "common/online_softmax.cuh"
#include "common/ptx.cuh"
#include "common/score_policy.cuh"
#include "common/sequence.cuh"
#include "common/smem_tile.cuh"
#include "common/types.cuh"

namespace flashjit {
namespace bwd_sm80 {

using namespace cfg;
using Ops = ElementOps<Element>;
// Each sequence's lengths and rows: dense, or a packed varlen batch.
using Sequence = SequenceInfo<kVarlen, kSeqUsedK, 0, kBlockN>;

// The layout arithmetic the host twin (generator/bwd_sm80_traits.cpp) uses too.
constexpr BwdSm80Layout kLayout{kHeadDimQK, kHeadDimV, kBlockM, kBlockN, kWarps, kStages};
constexpr int kThreads = kLayout.threads();
constexpr int kDimQK = kLayout.dim_qk();  // MMA extent of the head dims
constexpr int kDimV = kLayout.dim_v();
constexpr int kSmemQK = kLayout.smem_dim_qk();  // shared row lengths
constexpr int kSmemV = kLayout.smem_dim_v();
constexpr int kSmemM = kLayout.smem_dim_m();
constexpr int kChunksQK = kHeadDimQK / 8;
constexpr int kChunksV = kHeadDimV / 8;

// (a) S^T, dP^T: kBlockN x kBlockM over kWarpsSM x kWarpsSN warps.
constexpr int kWarpsSN = kLayout.warps_s_n();
constexpr int kWarpsSM = kLayout.warps_s_m();
constexpr int kSMT = kLayout.s_m_tiles();
constexpr int kSNT = kLayout.s_n_tiles();
// (b) dK, dV: kBlockN x head dim.
constexpr int kWarpsKM = kLayout.warps_kv_m();
constexpr int kWarpsKN = kLayout.warps_kv_n();
constexpr int kKMT = kLayout.kv_m_tiles();
constexpr int kKNTQK = kLayout.kv_n_tiles_qk();
constexpr int kKNTV = kLayout.kv_n_tiles_v();
// (c) dQ: kBlockM x head dim.
constexpr int kWarpsQM = kLayout.warps_q_m();
constexpr int kWarpsQN = kLayout.warps_q_n();
constexpr int kQMT = kLayout.q_m_tiles();
constexpr int kQNT = kLayout.q_n_tiles();  // per column chunk
constexpr int kDQChunks = kLayout.dq_chunks();
constexpr int kDQChunkColumns = kLayout.dq_chunk_columns();

static_assert(kStages == 1 || kStages == 2, "Q/dO single or double buffered");
static_assert(kHeadDimQK % 8 == 0 && kHeadDimQK <= 576, "head_dim_qk: multiple of 8, <= 576");
static_assert(kHeadDimV % 8 == 0 && kHeadDimV <= 576, "head_dim_v: multiple of 8, <= 576");
static_assert(kSMT >= 1 && kBlockN % (16 * kWarpsSM) == 0, "(a) whole m16 tiles of keys per warp");
static_assert(kSNT >= 2 && kSNT % 2 == 0 && kBlockM % (16 * kWarpsSN) == 0,
              "(a) pairs of n8 tiles of queries per warp");
static_assert(kKMT >= 1 && kWarps % kWarpsKM == 0 && kWarpsKN <= 4, "(b) warp tiling");
static_assert(kKNTQK % 2 == 0 && kKNTV % 2 == 0, "(b) pairs of n8 tiles of head dim");
static_assert(kQMT >= 1 && kWarps % kWarpsQM == 0 && kWarpsQN <= 2, "(c) warp tiling");
static_assert(kQNT % 2 == 0, "(c) pairs of n8 tiles of head dim");

// Shared memory, in elements of 16 bits (LSE and D are fp32: two each).
constexpr int kSmemK = kLayout.k_elements();
constexpr int kSmemVTile = kLayout.v_elements();
constexpr int kSmemQ = kLayout.q_elements();
constexpr int kSmemDO = kLayout.do_elements();
constexpr int kSmemP = kLayout.p_elements();
constexpr int kOffV = kLayout.offset_v();
constexpr int kOffQ = kLayout.offset_q();    // kStages of Q
constexpr int kOffDO = kLayout.offset_do();  // kStages of dO
constexpr int kOffP = kLayout.offset_p();    // P^T
constexpr int kOffDS = kLayout.offset_ds();  // dS^T
// LSE_log2[kStages][kBlockM], D[kStages][kBlockM]
constexpr int kOffStats = kLayout.offset_stats();
constexpr int kSmemElements = kLayout.smem_elements();

constexpr float kLog2e = 1.4426950408889634f;

}  // namespace bwd_sm80
}  // namespace flashjit

extern "C" __global__ void __launch_bounds__(flashjit::bwd_sm80::kThreads)
    flashjit_bwd_sm80(const flashjit::BwdParams p) {
  using namespace flashjit;
  using namespace flashjit::bwd_sm80;
  const float kInf = __int_as_float(0x7f800000);

  extern __shared__ __align__(128) unsigned char smem_raw[];
  u16 *const smem = reinterpret_cast<u16 *>(smem_raw);
  const u32 smem_addr = smem_address(smem);
  float *const s_stats = reinterpret_cast<float *>(smem + kOffStats);  // [LSE|D][stage][row]
  constexpr int kStatsD = kStages * kBlockM;  // offset of D in s_stats

  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int n_block = blockIdx.x;
  const int kv_head = blockIdx.y;
  const int batch = blockIdx.z;
  const int n0 = n_block * kBlockN;
  // The CTA's sequence (common/sequence.cuh): its lengths and first rows.
  const Sequence seq(p, batch);
  const int seqlen_q = seq.seqlen_q;
  const int seqlen_k = seq.seqlen_k;
  const i64 offset = seq.offset;  // bottom-right alignment
  const i64 outer = seq.outer;    // the tensors' batch index (0 when packed)

  // The query tiles that see any of these keys (none when the keys lie past
  // the sequence's: a shorter sequence of a varlen batch).
  const TileSpan query_tiles =
      n0 < seqlen_k ? Score::query_tiles(p, seqlen_q, n0, kBlockN, offset, kBlockM)
                    : TileSpan{0, 0};
  const int m_block_begin = query_tiles.first;
  const int m_blocks = query_tiles.count;
  const int iterations = m_blocks * p.heads_per_kv;

  // ---- K and V of this CTA's keys, padding, first query tile -------------
  zero_chunks<kThreads, kBlockN, kSmemQK, kChunksQK, kDimQK / 8>(smem_addr, tid);
  zero_chunks<kThreads, kBlockN, kSmemV, kChunksV, kDimV / 8>(smem_addr + 2 * kOffV, tid);
#pragma unroll
  for (int s = 0; s < kStages; ++s) {
    zero_chunks<kThreads, kBlockM, kSmemQK, kChunksQK, kDimQK / 8>(smem_addr + 2 * (kOffQ + s * kSmemQ),
                                                         tid);
    zero_chunks<kThreads, kBlockM, kSmemV, kChunksV, kDimV / 8>(smem_addr + 2 * (kOffDO + s * kSmemDO),
                                                      tid);
  }
  load_tile_rows<kThreads, kBlockN, kSmemQK, kChunksQK>(
      smem_addr,
      static_cast<const u16 *>(p.k) + outer * p.k_batch_stride + kv_head * p.k_head_stride +
          (seq.k_row0 + n0) * p.k_row_stride,
      p.k_row_stride, seqlen_k - n0, tid);
  load_tile_rows<kThreads, kBlockN, kSmemV, kChunksV>(
      smem_addr + 2 * kOffV,
      static_cast<const u16 *>(p.v) + outer * p.v_batch_stride + kv_head * p.v_head_stride +
          (seq.k_row0 + n0) * p.v_row_stride,
      p.v_row_stride, seqlen_k - n0, tid);

  // Query tile `it`: head kv_head * heads_per_kv + it / m_blocks, rows of
  // m-block m_block_begin + it % m_blocks.
  auto load_query_tile = [&](int it, int stage) {
    const int head = kv_head * p.heads_per_kv + it / m_blocks;
    const int m0 = (m_block_begin + it % m_blocks) * kBlockM;
    const int t = opaque(static_cast<int>(threadIdx.x));
    load_tile_rows<kThreads, kBlockM, kSmemQK, kChunksQK>(
        smem_addr + 2 * (kOffQ + stage * kSmemQ),
        static_cast<const u16 *>(p.q) + outer * p.q_batch_stride + head * p.q_head_stride +
            (seq.q_row0 + m0) * p.q_row_stride,
        p.q_row_stride, seqlen_q - m0, t);
    load_tile_rows<kThreads, kBlockM, kSmemV, kChunksV>(
        smem_addr + 2 * (kOffDO + stage * kSmemDO),
        static_cast<const u16 *>(p.dout) + outer * p.do_batch_stride + head * p.do_head_stride +
            (seq.q_row0 + m0) * p.do_row_stride,
        p.do_row_stride, seqlen_q - m0, t);
    // LSE (in base 2; +inf past seqlen_q, so P = 0 there) and D.
    for (int r = t; r < kBlockM; r += kThreads) {
      const bool valid = m0 + r < seqlen_q;
      s_stats[stage * kBlockM + r] = valid ? p.lse[seq.lse_row(p, head, m0 + r)] * kLog2e : kInf;
      s_stats[kStatsD + stage * kBlockM + r] =
          valid ? p.dsum[seq.workspace_row(p, head, m0 + r)] : 0.f;
    }
  };
  if (iterations > 0) load_query_tile(0, 0);
  cp_async_commit();

  // (b) accumulators: this warp's keys x head-dim slice, over every tile.
  const int kv_m0 = (warp % kWarpsKM) * kKMT * 16;
  float acc_dk[kKMT][kKNTQK][4], acc_dv[kKMT][kKNTV][4];
  zero(acc_dk);
  zero(acc_dv);

  for (int it = 0; it < iterations; ++it) {
    const int stage = kStages == 2 ? (it & 1) : 0;
    if constexpr (kStages == 2) {
      cp_async_wait<0>();
      __syncthreads();  // tile `it` visible; everyone is done with tile it-1
      if (it + 1 < iterations) load_query_tile(it + 1, stage ^ 1);
      cp_async_commit();
    } else {
      if (it > 0) {
        __syncthreads();  // everyone is done with tile it-1: its buffer is free
        load_query_tile(it, 0);
        cp_async_commit();
      }
      cp_async_wait<0>();
      __syncthreads();  // tile `it` visible
    }

    const int head = kv_head * p.heads_per_kv + it / m_blocks;
    const int m0 = (m_block_begin + it % m_blocks) * kBlockM;
    const u32 sK = smem_addr, sV = smem_addr + 2 * kOffV;
    const u32 sQ = smem_addr + 2 * (kOffQ + stage * kSmemQ);
    const u32 sDO = smem_addr + 2 * (kOffDO + stage * kSmemDO);
    const u32 sP = smem_addr + 2 * kOffP, sDS = smem_addr + 2 * kOffDS;
    const float *const lse_log2 = s_stats + stage * kBlockM;
    const float *const dsum = s_stats + kStatsD + stage * kBlockM;

    // ---- (a) S^T, P^T, dP^T, dS^T ------------------------------------------
    {
      const int key0 = (warp % kWarpsSM) * kSMT * 16;
      const int query0 = (warp / kWarpsSM) * kSNT * 8;
      float s[kSMT][kSNT][4];
      zero(s);
      warp_gemm<Element, kSMT, kSNT, kDimQK / 16, false, kSmemQK, false, kSmemQK>(
          s, sK, key0, sQ, query0, 0, lane);
      // The score policy (common/score_policy.cuh): the softcapped scores
      // are kept for dS's softcap derivative.
      float capped[kSoftcap ? kSMT : 1][kSoftcap ? kSNT : 1][4];
      if constexpr (kSoftcap) {
#pragma unroll
        for (int mt = 0; mt < kSMT; ++mt)
#pragma unroll
          for (int nt = 0; nt < kSNT; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              capped[mt][nt][i] = Score::softcap(s[mt][nt][i], p);
              s[mt][nt][i] = capped[mt][nt][i];
            }
      }
      const bool cut = Score::tile_is_cut(p, seqlen_k, m0, kBlockM, n0, kBlockN, offset);
      // P^T = exp2(S^T * scale_log2 - LSE_log2[query]), or of the caller's
      // score_mod (its derivative kept for dS^T) and mask_mod.
      float grad[Modifiers::kScore ? kSMT : 1][Modifiers::kScore ? kSNT : 1][4];
#pragma unroll
      for (int mt = 0; mt < kSMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kSNT; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int q_local = query0 + nt * 8 + (lane % 4) * 2 + (i & 1);
            float logit = s[mt][nt][i] * p.softmax_scale_log2;
            if constexpr (Score::kModified) {
              float g = 1.f;
              logit = Score::logit2(p, s[mt][nt][i], batch, head, m0 + q_local,
                                    n0 + key0 + mt * 16 + lane / 4 + (i / 2) * 8, seqlen_q,
                                    seqlen_k, g);
              if constexpr (Modifiers::kScore) grad[mt][nt][i] = g;
            }
            s[mt][nt][i] = probability_from_lse(logit, lse_log2[q_local]);
          }
      if (cut) {
        // Entries an edge or the seqlen_k tail hides: per row (key), the
        // visible queries are [q_lo, q_hi] in tile coordinates.
#pragma unroll
        for (int mt = 0; mt < kSMT; ++mt)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int key = n0 + key0 + mt * 16 + lane / 4 + h * 8;
            int q_lo, q_hi;  // the queries that see this key, tile-local
            Score::visible_queries(p, seqlen_k, key, m0, kBlockM, offset, q_lo, q_hi);
#pragma unroll
            for (int nt = 0; nt < kSNT; ++nt)
#pragma unroll
              for (int c = 0; c < 2; ++c) {
                const int q_local = query0 + nt * 8 + (lane % 4) * 2 + c;
                if (q_local < q_lo || q_local > q_hi) s[mt][nt][h * 2 + c] = 0.f;
              }
          }
      }
      store_fragments<Element, kSMT, kSNT, kSmemM>(smem + kOffP, s, key0, query0, lane, 1.f);

      float dp[kSMT][kSNT][4];
      zero(dp);
      warp_gemm<Element, kSMT, kSNT, kDimV / 16, false, kSmemV, false, kSmemV>(
          dp, sV, key0, sDO, query0, 0, lane);
#pragma unroll
      for (int mt = 0; mt < kSMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kSNT; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int q_local = query0 + nt * 8 + (lane % 4) * 2 + (i & 1);
            float ds = s[mt][nt][i] * (dp[mt][nt][i] - dsum[q_local]);
            if constexpr (Modifiers::kScore) ds *= grad[mt][nt][i];
            if constexpr (kSoftcap) ds *= Score::softcap_grad(capped[mt][nt][i]);
            dp[mt][nt][i] = ds;
          }
      store_fragments<Element, kSMT, kSNT, kSmemM>(smem + kOffDS, dp, key0, query0, lane, 1.f);
    }
    __syncthreads();  // P^T and dS^T complete

    // ---- (b) dV += P^T dO, dK += dS^T Q --------------------------------------
    {
      const int d0 = (warp / kWarpsKM) * kKNTQK * 8;
      const int dv0 = (warp / kWarpsKM) * kKNTV * 8;
      warp_gemm<Element, kKMT, kKNTV, kBlockM / 16, false, kSmemM, true, kSmemV>(
          acc_dv, sP, kv_m0, sDO, dv0, 0, lane);
      warp_gemm<Element, kKMT, kKNTQK, kBlockM / 16, false, kSmemM, true, kSmemQK>(
          acc_dk, sDS, kv_m0, sQ, d0, 0, lane);
    }

    // ---- (c) dQ_tile = dS K, added to the fp32 accumulator ------------------
    if constexpr (!kDeterministic) {
      const int q0 = (warp % kWarpsQM) * kQMT * 16;
      // The accumulator's rows: common/sequence.cuh, workspace_row.
      float *const accum = p.dq_accum + seq.workspace_row(p, head, 0) * kHeadDimQK;
#pragma unroll 1
      for (int chunk = 0; chunk < kDQChunks; ++chunk) {
        const int d0 = chunk * kDQChunkColumns + (warp / kWarpsQM) * kQNT * 8;
        float dq[kQMT][kQNT][4];
        zero(dq);
        warp_gemm<Element, kQMT, kQNT, kBlockN / 16, true, kSmemM, true, kSmemQK>(
            dq, sDS, q0, sK, d0, 0, lane);
#pragma unroll
        for (int mt = 0; mt < kQMT; ++mt)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int row = m0 + q0 + mt * 16 + lane / 4 + h * 8;
            if (row < seqlen_q) {
#pragma unroll
              for (int nt = 0; nt < kQNT; ++nt) {
                const int col = d0 + nt * 8 + (lane % 4) * 2;
                if (col < kHeadDimQK) {
                  atomicAdd(accum + static_cast<i64>(row) * kHeadDimQK + col, dq[mt][nt][h * 2]);
                  atomicAdd(accum + static_cast<i64>(row) * kHeadDimQK + col + 1,
                            dq[mt][nt][h * 2 + 1]);
                }
              }
            }
          }
      }
    }
  }

  // ---- epilogue: dK (scaled), dV through the K/V tiles ----------------------
  cp_async_wait<0>();
  __syncthreads();
  {
    const int d0 = (warp / kWarpsKM) * kKNTQK * 8;
    const int dv0 = (warp / kWarpsKM) * kKNTV * 8;
    store_fragments<Element, kKMT, kKNTQK, kSmemQK>(smem, acc_dk, kv_m0, d0, lane, p.softmax_scale);
    store_fragments<Element, kKMT, kKNTV, kSmemV>(smem + kOffV, acc_dv, kv_m0, dv0, lane, 1.f);
  }
  __syncthreads();
  store_tile<kThreads, kBlockN, kSmemQK, kChunksQK>(static_cast<u16 *>(p.dk) + outer * p.dk_batch_stride +
                                              kv_head * p.dk_head_stride +
                                              (seq.k_row0 + n0) * p.dk_row_stride,
                                          p.dk_row_stride, smem, seqlen_k - n0, tid);
  store_tile<kThreads, kBlockN, kSmemV, kChunksV>(static_cast<u16 *>(p.dv) + outer * p.dv_batch_stride +
                                            kv_head * p.dv_head_stride +
                                            (seq.k_row0 + n0) * p.dv_row_stride,
                                        p.dv_row_stride, smem + kOffV, seqlen_k - n0, tid);
}
