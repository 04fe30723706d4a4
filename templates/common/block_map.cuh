// The block map of a caller's mask_mod, as the sm90 kernels read it: per
// row block of the kernel's tiles, the tiles of the other side that any
// element sees, in order, each flagged where mask_mod shows every element of
// it. The forward's rows are query blocks listing key tiles
// (fwd_block_map.cuh; FwdParams::block_map says the layout), the
// backward's key blocks listing query tiles (bwd_block_map.cuh). A kernel
// walks only those (a hidden tile costs neither its loads nor its GEMMs)
// and calls mask_mod only on the unflagged ones (FlexAttention's partial and
// full blocks). Both are built by the same two passes below: classify each
// tile, then list a row's tiles.
#pragma once

#include "common/types.cuh"
#include "common/mask.cuh"
#include "common/block_mask_grid.cuh"

namespace flashjit {

// Set on an entry whose tile mask_mod shows whole.
constexpr int kBlockMapFull = 1 << 30;
// The forward's row runs (FwdParams::block_intervals): set on a partial
// entry whose every query row sees, of the tile's keys, one run of
// consecutive keys (or none) under mask_mod, with the run's slot in the
// two bits from kBlockMapSlotShift. The kernel then masks the tile from the
// runs (a compare and a select per score, as its built-in masks) instead of
// calling mask_mod per score: a sliding window's and a document's edges, a
// causal diagonal. The first kBlockMapRunSlots partial tiles of a row have
// a slot; the others, and tiles whose rows are not runs, call mask_mod.
constexpr int kBlockMapRuns = 1 << 29;
constexpr int kBlockMapSlotShift = 27;
constexpr int kBlockMapRunSlots = 4;
// The tile index of an entry, its flags taken off (the host keeps tiles
// under 2^27 a row, generator/block_map.h).
constexpr int kBlockMapTileBits = (1 << kBlockMapSlotShift) - 1;
__device__ __forceinline__ int block_map_tile(int entry) { return entry & kBlockMapTileBits; }

// The index of the map row of (batch, head, m_block).
template <class Params>
__device__ __forceinline__ i64 block_map_row_index(const Params &p, int batch, int head,
                                                   int m_block) {
  return batch * p.block_map_batch_stride + head * p.block_map_head_stride + m_block;
}

// The offset in p.block_map of the row of (batch, head, m_block): [0] the
// count, then the entries. An int: the host keeps the map under 2^31
// entries (generator/block_map.h).
template <class Params>
__device__ __forceinline__ int block_map_row(const Params &p, int batch, int head, int m_block) {
  return static_cast<int>(block_map_row_index(p, batch, head, m_block) * p.block_map_row_stride);
}

// The kind of a tile for the map: 0 hidden, 1 partial, 2 shown whole, over
// queries [q0, q0 + q_rows) of heads [head0, head0 + group) (one head where
// mask_mod reads none: M::kMaskQkOnly) and keys [n0, n0 + cols), counting
// only the elements the sequence holds and the built-in mask shows. Called
// by all kThreads threads of the CTA (__syncthreads_or / _and); threads take
// consecutive keys, so a mask reading per-key data (document ids) reads it
// coalesced. `seen` false: the built-in mask leaves the tile nothing.
template <class Mask, class M, int kThreads, class Params>
__device__ __forceinline__ int block_kind(const Params &p, bool seen, int seqlen_q, int seqlen_k,
                                          i64 offset, int batch, int head0, int group, int q0,
                                          int q_rows, int n0, int cols) {
  bool any = false, all = true;
  const int heads = M::kMaskQkOnly ? 1 : group;
  if (seen && q0 + q_rows <= seqlen_q &&
      !tile_is_cut<Mask>(p, seqlen_k, q0, q_rows, n0, cols, offset)) {
    // A tile the sequence and the built-in mask leave whole (most of them),
    // with no bounds per element, so that mask_mod is nearly all it costs
    // (the general loop below spent most of the pre-pass on its index
    // arithmetic). A warp takes every kWarps-th row, a lane the keys lane +
    // 32j, in blocks of kRows rows x kCols keys: a block's calls have no
    // order between them, and a mask's per-row and per-key loads
    // (document ids) come once a block, kRows broadcasts and kCols
    // coalesced rows of 128 bytes for 4 * 32 * 4 calls. A thread per key
    // walking the rows one at a time, its exit tested after each, was bound
    // by L1 wavefronts, two a call (H200: 63 us for a document mask at 8k,
    // a quarter of the forward). A thread stops, after a block, once it has
    // seen keys both shown and hidden: the tile is partial whatever the
    // others find.
    constexpr int kWarps = kThreads / 32, kRows = 4, kCols = 4;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int q_end = q0 + q_rows;
    for (int c0 = lane; c0 < cols && (all || !any); c0 += 32 * kCols)
      for (int q = q0 + warp; q < q_end && (all || !any); q += kWarps * kRows)
#pragma unroll
        for (int r = 0; r < kRows; ++r)
#pragma unroll
          for (int j = 0; j < kCols; ++j) {
            // Past the block's rows or keys: called at the last one (in the
            // sequence: the tile is whole) and not counted, so the calls
            // are unconditional and a row's or key's loads are shared.
            const int qr = q + r * kWarps, c = c0 + 32 * j;
            const bool inside = qr < q_end && c < cols;
            for (int h = 0; h < heads; ++h) {
              const bool shown = M::visible(batch, M::kMaskQkOnly ? 0 : head0 + h,
                                            min(qr, q_end - 1), n0 + min(c, cols - 1), p.aux);
              any |= inside && shown;
              all &= !inside || shown;
            }
          }
  } else if (seen) {
    for (int e = threadIdx.x; e < q_rows * heads * cols; e += kThreads) {
      const int r = e / cols, c = e % cols;
      const int q = q0 + r / heads;
      if (q >= seqlen_q) break;  // rows only grow with e
      int lo, hi;  // the keys the built-in mask shows row q, tile-local
      visible_keys_in_tile<Mask>(p, seqlen_k, q, n0, cols, offset, lo, hi);
      if (c < lo || c > hi) continue;
      const bool shown = M::visible(batch, M::kMaskQkOnly ? 0 : head0 + r % heads, q, n0 + c, p.aux);
      any |= shown;
      all &= shown;
    }
  }
  any = __syncthreads_or(any);
  all = __syncthreads_and(all);
  return any ? (all ? 2 : 1) : 0;
}

// One warp per row of the caller's mask (kThreads / 32 rows a CTA). The
// lists are device data the host cannot check without a sync: a count is
// clamped to [0, k_blocks] and an index outside [0, k_blocks) is skipped,
// so no list reads or writes past its row. A block listed both ways is
// partial (written last, after __syncwarp orders the warp's stores).
template <int kThreads>
__device__ __forceinline__ void scatter_block_mask(const BlockMaskLists &l) {
  const int row = static_cast<int>(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32;
  if (row >= l.rows) return;
  const int lane = threadIdx.x % 32;
  const i64 base = static_cast<i64>(row) * l.k_blocks;
  auto scatter = [&](const int *num, const int *indices, unsigned char kind) {
    const int count = min(max(num[row], 0), l.k_blocks);
    for (int i = lane; i < count; i += 32) {
      const int block = indices[base + i];
      if (block >= 0 && block < l.k_blocks) l.kinds[base + block] = kind;
    }
  };
  if (l.full_num) scatter(l.full_num, l.full_indices, 2);
  __syncwarp();
  scatter(l.num, l.indices, 1);
}

// The kind of a kernel tile from the caller's grid: 0 when `seen` is false
// or every caller block the tile overlaps is hidden, 2 when all are shown
// whole, else 1; over batches [b0, b1) and heads [h0, h1) of the grid (the
// map's row may serve several: a shared map, a GQA group), queries [q0,
// q_end) and keys [n0, n_end) (both clamped to the sequence by the caller,
// non-empty where `seen`). Called by all kThreads threads of the CTA.
template <int kThreads>
__device__ __forceinline__ int block_kind_from_grid(const BlockMaskGrid &g, bool seen, int b0,
                                                    int b1, int h0, int h1, int q0, int q_end,
                                                    int n0, int n_end) {
  bool any = false, all = true;
  if (seen) {
    const int qb0 = q0 / g.block_q, qbs = min((q_end - 1) / g.block_q, g.q_blocks - 1) - qb0 + 1;
    const int kb0 = n0 / g.block_k, kbs = min((n_end - 1) / g.block_k, g.k_blocks - 1) - kb0 + 1;
    const int heads = h1 - h0, per_batch = heads * qbs * kbs;
    for (int e = threadIdx.x; e < (b1 - b0) * per_batch; e += kThreads) {
      const int b = b0 + e / per_batch, r = e % per_batch;
      const int h = h0 + r / (qbs * kbs), qb = qb0 + r / kbs % qbs, kb = kb0 + r % kbs;
      const int kind =
          g.kinds[((static_cast<i64>(b) * g.heads + h) * g.q_blocks + qb) * g.k_blocks + kb];
      any |= kind != 0;
      all &= kind == 2;
    }
  }
  any = __syncthreads_or(any);
  all = __syncthreads_and(all);
  return any ? (all ? 2 : 1) : 0;
}

// The grid's batches or heads [lo, hi) that a map row serves: the row's own
// `index` (of `count` in the row's group) where the map has a row each and
// the grid one each, all of the grid's where the map is shared, the one
// where the grid is.
__device__ __forceinline__ void grid_range(int grid_count, bool per_row, int index, int count,
                                           int &lo, int &hi) {
  if (grid_count == 1) {
    lo = 0, hi = 1;
  } else if (per_row) {
    lo = index, hi = index + count;
  } else {
    lo = 0, hi = grid_count;
  }
}

// One warp lists a map row: the `tiles` kinds at `kinds` (consecutive
// bytes) into out[0] (the count) and out[1..] (the non-hidden tiles in
// order, kBlockMapFull set on those shown whole), by ballot and popcount.
// `run_positions` (the forward's, kBlockMapRunSlots ints, or null): the
// positions in the list of the row's first partial tiles, -1 past them.
__device__ __forceinline__ void list_block_map_row(const unsigned char *kinds, int tiles,
                                                   int *out, int *run_positions) {
  const int lane = threadIdx.x % 32;
  const unsigned below = (1u << lane) - 1;
  int count = 0, partial = 0;
  for (int t0 = 0; t0 < tiles; t0 += 32) {
    const int t = t0 + lane;
    const int kind = t < tiles ? kinds[t] : 0;
    const unsigned listed = __ballot_sync(0xffffffffu, kind != 0);
    const unsigned partial_lanes = __ballot_sync(0xffffffffu, kind == 1);
    const int position = count + __popc(listed & below);
    if (kind != 0) out[1 + position] = t | (kind == 2 ? kBlockMapFull : 0);
    const int slot = partial + __popc(partial_lanes & below);
    if (run_positions && kind == 1 && slot < kBlockMapRunSlots) run_positions[slot] = position;
    count += __popc(listed);
    partial += __popc(partial_lanes);
  }
  if (lane == 0) out[0] = count;
  if (run_positions && lane >= partial && lane < kBlockMapRunSlots) run_positions[lane] = -1;
}

// Thread 0 stores the kind of (batch, head, row block)'s `tile` into the
// classification bytes (p.block_kinds: [row][tile], rows as block_map_row's).
template <class Params>
__device__ __forceinline__ void store_block_kind(const Params &p, int batch, int head,
                                                 int row_block, int tile, int kind) {
  if (threadIdx.x != 0) return;
  const i64 row = batch * p.block_map_batch_stride + head * p.block_map_head_stride + row_block;
  p.block_kinds[row * (p.block_map_row_stride - 1) + tile] = static_cast<unsigned char>(kind);
}

// A list kernel's body: one warp per map row (kThreads / 32 rows a CTA),
// `rows` in all (list_block_map_row); `run_positions`: kBlockMapRunSlots
// ints a row, or null.
template <int kThreads, class Params>
__device__ __forceinline__ void list_block_map(const Params &p, int rows, int *run_positions) {
  const int row = static_cast<int>(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const int tiles = p.block_map_row_stride - 1;
  list_block_map_row(p.block_kinds + static_cast<i64>(row) * tiles, tiles,
                     p.block_map + static_cast<i64>(row) * p.block_map_row_stride,
                     run_positions ? run_positions + static_cast<i64>(row) * kBlockMapRunSlots
                                   : nullptr);
}

}  // namespace flashjit
