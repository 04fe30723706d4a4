// The block map of a caller's mask_mod for the sm90 forward (fwd_sm90.cuh,
// whose constants and sequence type it shares; layout in
// common/block_map.cuh and FwdParams::block_map). Two small kernels, run
// before the forward on its stream each call (the map depends on the
// call's aux values, e.g. document ids, so it is never reused):
//   flashjit_block_mask_grid  with a caller's block mask only: its lists
//       scattered into a grid of kinds at the caller's block sizes.
//   flashjit_fwd_block_kinds  one CTA per (map head and batch, query block,
//       key tile): its 128 threads evaluate mask_mod on every (query, key) of
//       the work tile's rows and the key tile that the sequence holds and
//       the built-in mask shows, and classify the tile (block_kind); or,
//       with a block mask, combine the kinds of the caller's blocks the
//       tile overlaps (block_kind_from_grid), calling no mask_mod.
//   flashjit_fwd_block_list   one warp per map row: the row's non-hidden
//       tiles in order and their count (list_block_map_row), and the
//       positions of its first kBlockMapRunSlots partial tiles.
//   flashjit_fwd_block_runs   one CTA per (map row, slot) of those: a thread
//       per query row finds the keys of the tile mask_mod shows it; where
//       every row's are one run, the runs are stored and the entry flagged
//       (kBlockMapRuns), and the forward masks that tile from them. With a
//       caller's block mask too (its blocks say nothing within a tile).
//       Cost: one mask_mod call per element of those tiles, a few per row
//       for window, document and causal masks.
// A map serves every (batch, head) when the caller declared mask_mod a
// function of (q, k) alone (Modifiers::kMaskQkOnly) and the sequences all
// have the problem's lengths; one per batch under a qk-only mask with
// per-sequence lengths (varlen, a KV cache's key counts); otherwise one per
// (batch, head of the work tiles). Cost: one mask_mod call per element of
// the map's rows, e.g. 64M calls at 8k x 8k for a shared map.
#pragma once

#include "common/block_map.cuh"
#include "fwd_sm90.cuh"

namespace flashjit {
namespace fwd_block_map {

using namespace cfg;
using fwd_sm90::kPack;
using fwd_sm90::kQRowsPerTile;
using fwd_sm90::kRowRuns;
using Sequence = fwd_sm90::Sequence;

constexpr int kThreads = 128;

}  // namespace fwd_block_map
}  // namespace flashjit

// Grid (map heads x map batches, query blocks, key tiles), the one
// dimension that can pass 65535 in x; the map's heads are
// block_map_head_stride != 0 ? the work tiles' heads : 1.
extern "C" __global__ void __launch_bounds__(flashjit::fwd_block_map::kThreads)
    flashjit_fwd_block_kinds(const flashjit::FwdParams p, const flashjit::BlockMaskGrid g) {
  using namespace flashjit;
  using namespace flashjit::fwd_block_map;
  const int n_block = blockIdx.z, m_block = blockIdx.y;
  const int map_heads = p.block_map_head_stride != 0 ? p.heads_q / kPack : 1;
  const int head = static_cast<int>(blockIdx.x) % map_heads;
  const int batch = static_cast<int>(blockIdx.x) / map_heads;
  const Sequence seq(p, batch);
  const int q0 = m_block * kQRowsPerTile, n0 = n_block * kBlockN;
  // Only the key tiles the built-in mask leaves the block any of are
  // evaluated (a causal mask's upper half costs a CTA start each).
  const TileSpan span =
      Score::key_tiles(p, seq.seqlen_k, q0, kQRowsPerTile, seq.offset, kBlockN);
  const bool seen =
      q0 < seq.seqlen_q && n_block >= span.first && n_block < span.first + span.count;
  const int head0 = kPack > 1 ? head * kPack : head;
  int kind;
  if (g.kinds) {
    // The caller's block mask, over the tile's part of the sequence.
    int b0, b1, h0, h1;
    grid_range(g.batches, p.block_map_batch_stride != 0, batch, 1, b0, b1);
    grid_range(g.heads, p.block_map_head_stride != 0, head0, kPack, h0, h1);
    kind = block_kind_from_grid<kThreads>(g, seen, b0, b1, h0, h1, q0,
                                          min(q0 + kQRowsPerTile, seq.seqlen_q), n0,
                                          min(n0 + kBlockN, seq.seqlen_k));
  } else {
    kind = block_kind<Mask, Modifiers, kThreads>(p, seen, seq.seqlen_q, seq.seqlen_k,
                                                 seq.offset, batch, head0, kPack, q0,
                                                 kQRowsPerTile, n0, kBlockN);
  }
  store_block_kind(p, batch, head, m_block, n_block, kind);
}

// Grid: one warp per row of the caller's block mask (kThreads / 32 rows a
// CTA), before flashjit_fwd_block_kinds reads it (scatter_block_mask).
extern "C" __global__ void __launch_bounds__(flashjit::fwd_block_map::kThreads)
    flashjit_block_mask_grid(const flashjit::BlockMaskLists lists) {
  flashjit::scatter_block_mask<flashjit::fwd_block_map::kThreads>(lists);
}

// Grid: one warp per map row (kThreads / 32 rows a CTA), `rows` in all.
extern "C" __global__ void __launch_bounds__(flashjit::fwd_block_map::kThreads)
    flashjit_fwd_block_list(const flashjit::FwdParams p, int rows) {
  using namespace flashjit;
  using namespace flashjit::fwd_block_map;
  list_block_map<kThreads>(p, rows, p.block_run_positions);
}

// Grid (map heads x map batches, query blocks, kBlockMapRunSlots), as the
// kinds kernel's; after the list kernel. Keys past the sequence are not
// asked (the kernel's bounds mask them); rows past it see none.
extern "C" __global__ void __launch_bounds__(flashjit::fwd_block_map::kThreads)
    flashjit_fwd_block_runs(const flashjit::FwdParams p) {
  using namespace flashjit;
  using namespace flashjit::fwd_block_map;
  if constexpr (kRowRuns) {
    const int map_heads = p.block_map_head_stride != 0 ? p.heads_q / kPack : 1;
    const int head = static_cast<int>(blockIdx.x) % map_heads;
    const int batch = static_cast<int>(blockIdx.x) / map_heads;
    const int m_block = blockIdx.y, slot = blockIdx.z;
    const i64 row = block_map_row_index(p, batch, head, m_block);
    const int position = p.block_run_positions[row * kBlockMapRunSlots + slot];
    if (position < 0) return;
    int *entry = p.block_map + row * p.block_map_row_stride + 1 + position;
    const int n0 = block_map_tile(*entry) * kBlockN;
    const Sequence seq(p, batch);
    const int q0 = m_block * kQRowsPerTile, cols = min(kBlockN, seq.seqlen_k - n0);
    const int head0 = kPack > 1 ? head * kPack : head;
    unsigned *runs = p.block_runs + (row * kBlockMapRunSlots + slot) * kQRowsPerTile;
    bool all_runs = true;
    for (int r = threadIdx.x; r < kQRowsPerTile; r += kThreads) {
      const int q = q0 + r;
      int lo = cols, hi = -1, shown = 0;
      if (q < seq.seqlen_q)
        for (int c = 0; c < cols; ++c)
          if (Modifiers::visible(batch, Modifiers::kMaskQkOnly ? 0 : head0, q, n0 + c, p.aux)) {
            lo = min(lo, c);
            hi = c;
            ++shown;
          }
      all_runs &= shown == 0 || shown == hi - lo + 1;
      runs[r] = shown == 0 ? 0u : static_cast<unsigned>(lo) | static_cast<unsigned>(hi + 1) << 16;
    }
    // Every thread has read the entry before any writes it.
    if (__syncthreads_and(all_runs) && threadIdx.x == 0)
      *entry |= kBlockMapRuns | slot << kBlockMapSlotShift;
  }
}
