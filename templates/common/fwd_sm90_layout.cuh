// The sm90 kernels' tiled head dim, and the forward's layout arithmetic:
// rows per tile, shared memory per stage, the Q buffers and the whole
// footprint. Plain constexpr C++ with no
// CUDA and no includes, so the kernel (templates/fwd_sm90.cuh) and its host
// twin (generator/fwd_sm90_traits.cpp, which prunes configs before any
// compile and sizes the launch) compile the same code and cannot disagree.
#pragma once

namespace flashjit {

constexpr int gcd_of(int a, int b) { return b == 0 ? a : gcd_of(b, a % b); }

// Rows of one TMA box of a K/V tile of `block_n` keys: the whole tile, or
// with pages of `page_size` rows (0: contiguous K/V) the largest run that
// never crosses a page.
constexpr int kv_box_rows(int page_size, int block_n) {
  return page_size > 0 ? gcd_of(page_size, block_n) : block_n;
}

// The head dim the sm90 forward tiles: the problem's rounded up to 64, 128,
// 192 or 256, whole 64-column swizzle blocks, the shapes the register tiles
// were sized for. The columns past the problem's are zeros (TMA fills what
// lies outside the tensors), add nothing to any product, and are never
// stored: such a head dim pays for the tiled one's MMAs. 192 (DeepSeek-V3's
// Q/K, and 136..184) rather than 256 saves a quarter of them: O takes 96
// registers, which leaves S room for 112-key tiles with the intra-warpgroup
// overlap that 256 cannot afford.
constexpr int sm90_forward_tile_head_dim(int head_dim) {
  return head_dim <= 64 ? 64 : head_dim <= 128 ? 128 : head_dim <= 192 ? 192 : 256;
}

// The head dim the sm90 backward tiles, `head_dim` beside the pair's
// `other` (Q/K beside V/dO, or the other way round): 32, 64, 96, 128, 192
// or 256, the shapes its register tiles (dK and dV next to S^T and dP^T)
// and its dQ split were written for. 192 (136..192, DeepSeek-V3's 192/128)
// rather than 256 saves the dK, dV and dQ products a quarter of their
// columns, 96 rather than 128 a quarter, 32 rather than 64 half. Beside a
// tile of 192 or 256 (the head-dim split: each consumer warpgroup takes
// half of both) a 96 is tiled as 128, whose halves are whole swizzle rows.
constexpr int sm90_backward_tile_head_dim(int head_dim, int other) {
  auto alone = [](int d) {
    return d <= 32 ? 32 : d <= 64 ? 64 : d <= 96 ? 96 : d <= 128 ? 128 : d <= 192 ? 192 : 256;
  };
  const int tiled = alone(head_dim);
  return tiled == 96 && alone(other) >= 192 ? 128 : tiled;
}

// Whether the sm90 backward may also give each consumer warpgroup 64 keys
// of its own (128 keys a CTA) where Q/K is tiled as 192: beside a V tiled
// at most 128 (DeepSeek-V3's 192/128), dK (96 registers) and dV (64) fit
// with S^T and dP^T taken in two passes over the queries (bwd_sm90.cuh).
constexpr bool sm90_backward_wide_own_keys(int head_dim_qk, int head_dim_v) {
  return sm90_backward_tile_head_dim(head_dim_qk, head_dim_v) == 192 &&
         sm90_backward_tile_head_dim(head_dim_v, head_dim_qk) <= 128;
}

// Whether the sm90 backward splits the head dims between its consumer
// warpgroups (64 shared keys; bwd_sm90.cuh): where either is tiled as 192
// or 256, unless the head dims also allow 128 keys a CTA
// (sm90_backward_wide_own_keys) and `block_n` is 128.
constexpr bool sm90_backward_splits_head_dim(int head_dim_qk, int head_dim_v, int block_n) {
  if (block_n == 128 && sm90_backward_wide_own_keys(head_dim_qk, head_dim_v)) return false;
  return sm90_backward_tile_head_dim(head_dim_qk, head_dim_v) >= 192 ||
         sm90_backward_tile_head_dim(head_dim_v, head_dim_qk) >= 192;
}

// The columns of one swizzle row of the sm90 backward's Q, K, V and dO tiles
// (16-bit elements; the TMA boxes' inner extent and the wgmma descriptors'
// swizzle): 64 (128-byte swizzle) except where a head dim is tiled as 32
// (one row of 64 bytes), 96 (three), or 192 and split between the two
// consumer warpgroups, whose halves of 96 columns must start on a swizzle
// row: 32 (64-byte swizzle) there.
constexpr int sm90_backward_swizzle_columns(int head_dim_qk, int head_dim_v) {
  const int qk = sm90_backward_tile_head_dim(head_dim_qk, head_dim_v);
  const int v = sm90_backward_tile_head_dim(head_dim_v, head_dim_qk);
  auto narrow = [](int tiled) { return tiled == 32 || tiled == 96 || tiled == 192; };
  return narrow(qk) || narrow(v) ? 32 : 64;
}

// The byte offset of 16-byte chunk `chunk` of row `row` of a tile of
// `row_bytes`-byte rows (128 or 64) that TMA wrote with the matching swizzle
// (from a base aligned to its 1024- or 512-byte period): the hardware XORs
// the chunk's index with bits 7.. of the row's offset, within the row.
constexpr int swizzled_chunk_offset(int row, int chunk, int row_bytes) {
  const int row_offset = row * row_bytes;
  return row_offset + ((chunk ^ ((row_offset >> 7) % (row_bytes / 16))) << 4);
}

// Whether the sm90 backward's consumer warpgroups each compute dQ's whole
// tile over their own 64 keys (both adding it to the accumulator: twice the
// reductions, no exchange of dS^T) rather than halves of its columns over
// all keys: at 64-query tiles of warpgroups that own their keys (no
// head-dim split) where Q/K are tiled as 32 or 64 (halves would be under
// one swizzle row), or as 96 (halves of 48 columns would not start on one).
constexpr bool sm90_backward_dq_own_keys(int head_dim_qk, int head_dim_v, int block_m) {
  const int tiled = sm90_backward_tile_head_dim(head_dim_qk, head_dim_v);
  const int other = sm90_backward_tile_head_dim(head_dim_v, head_dim_qk);
  return block_m == 64 && tiled < 192 && other < 192 && (tiled <= 64 || tiled == 96);
}

// Whether the sm90 backward runs as resident CTAs that take work items until
// they run out (BwdParams::work_items), one item's epilogue under the next
// one's loads; else a CTA per item. A caller's score_mod or mask_mod keeps a
// CTA per item: their consumers are at the edge of the registers, and the
// item loop's state spilled them (d=64 with a mask_mod: 0 -> 60 bytes).
constexpr bool sm90_backward_resident(bool score_mod, bool mask_mod) {
  return !score_mod && !mask_mod;
}

// The head dims the sm90 kernels serve: TMA rows of whole 16 bytes, at most
// the widest tile.
constexpr bool sm90_head_dim_served(int head_dim) {
  return head_dim % 8 == 0 && head_dim >= 32 && head_dim <= 256;
}

struct FwdSm90Layout {
  int head_dim;   // of Q and K, tiled (sm90_forward_tile_head_dim): 64, 128, 192 or 256
  int block_m;    // 64 rows per consumer warpgroup: 64, 128 or 192
  int block_n;    // keys per K/V tile
  int stages;     // K/V ring depth
  int pack_gqa;   // query heads packed into a tile's rows (1: none)
  int page_size = 0;  // K/V rows per page (0: contiguous)
  int head_dim_v = 0;  // of V and O, tiled (0: head_dim)

  static constexpr int kSmemAlign = 1024;         // the 128-byte swizzle repeats every 1024 B
  static constexpr int kSmemBudget = 227 * 1024;  // sm_90's opt-in maximum per block
  static constexpr int kRowBytes = 128;           // one 64-element swizzle row
  static constexpr int kWarpgroupRows = 64;       // rows of one consumer warpgroup's wgmma

  constexpr int consumer_warpgroups() const { return block_m / kWarpgroupRows; }
  constexpr int warps() const { return 4 * (1 + consumer_warpgroups()); }  // + the producer
  constexpr int col_blocks() const { return head_dim / 64; }  // of Q and K
  constexpr int v_dim() const { return head_dim_v > 0 ? head_dim_v : head_dim; }
  constexpr int v_col_blocks() const { return v_dim() / 64; }

  // Packed GQA: a warpgroup's 64 rows are (query position, head in group)
  // pairs, head fastest, so a tile holds whole groups of kPack heads of
  // 64 / kPack positions (a TMA box of [positions][heads][64 columns]); rows
  // past the last whole group are never loaded nor stored.
  constexpr int q_rows_per_warpgroup() const { return kWarpgroupRows / pack_gqa; }
  constexpr int loaded_rows_per_warpgroup() const { return q_rows_per_warpgroup() * pack_gqa; }
  constexpr int q_rows_per_tile() const { return q_rows_per_warpgroup() * consumer_warpgroups(); }

  // Bytes of one Q buffer (every consumer warpgroup's 64 rows), and what TMA
  // writes into it (the transaction count of its barrier).
  constexpr int q_col_block_bytes() const { return kWarpgroupRows * kRowBytes; }
  constexpr int q_warpgroup_bytes() const { return col_blocks() * q_col_block_bytes(); }
  constexpr int q_bytes() const { return consumer_warpgroups() * q_warpgroup_bytes(); }
  constexpr int q_loaded_bytes() const {
    return consumer_warpgroups() * col_blocks() * loaded_rows_per_warpgroup() * kRowBytes;
  }
  constexpr int kv_col_block_bytes() const { return block_n * kRowBytes; }
  constexpr int k_tile_bytes() const { return col_blocks() * kv_col_block_bytes(); }
  constexpr int v_tile_bytes() const { return v_col_blocks() * kv_col_block_bytes(); }
  constexpr int kv_box_rows() const { return flashjit::kv_box_rows(page_size, block_n); }

  // Bytes used with `q_buffers` Q buffers: the Q tiles, `stages` K tiles,
  // `stages` V tiles, then the mbarriers, 8 bytes each: q_full[q_buffers],
  // q_empty[q_buffers], k_full, v_full, k_empty, v_empty [stages each]; then
  // a tile slot per Q buffer (8 bytes each): the work tile whose Q the
  // buffer holds, when the producer takes tiles from a counter.
  constexpr int smem_used(int q_buffers) const {
    return q_buffers * q_bytes() + stages * (k_tile_bytes() + v_tile_bytes()) +
           8 * (2 * q_buffers + 4 * stages) + 8 * q_buffers;
  }
  // Two Q buffers where they fit: the next work tile's Q loads while this
  // one's is still in use (until its last S).
  constexpr int q_stages() const { return smem_used(2) + kSmemAlign <= kSmemBudget ? 2 : 1; }
  constexpr int offset_k() const { return q_stages() * q_bytes(); }
  constexpr int offset_v() const { return offset_k() + stages * k_tile_bytes(); }
  constexpr int offset_barriers() const { return offset_v() + stages * v_tile_bytes(); }
  constexpr int offset_tile_slots() const {
    return offset_barriers() + 8 * (2 * q_stages() + 4 * stages);
  }
  // The dynamic shared memory to launch with: the base is rounded up to
  // kSmemAlign inside the kernel.
  constexpr int smem_bytes() const { return smem_used(q_stages()) + kSmemAlign; }

};

}  // namespace flashjit
