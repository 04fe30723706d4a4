// The sm90 backward's work (bwd_sm90.cuh): which keys a work item holds
// (the tile scheduler, common/bwd_scheduler.cuh), how the producer hands
// items to the other roles (read_item),
// where a role is in its CTA's sequence of items and tiles (WorkPosition),
// and the walk over the query tiles that see an item's keys
// (QueryTileWalk).
#pragma once

#include "bwd_sm90_layout.cuh"
#include "common/block_map.cuh"
#include "common/bwd_params.cuh"
#include "common/bwd_scheduler.cuh"
#include "common/ptx.cuh"
#include "common/score_policy.cuh"
#include "common/sequence.cuh"
#include "common/sm90.cuh"
#include "common/types.cuh"

namespace flashjit {
namespace bwd_sm90 {

// A work item's keys (common/bwd_scheduler.cuh).
using Scheduler = BwdTileScheduler<kBlockN, kDeterministic>;

// A role's place in the CTA's sequence of work items, in one register (the
// consumers have none to spare, the producer warpgroup runs on
// kProducerRegisters): items taken mod 4 (slot n % 2 and its phase), K/V
// loads mod 2 (kv_full's and kv_empty's phase), and Q/dO tiles mod
// 2 kStages (a tile's stage, the stage's phase and the double buffers'
// index all repeat with that period).
struct WorkPosition {
  u32 bits = 0;  // [1:0] items, [2] K/V loads, [31:3] tiles
  __device__ __forceinline__ u32 items() const { return bits & 3u; }
  __device__ __forceinline__ u32 kv_loads() const { return (bits >> 2) & 1u; }
  __device__ __forceinline__ u32 tiles() const { return bits >> 3; }
  __device__ __forceinline__ void next_item() { bits = (bits & ~3u) | ((bits + 1) & 3u); }
  __device__ __forceinline__ void next_kv_load() { bits ^= 4u; }
  __device__ __forceinline__ void add_tiles(int count) {
    bits = ((tiles() + u32(count)) % u32(2 * kStages)) << 3 | (bits & 7u);
  }
};

// Item n of the CTA, read by a whole warp; lane 0 reads and hands the slot
// back. The producer fetches the items (the hardware's dispatch order over
// resident CTAs) and writes item n to slot n % 2, announced on item_full
// and taken by every reading warp (kItemReaders) on item_empty.
__device__ __forceinline__ int read_item(const BwdParams &p, const Barriers &bars, u32 n) {
  if constexpr (!kResident) return n == 0 ? static_cast<int>(blockIdx.x) : p.work_items;
  mbarrier_wait(bars.item_full(n), (n / 2) & 1);
  int item = 0;
  if (threadIdx.x % 32 == 0) {
    item = ld_shared_s32(bars.item_slot(n));
    mbarrier_arrive(bars.item_empty(n));
  }
  return __shfl_sync(0xffffffffu, item, 0);
}

// The query tiles of the CTA's sequence (common/sequence.cuh) that see any
// of these keys: m_blocks m-blocks from m_block_begin (under a block map,
// the count of the row at p.block_map offset map_row, whose entries name
// them) for each query head of the group, walked as tile_head and
// tile_slot say; none when the keys lie past the
// sequence's (a shorter sequence of a varlen batch). Each role builds the
// sequence and its tiles after its setmaxnreg: a value live across the
// register reallocation is spilled to local memory.
struct QueryTiles {
  int m_block_begin, m_blocks, iterations, map_row;
};

// The walk over a CTA's tiles: tile `it` is query head kv_head *
// heads_per_kv + tile_head(it) and the tile_slot(it)-th of the CTA's
// m-blocks. The resident kernels and the deterministic mode walk the
// m-blocks last first (but the deterministic mode where p.shortest_first:
// see below), the group's heads inner. Under a causal mask every
// key block that sees a query tile then reaches it at the same place in
// its walk (the earlier key blocks see more tiles, but at the start,
// which now comes last), earlier under a window: the CTAs of a (KV head,
// batch) pair walk Q, dO and dQ's accumulator in step, so L2 serves them
// once. Head by head with the m-blocks ascending, key block j reached
// m-block m at step m - 2j of a head: H200, bf16, 16k tokens, TFLOP/s,
// that walk -> this one, d=128 causal 2k / 8k / 16k 362.8 / 485.0 /
// 482.3 -> 367.6 / 497.3 / 526.2, d=96 8k 379.8 -> 393.8, GQA 32/8 3000
// 425.8 -> 430.1; full masks, d=64 and d=256 within 1% (2026-12-04). The
// deterministic mode needs
// this walk where its key blocks go longest first: a query tile's dQ takes
// the key blocks' adds in dispatch order (key blocks ascending), so no CTA
// waits for one that lags it (the ascending walk ran 0.72x the default
// mode there, d=128 8k causal). Where p.shortest_first (key blocks
// descending, FlashAttention-3's order for its deterministic mode) it
// walks the m-blocks first first, so that key block j+1 reaches a shared
// tile no later than key block j, and under a causal mask (as many
// queries as keys) a step or more before it instead of at the same step
// (BwdSm90Traits::dispatch_order: where that pays).
// A CTA per item (a caller's score_mod or mask_mod) takes this walk too
// under a mask_mod alone up to d = 128 (causal as a mask_mod, d=128 8k,
// H200, 2026-12-04); with a score_mod, or
// at d > 128, the walk its speed was measured with, head by head, the
// m-blocks ascending (this one spilled 16 bytes of a d=256 block-map
// kernel).
// (Unsigned: a signed division by the run-time group size took registers
// that the dQ writer, on kProducerRegisters, does not have: 92 bytes
// spilled at d=128 under a mask_mod.)
constexpr bool kLastFirst =
    kDeterministic || kResident || (!Modifiers::kScore && kHeadDim <= 128);

// The walk over the query tiles that see a work item's keys, for every role.
// The lengths of a dense batch (a packed one's come from its sequence) are
// read where the kernel starts: the register allocation at d = 256 is at
// the edge (the lengths computed after setmaxnreg spilled 68 bytes against
// 24), and the dense kernel's sequence dies unused.
struct QueryTileWalk {
  const BwdParams &p;
  const int dense_seqlen_q, dense_seqlen_k;
  const i64 dense_offset;  // bottom-right alignment
  __device__ __forceinline__ explicit QueryTileWalk(const BwdParams &params)
      : p(params),
        dense_seqlen_q(params.seqlen_q),
        dense_seqlen_k(params.seqlen_k),
        dense_offset(static_cast<i64>(dense_seqlen_k) - dense_seqlen_q) {}

  // The row of (batch, KV head, key block n0 / kBlockN) in the block map.
  __device__ __forceinline__ i64 map_row_index(int batch, int kv_head, int n0) const {
    return batch * p.block_map_batch_stride + kv_head * p.block_map_head_stride + n0 / kBlockN;
  }
  __device__ __forceinline__ QueryTiles query_tiles(const Sequence &seq, int n0, int batch,
                                                    int kv_head) const {
    if constexpr (kBlockMap) {
      if (kVarlen && n0 >= seq.seqlen_k) return QueryTiles{0, 0, 0, 0};
      const int row = static_cast<int>(map_row_index(batch, kv_head, n0) * p.block_map_row_stride);
      const int count = p.block_map[row];
      return QueryTiles{0, count, count * p.heads_per_kv, row};
    } else if constexpr (kVarlen) {
      if (n0 >= seq.seqlen_k) return QueryTiles{0, 0, 0, 0};
      const TileSpan span =
          Score::query_tiles(p, seq.seqlen_q, n0, kBlockN, seq.offset, kBlockM);
      return QueryTiles{span.first, span.count, span.count * p.heads_per_kv, 0};
    } else {
      const TileSpan span =
          Score::query_tiles(p, dense_seqlen_q, n0, kBlockN, dense_offset, kBlockM);
      return QueryTiles{span.first, span.count, span.count * p.heads_per_kv, 0};
    }
  }
  __device__ __forceinline__ int tile_head(const QueryTiles &t, int it) const {
    if constexpr (kLastFirst) return static_cast<int>(u32(it) % u32(p.heads_per_kv));
    return it / t.m_blocks;
  }
  __device__ __forceinline__ int tile_slot(const QueryTiles &t, int it) const {
    if constexpr (kLastFirst) {
      const int step = static_cast<int>(u32(it) / u32(p.heads_per_kv));
      if constexpr (kDeterministic)
        if (p.shortest_first) return step;  // first first
      return t.m_blocks - 1 - step;
    }
    return it % t.m_blocks;
  }
  // Tile `it`'s m-block, with kBlockMapFull under a block map where mask_mod
  // shows all of it.
  __device__ __forceinline__ int tile_entry(const QueryTiles &t, int it) const {
    if constexpr (kBlockMap) return p.block_map[t.map_row + 1 + tile_slot(t, it)];
    return t.m_block_begin + tile_slot(t, it);
  }
};
__device__ __forceinline__ int entry_m_block(int entry) {
  return kBlockMap ? block_map_tile(entry) : entry;
}

}  // namespace bwd_sm90
}  // namespace flashjit
