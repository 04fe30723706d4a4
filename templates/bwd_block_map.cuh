// The block map of a caller's mask_mod for the sm90 backward (bwd_sm90.cuh,
// whose constants and sequence type it shares; layout in
// common/block_map.cuh and BwdParams::block_map): the forward's map
// (fwd_block_map.cuh) with key blocks as the rows, built the same way before
// the main kernel on its stream each call.
//   flashjit_bwd_block_kinds  one CTA per (map head and batch, key block,
//       query tile): its threads evaluate mask_mod over the tile for every
//       query head of the KV head's group (one head where mask_mod reads
//       none) and classify it (block_kind); or, with a caller's block
//       mask, combine the kinds of its blocks the tile overlaps
//       (block_kind_from_grid; flashjit_block_mask_grid scatters the
//       mask's lists into them first). A group shares a row: the
//       kernel's CTA walks all its heads over the same query tiles, so a
//       tile one head hides and another sees is computed for both, with
//       mask_mod per element.
//   flashjit_bwd_block_list   one warp per map row: the row's non-hidden
//       query tiles in order and their count (list_block_map_row).
#pragma once

#include "bwd_sm90.cuh"
#include "common/block_map.cuh"

namespace flashjit {
namespace bwd_block_map {

using namespace cfg;
using Sequence = bwd_sm90::Sequence;

constexpr int kThreads = 128;

}  // namespace bwd_block_map
}  // namespace flashjit

// Grid (map heads x map batches, key blocks, query tiles); the map's heads
// are block_map_head_stride != 0 ? the KV heads : 1.
extern "C" __global__ void __launch_bounds__(flashjit::bwd_block_map::kThreads)
    flashjit_bwd_block_kinds(const flashjit::BwdParams p, const flashjit::BlockMaskGrid g) {
  using namespace flashjit;
  using namespace flashjit::bwd_block_map;
  const int n_block = blockIdx.y, m_block = blockIdx.z;
  const int map_heads = p.block_map_head_stride != 0 ? p.heads_q / p.heads_per_kv : 1;
  const int kv_head = static_cast<int>(blockIdx.x) % map_heads;
  const int batch = static_cast<int>(blockIdx.x) / map_heads;
  const Sequence seq(p, batch);
  const int m0 = m_block * kBlockM, n0 = n_block * kBlockN;
  // Only the query tiles the built-in mask lets see any of the keys are
  // evaluated, as the kernel's walk (bwd_sm90.cuh, query_tiles).
  const TileSpan span =
      Score::query_tiles(p, seq.seqlen_q, n0, kBlockN, seq.offset, kBlockM);
  const bool seen = n0 < seq.seqlen_k && m0 < seq.seqlen_q && m_block >= span.first &&
                    m_block < span.first + span.count;
  const int head0 = kv_head * p.heads_per_kv;
  int kind;
  if (g.kinds) {
    // The caller's block mask, over every query head of the group.
    int b0, b1, h0, h1;
    grid_range(g.batches, p.block_map_batch_stride != 0, batch, 1, b0, b1);
    grid_range(g.heads, p.block_map_head_stride != 0, head0, p.heads_per_kv, h0, h1);
    kind = block_kind_from_grid<kThreads>(g, seen, b0, b1, h0, h1, m0,
                                          min(m0 + kBlockM, seq.seqlen_q), n0,
                                          min(n0 + kBlockN, seq.seqlen_k));
  } else {
    kind = block_kind<Mask, Modifiers, kThreads>(p, seen, seq.seqlen_q, seq.seqlen_k,
                                                 seq.offset, batch, head0, p.heads_per_kv, m0,
                                                 kBlockM, n0, kBlockN);
  }
  store_block_kind(p, batch, kv_head, n_block, m_block, kind);
}

// Grid: one warp per row of the caller's block mask (kThreads / 32 rows a
// CTA), before flashjit_bwd_block_kinds reads it (scatter_block_mask).
extern "C" __global__ void __launch_bounds__(flashjit::bwd_block_map::kThreads)
    flashjit_block_mask_grid(const flashjit::BlockMaskLists lists) {
  flashjit::scatter_block_mask<flashjit::bwd_block_map::kThreads>(lists);
}

// Grid: one warp per map row (kThreads / 32 rows a CTA), `rows` in all.
extern "C" __global__ void __launch_bounds__(flashjit::bwd_block_map::kThreads)
    flashjit_bwd_block_list(const flashjit::BwdParams p, int rows) {
  using namespace flashjit;
  using namespace flashjit::bwd_block_map;
  list_block_map<kThreads>(p, rows, nullptr);
}
