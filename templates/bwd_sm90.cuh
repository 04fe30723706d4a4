// FlashAttention-3 style backward for sm_90a (TMA + wgmma + warp specialisation).
//
// Three kernels, run in order on one stream: flashjit_bwd_preprocess and
// flashjit_bwd_convert_dq (bwd_rowwise.cuh, shared with the sm80 family) and
// flashjit_bwd_sm90 below, which computes dK, dV and adds dQ's
// contributions to the fp32 accumulator.
//
// Tiling. One work item per (kBlockN keys, KV head, batch), in sections of
// (KV head, batch) pairs with the first (under a mask the heaviest) key
// blocks first, in the deterministic mode at times the last (Scheduler::keys_of,
// BwdSm90Traits::dispatch_order). Where kResident,
// a CTA per SM takes items until they run out, in the order the hardware
// would dispatch CTAs (the producer fetches the next from a counter and
// passes it to the other roles through two shared slots), so that one
// item's epilogue and last dQ adds overlap the next one's K, V, Q and dO
// loads (H200, bf16, 16k tokens: +2.6-4.3% at 512 tokens, +1-3% at 1-2k,
// within 1% from 4k); else (a caller's score_mod or mask_mod) a CTA per
// item. K and V rows stay in shared memory and dK and dV accumulate in
// registers across every query head of the KV head's group (GQA sums there)
// and every query tile of kBlockM rows that can see these keys (causal and
// window bounds skip the rest). The two consumer warpgroups share the work
// one of two ways:
//   own keys (tiled head dims 32 to 128, kBlockN = 128): each owns 64 of the
//     keys, their S^T and dP^T over the whole query tile and their dK and
//     dV over the whole head dim; also Q/K tiled 192 beside V tiled at most
//     128 (192/128) where kBlockN = 128, with S^T and dP^T in two passes of
//     half the query tile each (kSParts), P^T and dS^T packed between them,
//     so that their fp32 accumulators never sit beside all of dK's 96 and
//     dV's 64 registers: half the L2 traffic per FLOP of the split's 64
//     keys (Q's and dO's loads, dQ's reduce-adds), which bound it there;
//   split head dim (tiled 192 or 256, kBlockN = 64): both take the same 64
//     keys; each computes S^T and dP^T for half the tile's queries, writes
//     P^T and dS^T to shared memory, and accumulates dK and dV for half the
//     head dim (64 + 64 registers at 256, where whole rows would take 256)
//     with both operands from shared memory (FlashAttention-3's d=256
//     split). At 192 the halves are 96 columns, so Q, K, V and dO are laid
//     out in 64-byte swizzle rows of 32 columns (kAtomCols) for each half to
//     start on one.
// Per query tile, per consumer warpgroup, all on wgmma (own keys):
//   S^T  = K_wg Q^T, dP^T = V_wg dO^T    SS, both operands K-major;
//   P^T  = exp2(S^T * scale_log2 - LSE[query] log2 e), dS^T = P^T (dP^T - D)
//          in registers (times 1 - tanh^2 under softcap; a caller's
//          score_mod and mask_mod recomputed per element, dS^T times
//          score_mod_grad; common/score_policy.cuh);
//   dV  += P^T dO, dK += dS^T Q          RS: the accumulators of S^T and dP^T
//          are the A fragments (as P in the forward), dO and Q read
//          transposed (MN-major);
//   dQ   = dS K                          SS with both operands MN-major: dS^T
//          goes to shared memory; the warpgroups split dQ's tile (by query
//          rows when kBlockM = 128, by head-dim halves at d=128-256
//          with 64, or each over its own keys at d=32-96 with 64) and add it
//          to the accumulator: through a shared buffer that the TMA unit
//          reduce-adds (where shared memory has room, see kDQStaged), else
//          with vectorised fp32 reductions.
// Under the head-dim split, dV += P^T dO and dK += dS^T Q are SS instead
// (P^T and dS^T K-major from shared memory, dO and Q MN-major), issued with
// dQ's product once both warpgroups' halves are written.
// The keys-as-rows orientation puts the reductions of dV and dK (over
// queries) inside the MMAs' K dimension, so nothing crosses warpgroups but
// dS^T, once per tile (not at all when each takes its own keys).
//
// Warp roles. Warpgroup 0 is the producer (setmaxnreg.dec): one elected
// lane issues TMA loads of K and V once and of Q and dO per query tile;
// where dQ is staged, its second warp is the dQ writer, which passes each
// consumer warpgroup's staged dQ part to the TMA unit as a reduce-add into
// the accumulator (FlashAttention-3's dQ path; in the deterministic mode
// the second and third warps, taking the tiles in turn, kDQWriters); the
// rest of the warpgroup exits. Warpgroups 1 and 2 are the consumers
// (setmaxnreg.inc); each stages the tile's LSE (+inf past seqlen_q so P = 0
// there) and D through its own shared buffer, one row per thread, on a
// named barrier of its own.
//
// Pipeline. kStages buffers of (Q, dO) on mbarriers:
//   kv_full       K and V landed;
//   kv_empty      every consumer warp has finished the item's last MMA
//                 reading K and V (the next item's may load);
//   full[s]       stage s's Q and dO landed (TMA transaction bytes);
//   empty[s]      every consumer warp has finished its MMAs reading stage s;
//   item_full[n], item_empty[n]   work item slot n written, and taken by
//                 every consumer warp and the dQ writers.
// Stages, phases and double buffers count a CTA's tiles over all its items
// (WorkPosition). With two stages (the default wherever dQ's staging still
// fits) a tile's products go dV, dQ, then dK, and dQ's store runs under dK
// (kDQUnderLastMma; with 128-query tiles dK runs on under the next tile's
// S^T and dP^T, kDKIntoNextTile); with one, dV and dK go first so that the
// stage is released before dQ's product.
// dS^T (and P^T) is double-buffered: one named barrier per tile (both
// warpgroups' halves written; only the warpgroup's own when it takes its
// own keys) also proves that the buffer of two tiles back is free, since
// each warpgroup waits for its MMAs reading it before reaching the next one.
// Rows past seqlen are zero-filled by TMA. A packed varlen batch
// (kVarlen; common/sequence.cuh) offsets every tile by its sequence's first
// rows; rows of the next sequence that a tile reaches are masked (keys past
// seqlen_k see no query, queries past seqlen_q get LSE +inf: P = 0) and
// never stored.
//
// Parts: bwd_sm90_layout.cuh (the constants derived from the generator's
// prelude, shared memory, barriers), bwd_sm90_work.cuh (work items and the
// query-tile walk), bwd_sm90_producer.cuh (the loads), bwd_sm90_dq_writer.cuh
// (dQ's TMA reduce-adds), bwd_sm90_consumer.cuh (the tiles' MMAs and
// element-wise work), bwd_sm90_dq.cuh (dQ's product and its way to the
// accumulator) and bwd_sm90_epilogue.cuh (dK and dV).
#pragma once

#include "bwd_rowwise.cuh"
#include "bwd_sm90_consumer.cuh"
#include "bwd_sm90_dq_writer.cuh"
#include "bwd_sm90_layout.cuh"
#include "bwd_sm90_producer.cuh"
#include "bwd_sm90_work.cuh"
#include "common/bwd_params.cuh"
#include "common/sm90.cuh"
#include "common/types.cuh"

extern "C" __global__ void __launch_bounds__(flashjit::bwd_sm90::kThreads, 1)
    flashjit_bwd_sm90(const flashjit::BwdParams p,
                      const __grid_constant__ flashjit::TmaDescriptor tma_q,
                      const __grid_constant__ flashjit::TmaDescriptor tma_k,
                      const __grid_constant__ flashjit::TmaDescriptor tma_v,
                      const __grid_constant__ flashjit::TmaDescriptor tma_do,
                      const __grid_constant__ flashjit::TmaDescriptor tma_dq_accum) {
  using namespace flashjit;
  using namespace flashjit::bwd_sm90;

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const u32 smem = (smem_address(smem_raw) + kSmemAlign - 1) & ~u32(kSmemAlign - 1);
  const Barriers bars{smem + kOffsetBarriers};
  // The stats are read through a generic pointer: the same bytes as `smem`.
  float *const stats =
      reinterpret_cast<float *>(smem_raw + (smem - smem_address(smem_raw)) + kOffsetStats);

  const int tid = threadIdx.x;
  // Broadcast from lane 0: ptxas then knows it is warp-uniform (CUTLASS does
  // so), and what derives from it (descriptors) can live in uniform registers.
  // Not with a caller's modifiers (a CTA per item): there it spilled 4-8
  // bytes (mask_mod, d=64 and d=128) where the index from tid spilled none.
  const int warpgroup = kResident ? __shfl_sync(0xffffffffu, tid / 128, 0) : tid / 128;
  const QueryTileWalk walk(p);

  if (tid == 0) {
    mbarrier_init(bars.kv_full(), 1);
    mbarrier_init(bars.kv_empty(), kConsumerWarps);
#pragma unroll
    for (u32 n = 0; n < 2; ++n) {
      mbarrier_init(bars.item_full(n), 1);
      mbarrier_init(bars.item_empty(n), kItemReaders);
    }
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(bars.full(s), 1);
      mbarrier_init(bars.empty(s), kConsumerWarps);
    }
    fence_barrier_init();
  }
  __syncthreads();

  if (warpgroup == 0) {
    setmaxnreg_dec<kProducerRegisters>();
    if (kDQStaged && tid / 32 >= 1 && tid / 32 <= kDQWriters) {
      write_dq(p, tma_dq_accum, smem, bars, walk, tid);
      return;
    }
    if (tid / 32 != 0) return;
    const bool leader = elect_one();
    if (!leader) return;
    load_tiles(p, tma_q, tma_k, tma_v, tma_do, smem, bars, walk);
    return;
  }
  setmaxnreg_inc<kConsumerRegisters>();
  compute_gradients(p, smem_raw, smem, bars, walk, stats, tid, warpgroup);
}
