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

namespace flashjit {

// Set on an entry whose tile mask_mod shows whole.
constexpr int kBlockMapFull = 1 << 30;

// The offset in p.block_map of the row of (batch, head, m_block): [0] the
// count, then the entries. An int: the host keeps the map under 2^31
// entries (generator/block_map.h).
template <class Params>
__device__ __forceinline__ int block_map_row(const Params &p, int batch, int head, int m_block) {
  const i64 row = batch * p.block_map_batch_stride + head * p.block_map_head_stride + m_block;
  return static_cast<int>(row * p.block_map_row_stride);
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
  if (seen) {
    const int heads = M::kMaskQkOnly ? 1 : group;
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

// One warp lists a map row: the `tiles` kinds at `kinds` (consecutive
// bytes) into out[0] (the count) and out[1..] (the non-hidden tiles in
// order, kBlockMapFull set on those shown whole), by ballot and popcount.
__device__ __forceinline__ void list_block_map_row(const unsigned char *kinds, int tiles,
                                                   int *out) {
  const int lane = threadIdx.x % 32;
  int count = 0;
  for (int t0 = 0; t0 < tiles; t0 += 32) {
    const int t = t0 + lane;
    const int kind = t < tiles ? kinds[t] : 0;
    const unsigned listed = __ballot_sync(0xffffffffu, kind != 0);
    if (kind != 0)
      out[1 + count + __popc(listed & ((1u << lane) - 1))] = t | (kind == 2 ? kBlockMapFull : 0);
    count += __popc(listed);
  }
  if (lane == 0) out[0] = count;
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
// `rows` in all (list_block_map_row).
template <int kThreads, class Params>
__device__ __forceinline__ void list_block_map(const Params &p, int rows) {
  const int row = static_cast<int>(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const int tiles = p.block_map_row_stride - 1;
  list_block_map_row(p.block_kinds + static_cast<i64>(row) * tiles, tiles,
                     p.block_map + static_cast<i64>(row) * p.block_map_row_stride);
}

}  // namespace flashjit
