// The sm90 backward's consumers (bwd_sm90.cuh): the two consumer
// warpgroups' work on each of the CTA's work items: per query tile S^T and
// dP^T, P^T and dS^T in registers, dV and dK accumulated across the tiles,
// dS^T through shared memory for dQ's part (bwd_sm90_dq.cuh); then the
// item's dK and dV (bwd_sm90_epilogue.cuh).
#pragma once

#include "bwd_sm90_dq.cuh"
#include "bwd_sm90_epilogue.cuh"
#include "bwd_sm90_layout.cuh"
#include "bwd_sm90_work.cuh"
#include "common/bwd_params.cuh"
#include "common/online_softmax.cuh"
#include "common/ptx.cuh"
#include "common/score_policy.cuh"
#include "common/sequence.cuh"
#include "common/sm90.cuh"
#include "common/sm90_wgmma.cuh"
#include "common/types.cuh"

namespace flashjit {
namespace bwd_sm90 {

// A wgmma descriptor of Q, K, V or dO, in their swizzle rows.
__device__ __forceinline__ u64 qkv_descriptor(u32 addr, u32 lbo, u32 sbo) {
  return smem_descriptor_swizzled<kRowBytes>(addr, lbo, sbo);
}
constexpr float kLog2e = 1.4426950408889634f;

// A warp's 16 rows of K or V as the A fragments of S^T's or dP^T's first
// kSteps k16 steps (kKFragmentSteps, kVFragmentSteps), from the swizzled
// tile at `tile` by ldmatrix: matrix m = lane / 8 is rows 8 (m % 2).. and
// k-columns 8 (m / 2).. of the step, lane l giving row l % 8's 16-byte chunk.
template <int kSteps>
__device__ __forceinline__ void load_row_fragments(u32 (&frag)[kSteps][4], u32 tile, int warp,
                                                   int lane) {
  const int m = lane / 8;
  const int row = warp * 16 + (m % 2) * 8 + lane % 8;
#pragma unroll
  for (int ks = 0; ks < kSteps; ++ks) {
    const int chunk = (ks % kKStepsPerRow) * 2 + m / 2;
    ldmatrix_x4(frag[ks], tile + (ks / kKStepsPerRow) * kKVColBlockBytes +
                              swizzled_chunk_offset(row, chunk, kRowBytes));
  }
}

// A k16 step count as a type, so that one lambda unrolls S^T's (Q/K head
// dim) and dP^T's (V head dim) loops each to its own length.
template <int N>
struct KSteps {
  static constexpr int value = N;
};

// A consumer warpgroup, after its setmaxnreg.inc: `smem` is the aligned
// shared base, `stats` the statistics buffers' generic address, and
// `warpgroup` the kernel's tid / 128. (The consumer warpgroup from it, not
// recomputed from tid: that changed the consumers' register allocation,
// d=128 spills 36 -> 28 bytes, under a score_mod 0 -> 72.)
__device__ __forceinline__ void compute_gradients(const BwdParams &p, unsigned char *smem_raw,
                                                 u32 smem, const Barriers &bars,
                                                 const QueryTileWalk &walk, float *stats,
                                                 int tid, int warpgroup) {
  const float kInf = __int_as_float(0x7f800000);
  WorkPosition at;  // after the loop: the CTA's tile count, for the last "free"
  for (;; at.next_item()) {
    const int item = read_item(p, bars, at.items());
    if (item >= p.work_items) break;
    const WorkKeys keys = Scheduler::keys_of(p, item);  // lambdas below capture them: no structured binding
    const int n0 = keys.n0, kv_head = keys.kv_head, batch = keys.batch;
    const Sequence seq(p, batch);
    const int seqlen_q = kVarlen ? seq.seqlen_q : walk.dense_seqlen_q;
    const int seqlen_k = kVarlen ? seq.seqlen_k : walk.dense_seqlen_k;
    const i64 offset = kVarlen ? seq.offset : walk.dense_offset;  // bottom-right alignment
    // The LSE's (and D's, and the dQ accumulator's) row of query q of `head`.
    auto lse_row = [&](int head, int q) -> i64 {
      if constexpr (kVarlen) return seq.lse_row(p, head, q);
      return (static_cast<i64>(batch) * p.heads_q + head) * seqlen_q + q;
    };
    // Its row of D and of the dQ accumulator (common/sequence.cuh).
    auto workspace_row = [&](int head, int q) -> i64 {
      if constexpr (kVarlen) return seq.workspace_row(p, head, q);
      return lse_row(head, q);
    };
    const QueryTiles tiles = walk.query_tiles(seq, n0, batch, kv_head);
    const int iterations = tiles.iterations;
    const int cwg = warpgroup - 1;  // consumer warpgroup
    const int ctid = tid % 128;
    const int warp = ctid / 32;  // rows (keys) 16*warp.. of the warpgroup's 64
    const int lane = tid % 32;
    const int group = lane / 4;      // fragment row (and row + 8)
    const int quad_lane = lane % 4;  // fragment column pair
    const ConsumerThread thread{cwg, warp, group, quad_lane};
    // This warpgroup's first key (of the CTA's), first query column of S^T (of
    // the tile's) and first columns of dK and of dV.
    const int key0 = kSplitHeadDim ? 0 : cwg * 64;
    const int query0 = kSplitHeadDim ? cwg * kSN : 0;
    const int k_col0 = kSplitHeadDim ? cwg * kKN : 0;
    const int v_col0 = kSplitHeadDim ? cwg * kVN : 0;

    // Descriptor bases from run-time shared addresses (see common/sm90.cuh).
    // K-major: this warpgroup's 64 rows of K and V (the A operands of S^T, dP^T).
    const u64 k_rows_desc = qkv_descriptor(smem + kOffsetK + key0 * kRowBytes, 16, kAtomBytes);
    const u64 v_rows_desc = qkv_descriptor(smem + kOffsetV + key0 * kRowBytes, 16, kAtomBytes);
    // MN-major K for dQ = dS K: all the CTA's keys (or the warpgroup's own),
    // this warpgroup's columns.
    const u64 k_cols_desc =
        qkv_descriptor(smem + kOffsetK +
                           (kDQOwnKeys     ? cwg * 64 * kRowBytes
                            : kDQSplitRows ? 0
                                           : cwg * (kDQN / kAtomCols) * kKVColBlockBytes),
                       kKVColBlockBytes, kAtomBytes);

    float acc_dk[kKRegisters], acc_dv[kVRegisters];
#pragma unroll
    for (int i = 0; i < kKRegisters; ++i) acc_dk[i] = 0.f;
#pragma unroll
    for (int i = 0; i < kVRegisters; ++i) acc_dv[i] = 0.f;

    // LSE (+inf past seqlen_q, so P = 0 there) and D of query column `ctid`
    // of this warpgroup's S^T in tile `it`, loaded one tile ahead: the L2
    // latency hides under a whole tile's work instead of stalling the store
    // before the barrier. Stored as loaded, and taken to base 2 where it is
    // read: ptxas hoisted that multiply to just after the load, where it
    // waited out the load's latency, and the stats barrier made the
    // warpgroup's other warps wait with it (ncu, d=128 8k: 2% + 8% of the
    // kernel's stall samples).
    // The tile's map entry comes with them (`entry`, read once a tile).
    auto load_stats = [&](int it, float &lse, float &d, int &entry) {
      lse = kInf;
      d = 0.f;
      const int head = kv_head * p.heads_per_kv + walk.tile_head(tiles, it);
      entry = walk.tile_entry(tiles, it);
      const int q = entry_m_block(entry) * kBlockM + query0 + ctid;
      if (ctid < kSN && q < seqlen_q) {
        lse = p.lse[lse_row(head, q)];
        d = p.dsum[workspace_row(head, q)];
      }
    };
    float next_lse, next_d;
    int next_entry = 0;
    if (iterations > 0) load_stats(0, next_lse, next_d, next_entry);

    // The transposed tile (16 bits, 128-byte swizzled, keys as rows) of this
    // warpgroup's S^T-shaped fragments: dS^T for dQ, and P^T under the split.
    auto store_transposed = [&](u32 tile, const u32(&frag)[kSSteps][4]) {
      // frag[kk][j] is the 8x8 matrix stmatrix_x4 takes for keys 8 (j%2)..
      // of the warp's 16 and the queries of n8 tile 2kk + j/2; lane l's
      // address, matrix l/8's row l%8, is one 16-byte chunk of a key's row.
      const int m = lane / 8, r = lane % 8;
      const int key = key0 + warp * 16 + (m % 2) * 8 + r;
#pragma unroll
      for (int kk = 0; kk < kSSteps; ++kk) {
        const int q0 = query0 + (2 * kk + m / 2) * 8;
        const u32 addr = tile + (q0 / 64) * kDsColBlockBytes + key * kDsRowBytes +
                         ((((q0 % 64) / 8) ^ r) << 4);
        stmatrix_x4(addr, frag[kk]);
      }
    };


    if (iterations > 0) mbarrier_wait(bars.kv_full(), at.kv_loads());
    u32 k_frag[kKFragmentSteps > 0 ? kKFragmentSteps : 1][4];
    u32 v_frag[kVFragmentSteps > 0 ? kVFragmentSteps : 1][4];
    if constexpr (kKFragmentSteps > 0)
      if (iterations > 0) load_row_fragments(k_frag, smem + kOffsetK, warp, lane);
    if constexpr (kVFragmentSteps > 0)
      if (iterations > 0) load_row_fragments(v_frag, smem + kOffsetV, warp, lane);
    // Fenced around S^T's and dP^T's MMAs, as their accumulators.
    auto fence_row_fragments = [&] {
      if constexpr (kKFragmentSteps > 0)
#pragma unroll
        for (int ks = 0; ks < kKFragmentSteps; ++ks) wgmma_fence_operands(k_frag[ks]);
      if constexpr (kVFragmentSteps > 0)
#pragma unroll
        for (int ks = 0; ks < kVFragmentSteps; ++ks) wgmma_fence_operands(v_frag[ks]);
    };
    // dS^T's A fragments (in registers for dK), declared across the tiles:
    // with kDKIntoNextTile the last tile's dK reads them until the next
    // tile's first wait.
    u32 ds_frag[kSSteps][4];
    for (int it = 0; it < iterations; ++it) {
      // Stages, phases and double buffers count the CTA's tiles over its items.
      const u32 tile = at.tiles() + it;
      const int stage = static_cast<int>(tile % kStages);
      const int head = kv_head * p.heads_per_kv + walk.tile_head(tiles, it);
      const int entry = next_entry;  // load_stats(it) read it
      const int m0 = entry_m_block(entry) * kBlockM;
      // mask_mod per element only where the map does not show the tile whole.
      const bool masked = !kBlockMap || !(entry & kBlockMapFull);
      const u32 q_tile = smem + kOffsetQ + stage * kQTileBytes;
      const u32 do_tile = smem + kOffsetDO + stage * kDOTileBytes;
      const u32 ds_tile = smem + kOffsetDS + (tile % 2) * kDsBufferBytes;
      mbarrier_wait(bars.full(stage), (tile / kStages) & 1);

      // ---- S^T = K Q^T and dP^T = V dO^T, in kSParts passes over the queries ----
      // One commit group of acc = A B^T, A this warpgroup's 64 rows of K or V
      // and B kSPartN rows of the Q or dO tile from query `col0` of its S^T,
      // both K-major: k-step ks is column block ks/4, byte (ks%4)*32 within
      // the 128-byte row. A's first kFragmentSteps steps from the fragments
      // in registers.
      float acc_s[kSPartRegisters], acc_dp[kSPartRegisters];
      auto issue_s_dp = [&](int col0) {
        const u64 q_desc = qkv_descriptor(q_tile + (query0 + col0) * kRowBytes, 16, kAtomBytes);
        const u64 do_desc = qkv_descriptor(do_tile + (query0 + col0) * kRowBytes, 16, kAtomBytes);
        wgmma_fence_operands(acc_s);
        wgmma_fence_operands(acc_dp);
        fence_row_fragments();
        wgmma_fence();
        auto issue = [&](float(&acc)[kSPartRegisters], u64 a_desc, const auto &a_frag, u64 b_desc,
                         auto steps, auto fragment_steps) {
          constexpr int kFrom = decltype(fragment_steps)::value;
#pragma unroll
          for (int ks = 0; ks < decltype(steps)::value; ++ks) {
            const int a_off = (ks / kKStepsPerRow) * kKVColBlockBytes + (ks % kKStepsPerRow) * 32;
            const int b_off = (ks / kKStepsPerRow) * kQColBlockBytes + (ks % kKStepsPerRow) * 32;
            if (ks < kFrom)
              Wgmma<Element, kSPartN>::rs(acc, a_frag[ks < kFrom ? ks : 0], b_desc + (b_off >> 4),
                                          ks > 0);
            else
              Wgmma<Element, kSPartN>::ss(acc, a_desc + (a_off >> 4), b_desc + (b_off >> 4),
                                          ks > 0);
          }
          wgmma_commit();
        };
        issue(acc_s, k_rows_desc, k_frag, q_desc, KSteps<kQKSteps>{}, KSteps<kKFragmentSteps>{});
        issue(acc_dp, v_rows_desc, v_frag, do_desc, KSteps<kVSteps>{}, KSteps<kVFragmentSteps>{});
        wgmma_fence_operands(acc_s);
        wgmma_fence_operands(acc_dp);
      };
      auto wait_s_dp = [&] {
        wgmma_wait<0>();
        wgmma_fence_operands(acc_s);
        wgmma_fence_operands(acc_dp);
        fence_row_fragments();
      };
      issue_s_dp(0);
      // This tile's LSE and D into the warpgroup's own buffer, and the next
      // tile's loaded. Double-buffered: buffer tile%2 was last read two tiles
      // back (in this item or the one before), and every thread of the
      // warpgroup finished those reads before the last tile's barrier, which
      // this thread has passed.
      float *const lse_tile = stats + cwg * (kStatsBytes / 4) + (tile % 2) * 2 * kSN;
      if (ctid < kSN) {
        lse_tile[ctid] = next_lse;
        lse_tile[kSN + ctid] = next_d;
      }
      if (it + 1 < iterations) load_stats(it + 1, next_lse, next_d, next_entry);
      named_barrier_sync(kBarrierStats + cwg, 128);
      wait_s_dp();
      if constexpr (kDKIntoNextTile) {
        // The tile before's dK is done too: its stage goes back.
        wgmma_fence_operands(acc_dk);
#pragma unroll
        for (int kk = 0; kk < kSSteps; ++kk) wgmma_fence_operands(ds_frag[kk]);
        if (it > 0 && lane == 0)
          mbarrier_arrive(bars.empty(static_cast<int>((tile - 1) % kStages)));
      }

      // ---- P^T (in acc_s) and dS^T = P^T (dP^T - D) (in acc_dp) -------------------
      // acc[4*nt + 2*h + c] is key row (16*warp + group + 8h) of the warpgroup,
      // query column col0 + 8nt + 2*quad_lane + c of its S^T. Where an edge or
      // the key tail cuts the tile, per key the visible queries are [q_lo, q_hi]
      // in tile coordinates; P = 0 elsewhere (and so dS = 0).
      int q_lo[2] = {-1, -1}, q_hi[2] = {kBlockM, kBlockM};
      const bool cut = Score::tile_is_cut(p, seqlen_k, m0, kBlockM, n0, kBlockN, offset);
      if (cut) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int key = n0 + key0 + warp * 16 + group + h * 8;
          Score::visible_queries(p, seqlen_k, key, m0, kBlockM, offset, q_lo[h], q_hi[h]);
        }
      }
      const float *const dsum = lse_tile + kSN;
      // Without modifiers, a column pair's LSE and D in one 8-byte load each,
      // from the buffer's shared address (with a mask_mod it spilled 8 bytes
      // at d=64, where the 4-byte loads spilled none).
      constexpr bool kModified = Score::kModified;
      constexpr bool kPairLoads = !kModified;
      const u32 stats_pairs = smem + kOffsetStats + cwg * kStatsBytes + (tile % 2) * 2 * kSN * 4;
      // The element loop, with the modifiers or without them: a mask_mod
      // alone (no score_mod) is skipped whole on a tile the map shows whole,
      // with no per-element index or test (they ran causal-as-mask_mod at
      // 0.90x the built-in causal on the H200, ncu counting 18% more
      // instructions). Two copies from the 128-key head dims up: at d=64
      // (128-row tiles) the second spilled (56 bytes).
      constexpr bool kSkipShown = !Modifiers::kScore && Modifiers::kMask && kHeadDim >= 96;
      auto recompute = [&](auto modified, auto may_cut, int col0) {
#pragma unroll
        for (int nt = 0; nt < kSPartTiles; ++nt) {
          float lse_pair[2], d_pair[2];
          if constexpr (kPairLoads) {
            const u32 at = stats_pairs + (col0 + nt * 8 + quad_lane * 2) * 4;
            ld_shared_f32x2(at, lse_pair);
            ld_shared_f32x2(at + kSN * 4, d_pair);
          } else {
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              lse_pair[c] = lse_tile[col0 + nt * 8 + quad_lane * 2 + c];
              d_pair[c] = dsum[col0 + nt * 8 + quad_lane * 2 + c];
            }
          }
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const int col = col0 + nt * 8 + quad_lane * 2 + c;
            const int q_local = query0 + col;
            const float lse = lse_pair[c] * kLog2e, d = d_pair[c];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int i = 4 * nt + 2 * h + c;
              float s = acc_s[i];
              s = Score::softcap(s, p);
              float logit = s * p.softmax_scale_log2;  // base 2
              float grad = 1.f;                        // d score_mod / d score
              if constexpr (decltype(modified)::value)
                logit = Score::logit2(p, s, batch, head, m0 + q_local,
                                      n0 + key0 + warp * 16 + group + h * 8, seqlen_q, seqlen_k,
                                      grad, masked);
              float prob = probability_from_lse(logit, lse);
              if (decltype(may_cut)::value && (q_local < q_lo[h] || q_local > q_hi[h])) prob = 0.f;
              float ds = prob * (acc_dp[i] - d);
              if constexpr (Modifiers::kScore) ds *= grad;
              if constexpr (kSoftcap) ds *= Score::softcap_grad(s);
              acc_s[i] = prob;
              acc_dp[i] = ds;
            }
          }
        }
      };
      // Without modifiers, a tile no edge cuts (most of them) runs a copy of
      // the loop without the per-element bounds test. With the uniform index,
      // the paired loads and stmatrix, d=128 full 8k went 505 -> 548-568
      // TFLOP/s on the H200 and d=64 399 -> 471; one copy with the hidden
      // elements zeroed after it on cut tiles was no faster (d=64 causal 455
      // against 488).
      auto recompute_part = [&](int col0) {
        if constexpr (kSkipShown) {
          if (masked)
            recompute(BoolConstant<true>{}, BoolConstant<true>{}, col0);
          else
            recompute(BoolConstant<false>{}, BoolConstant<true>{}, col0);
        } else if constexpr (!kModified) {
          if (cut)
            recompute(BoolConstant<false>{}, BoolConstant<true>{}, col0);
          else
            recompute(BoolConstant<false>{}, BoolConstant<false>{}, col0);
        } else {
          recompute(BoolConstant<kModified>{}, BoolConstant<true>{}, col0);
        }
      };

      // n8 tiles 2kk and 2kk+1 of S^T are exactly the A fragment of k-step kk.
      u32 p_frag[kSSteps][4];
      // MN-major dO and Q (B of dV and dK): k-step kk = query rows 16kk.. = two
      // 8-row atoms on; this warpgroup's columns of them.
      const u64 do_cols_desc = qkv_descriptor(do_tile + (v_col0 / kAtomCols) * kQColBlockBytes,
                                              kQColBlockBytes, kAtomBytes);
      const u64 q_cols_desc = qkv_descriptor(q_tile + (k_col0 / kAtomCols) * kQColBlockBytes,
                                             kQColBlockBytes, kAtomBytes);
      // dV's and dK's accumulators and the A fragments of their first
      // `steps` k-steps, fenced around the MMAs that read them.
      auto fence_products = [&](auto steps) {
        wgmma_fence_operands(acc_dv);
        wgmma_fence_operands(acc_dk);
#pragma unroll
        for (int kk = 0; kk < decltype(steps)::value; ++kk) {
          wgmma_fence_operands(p_frag[kk]);
          wgmma_fence_operands(ds_frag[kk]);
        }
      };
      // dV += P^T dO and dK += dS^T Q over k-steps [from, to), A (P^T and
      // dS^T) from registers.
      auto issue_dv = [&](auto from, auto to) {
#pragma unroll
        for (int kk = decltype(from)::value; kk < decltype(to)::value; ++kk)
          Wgmma<Element, kVN>::rs_bt(acc_dv, p_frag[kk],
                                     do_cols_desc + ((kk * 16 * kRowBytes) >> 4), 1);
      };
      auto issue_dk_steps = [&](auto from, auto to) {
#pragma unroll
        for (int kk = decltype(from)::value; kk < decltype(to)::value; ++kk)
          Wgmma<Element, kKN>::rs_bt(acc_dk, ds_frag[kk],
                                     q_cols_desc + ((kk * 16 * kRowBytes) >> 4), 1);
      };
#pragma unroll
      for (int part = 0; part < kSParts; ++part) {
        if (part > 0) {
          issue_s_dp(part * kSPartN);
          if constexpr (kEarlyPartProducts) {
            // The part before's dV and dK (its P^T and dS^T fragments as A)
            // run under this part's element-wise work.
            fence_products(KSteps<kSPartSteps>{});
            wgmma_fence();
            issue_dv(KSteps<0>{}, KSteps<kSPartSteps>{});
            issue_dk_steps(KSteps<0>{}, KSteps<kSPartSteps>{});
            wgmma_commit();
            wgmma_fence_operands(acc_dv);
            wgmma_fence_operands(acc_dk);
            wgmma_wait<1>();  // this part's S^T and dP^T done
            wgmma_fence_operands(acc_s);
            wgmma_fence_operands(acc_dp);
            fence_row_fragments();
          } else {
            wait_s_dp();
          }
        }
        recompute_part(part * kSPartN);
#pragma unroll
        for (int kk = 0; kk < kSPartSteps; ++kk)
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            p_frag[part * kSPartSteps + kk][j] =
                Ops::pack(acc_s[8 * kk + 2 * j], acc_s[8 * kk + 2 * j + 1]);
            ds_frag[part * kSPartSteps + kk][j] =
                Ops::pack(acc_dp[8 * kk + 2 * j], acc_dp[8 * kk + 2 * j + 1]);
          }
      }

      if constexpr (kSplitHeadDim) {
        // ---- P^T and dS^T to shared memory: both warpgroups' query halves ------
        store_transposed(ds_tile, ds_frag);
        store_transposed(ds_tile + kDsBytes, p_frag);
        fence_proxy_async();  // the generic-proxy stores, before wgmma (async proxy) reads them
        named_barrier_sync(kBarrierDs, 2 * 128);

        // ---- dV += P^T dO, dK += dS^T Q (SS) and dQ's part (kDQUnderLastMma) ---
        float acc_dq[kDQRegisters];
        if constexpr (kDQUnderLastMma) issue_dq(acc_dq, ds_tile, cwg, k_cols_desc);
        const u64 p_desc = smem_descriptor_sw128(ds_tile + kDsBytes, 16, 1024);
        const u64 ds_desc = smem_descriptor_sw128(ds_tile, 16, 1024);
        wgmma_fence_operands(acc_dv);
        wgmma_fence_operands(acc_dk);
        wgmma_fence();
        // K-major P^T and dS^T: k-step kk is byte 32kk of the 128-byte row.
#pragma unroll
        for (int kk = 0; kk < kPSteps; ++kk)
          Wgmma<Element, kVN>::ss_bt(acc_dv, p_desc + ((kk * 32) >> 4),
                                     do_cols_desc + ((kk * 16 * kRowBytes) >> 4), 1);
#pragma unroll
        for (int kk = 0; kk < kPSteps; ++kk)
          Wgmma<Element, kKN>::ss_bt(acc_dk, ds_desc + ((kk * 32) >> 4),
                                     q_cols_desc + ((kk * 16 * kRowBytes) >> 4), 1);
        wgmma_commit();
        wgmma_fence_operands(acc_dv);
        wgmma_fence_operands(acc_dk);
        // Once dV and dK are done, Q and dO of this stage are free.
        auto release_stage = [&] {
          wgmma_fence_operands(acc_dv);
          wgmma_fence_operands(acc_dk);
          if (lane == 0) mbarrier_arrive(bars.empty(stage));
        };
        if constexpr (kDQUnderLastMma) {
          wgmma_wait<1>();  // dQ done, dV and dK running
          wgmma_fence_operands(acc_dq);
          reduce_dq(p, acc_dq, thread, smem, tile, seq, batch, head, m0, seqlen_q);
          wgmma_wait<0>();
          release_stage();
        } else {
          issue_dq(acc_dq, ds_tile, cwg, k_cols_desc);
          wgmma_wait<1>();  // dV and dK done, dQ running
          release_stage();
          wgmma_wait<0>();
          wgmma_fence_operands(acc_dq);
          reduce_dq(p, acc_dq, thread, smem, tile, seq, batch, head, m0, seqlen_q);
        }
      } else {
        // ---- dV += P^T dO, dK += dS^T Q (A from registers) -----------------------
        auto fence_rs_operands = [&] { fence_products(KSteps<kPSteps>{}); };
        // (The part before's steps already issued, kEarlyPartProducts.)
        constexpr int kFirstStep = kEarlyPartProducts ? (kSParts - 1) * kSPartSteps : 0;
        auto issue_dk = [&] { issue_dk_steps(KSteps<kFirstStep>{}, KSteps<kPSteps>{}); };
        fence_rs_operands();
        wgmma_fence();
        issue_dv(KSteps<kFirstStep>{}, KSteps<kPSteps>{});
        if constexpr (!kDQUnderLastMma) issue_dk();
        wgmma_commit();
        wgmma_fence_operands(acc_dv);
        wgmma_fence_operands(acc_dk);

        // ---- dS^T to shared memory, while dV (and dK) run ---------------------------
        store_transposed(ds_tile, ds_frag);
        fence_proxy_async();  // the generic-proxy stores, before wgmma (async proxy) reads them
        if constexpr (kDQOwnKeys)
          named_barrier_sync(kBarrierStats + cwg, 128);  // this warpgroup's rows of dS^T
        else
          named_barrier_sync(kBarrierDs, 2 * 128);  // both warpgroups' rows

        // ---- dQ's part, reduced into the fp32 accumulator ----------------------
        // Once dV and dK are done, Q and dO of this stage are free.
        auto release_stage = [&] {
          fence_rs_operands();
          if (lane == 0) mbarrier_arrive(bars.empty(stage));
        };
        float acc_dq[kDQRegisters];
        if constexpr (kDQUnderLastMma) {
          issue_dq(acc_dq, ds_tile, cwg, k_cols_desc);
          fence_rs_operands();
          wgmma_fence();
          issue_dk();
          wgmma_commit();
          wgmma_wait<1>();  // dV and dQ done, dK running
          fence_rs_operands();
          wgmma_fence_operands(acc_dq);
          reduce_dq(p, acc_dq, thread, smem, tile, seq, batch, head, m0, seqlen_q);
          if constexpr (!kDKIntoNextTile) {
            wgmma_wait<0>();
            release_stage();
          } else if (it + 1 == iterations) {
            wgmma_wait<0>();  // the item's last dK, before its epilogue
            release_stage();
          }
        } else {
          wgmma_wait<0>();
          release_stage();
          issue_dq(acc_dq, ds_tile, cwg, k_cols_desc);
          wgmma_wait<0>();
          wgmma_fence_operands(acc_dq);
          reduce_dq(p, acc_dq, thread, smem, tile, seq, batch, head, m0, seqlen_q);
        }
      }
    }
    // K and V read for the last time: the producer may load the next item's.
    if (kResident && iterations > 0) {
      // (Its address from the shared base again: kept live across the loop it
      // spilled the consumers, d=128 with a mask_mod 0 -> 28 bytes.)
      const u32 base = (smem_address(smem_raw) + opaque(kSmemAlign - 1)) & ~u32(kSmemAlign - 1);
      if (lane == 0) mbarrier_arrive(base + kOffsetBarriers + 8);
      at.next_kv_load();
    }
    at.add_tiles(iterations);

    // ---- epilogue: dK (scaled) and dV from the fragments --------------------------
    store_dk_dv(p, thread, seq, batch, kv_head, n0, seqlen_k, acc_dk, acc_dv);
    if constexpr (!kResident) break;
  }
  // The last "free" of the writer of the CTA's last tile (see the writer).
  // (The warpgroup from the thread index again: one kept live across the
  // loop spilled the consumers at d=64.)
  if constexpr (kDQStaged)
    named_barrier_sync(
        kBarrierDQFree + 4 * dq_writer_of(at.tiles() - 1) + static_cast<int>(threadIdx.x) / 128 - 1,
        kDQBarrierThreads);
}

}  // namespace bwd_sm90
}  // namespace flashjit
