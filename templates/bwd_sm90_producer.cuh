// The sm90 backward's producer (bwd_sm90.cuh): one elected lane of the
// producer warpgroup's first warp fetches the CTA's work items, hands them
// to the other roles (read_item), and issues the TMA loads: K and V once an
// item, Q and dO per query tile into kStages buffers, each behind its
// consumers' release.
#pragma once

#include "bwd_sm90_layout.cuh"
#include "bwd_sm90_work.cuh"
#include "common/bwd_params.cuh"
#include "common/sequence.cuh"
#include "common/sm90.cuh"
#include "common/types.cuh"

namespace flashjit {
namespace bwd_sm90 {

__device__ __forceinline__ void load_tiles(const BwdParams &p, const TmaDescriptor &tma_q,
                                          const TmaDescriptor &tma_k, const TmaDescriptor &tma_v,
                                          const TmaDescriptor &tma_do, u32 smem,
                                          const Barriers &bars, const QueryTileWalk &walk) {
  tma_prefetch_descriptor(&tma_q);
  tma_prefetch_descriptor(&tma_do);
  int item = static_cast<int>(blockIdx.x);
  for (WorkPosition at;; at.next_item()) {
    // A slot is written again once every reader has taken the item two
    // back (a fresh barrier's parity-1 wait passes at once).
    if constexpr (kResident) {
      const u32 n = at.items();
      mbarrier_wait(bars.item_empty(n), ((n / 2) & 1) ^ 1);
      st_shared_s32(bars.item_slot(n), item);
      mbarrier_arrive(bars.item_full(n));
    }
    if (item >= p.work_items) return;
    const auto [n0, kv_head, batch] = Scheduler::keys_of(p, item);
    const Sequence seq(p, batch);
    const QueryTiles tiles = walk.query_tiles(seq, n0, batch, kv_head);
    const int iterations = tiles.iterations;
    const int k_row0 = kVarlen ? static_cast<int>(seq.k_row0) : 0;
    const int q_row0 = kVarlen ? static_cast<int>(seq.q_row0) : 0;
    const int outer = kVarlen ? seq.outer : batch;
    if (iterations > 0) {
      // The item before's K and V are free once the consumers' last MMAs
      // have read them; its epilogue runs under these loads.
      mbarrier_wait(bars.kv_empty(), at.kv_loads() ^ 1);
      at.next_kv_load();
      mbarrier_arrive_expect_tx(bars.kv_full(), kKTileBytes + kVTileBytes);
#pragma unroll
      for (int cb = 0; cb < kMaxColBlocks; ++cb) {
        if (cb < kColBlocks)
          tma_load_4d(smem + kOffsetK + cb * kKVColBlockBytes, &tma_k, bars.kv_full(),
                      cb * kAtomCols, k_row0 + n0, kv_head, outer);
        if (cb < kVColBlocks)
          tma_load_4d(smem + kOffsetV + cb * kKVColBlockBytes, &tma_v, bars.kv_full(),
                      cb * kAtomCols, k_row0 + n0, kv_head, outer);
      }
    }
    for (int it = 0; it < iterations; ++it) {
      const u32 tile = at.tiles() + it;
      const int stage = static_cast<int>(tile % kStages);
      const u32 round = tile / kStages;
      // Under a block map the tile's query rows are a load, issued before
      // the wait so that its latency hides under it (without one they are
      // arithmetic, kept after: live across the wait they spilled at d=256).
      int m0 = 0;
      if constexpr (kBlockMap) m0 = entry_m_block(walk.tile_entry(tiles, it)) * kBlockM;
      // The first round passes at once (parity 1 of a fresh barrier is the
      // phase before its first); later ones wait for the consumers' release.
      mbarrier_wait(bars.empty(stage), (round & 1) ^ 1);
      const int head = kv_head * p.heads_per_kv + walk.tile_head(tiles, it);
      if constexpr (!kBlockMap) m0 = entry_m_block(walk.tile_entry(tiles, it)) * kBlockM;
      {
        mbarrier_arrive_expect_tx(bars.full(stage), kQTileBytes + kDOTileBytes);
        const u32 q_dst = smem + kOffsetQ + stage * kQTileBytes;
        const u32 do_dst = smem + kOffsetDO + stage * kDOTileBytes;
#pragma unroll
        for (int cb = 0; cb < kMaxColBlocks; ++cb) {
          if (cb < kColBlocks)
            tma_load_4d(q_dst + cb * kQColBlockBytes, &tma_q, bars.full(stage), cb * kAtomCols,
                        q_row0 + m0, head, outer);
          if (cb < kVColBlocks)
            tma_load_4d(do_dst + cb * kQColBlockBytes, &tma_do, bars.full(stage), cb * kAtomCols,
                        q_row0 + m0, head, outer);
        }
      }
    }
    at.add_tiles(iterations);
    // The next item: the hardware's dispatch order over resident CTAs.
    if constexpr (!kResident) return;
    item = static_cast<int>(gridDim.x) + atomicAdd(p.work_counter, 1);
  }
}

}  // namespace bwd_sm90
}  // namespace flashjit
