// The sm90 backward's layout arithmetic (bwd_sm90.cuh): its tiled head
// dims, the head-dim split, the swizzle rows, every tile's bytes and place in
// shared memory, dQ's staging buffers, the mbarriers and the whole
// footprint. Plain constexpr C++ with no CUDA, so the kernel (through
// templates/bwd_sm90_layout.cuh, which derives its constants from it) and
// its host twin (generator/bwd_sm90_traits.cpp, which prunes configs before
// any compile and sizes the launch) compile the same code and cannot
// disagree.
#pragma once

#include "common/fwd_sm90_layout.cuh"

namespace flashjit {

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

struct BwdSm90Layout {
  int head_dim_qk;  // the problem's, of Q and K (tiled as sm90_backward_tile_head_dim)
  int head_dim_v;   // the problem's, of V and dO
  int block_m;      // query rows per tile of the inner loop: 64 or 128
  int block_n;      // keys per CTA: 128 (64 a consumer warpgroup), 64 under the head-dim split
  int stages;       // Q/dO buffers

  static constexpr int kWarps = 12;  // a producer and two consumer warpgroups
  static constexpr int kSmemAlign = kSm90SmemAlign;
  static constexpr int kSmemLimit = kSm90SmemBudget;
  // dS^T (and P^T) keep 64 queries (128 bytes) per swizzle row.
  static constexpr int kDsRowBytes = 128;
  // dQ's staging buffers and the accumulator's TMA boxes: 32 columns of fp32
  // (128 bytes, one swizzle row) x 64 rows.
  static constexpr int kDQBoxColumns = 32;
  static constexpr int kDQBoxRows = 64;

  // The tiled head dims (32, 64, 96, 128, 192 or 256) of Q and K, and of V
  // and dO.
  constexpr int tile_head_dim() const {
    return sm90_backward_tile_head_dim(head_dim_qk, head_dim_v);
  }
  constexpr int tile_head_dim_v() const {
    return sm90_backward_tile_head_dim(head_dim_v, head_dim_qk);
  }
  constexpr bool splits_head_dim() const {
    return sm90_backward_splits_head_dim(head_dim_qk, head_dim_v, block_n);
  }
  // Q, K, V and dO as swizzle rows of atom_columns() columns in 8-row atoms.
  constexpr int atom_columns() const {
    return sm90_backward_swizzle_columns(head_dim_qk, head_dim_v);
  }
  constexpr int col_blocks() const { return tile_head_dim() / atom_columns(); }      // of Q, K
  constexpr int v_col_blocks() const { return tile_head_dim_v() / atom_columns(); }  // of V, dO
  constexpr int row_bytes() const { return 2 * atom_columns(); }
  constexpr int atom_bytes() const { return 8 * row_bytes(); }

  // A consumer warpgroup's query columns of S^T, and its columns of dK and
  // dV: halves of each under the head-dim split.
  constexpr int s_columns() const { return splits_head_dim() ? block_m / 2 : block_m; }
  constexpr int dk_columns() const {
    return splits_head_dim() ? tile_head_dim() / 2 : tile_head_dim();
  }
  constexpr int dv_columns() const {
    return splits_head_dim() ? tile_head_dim_v() / 2 : tile_head_dim_v();
  }

  // Tiles as swizzled column blocks ([col block][row][row_bytes()]).
  constexpr int kv_col_block_bytes() const { return block_n * row_bytes(); }
  constexpr int k_tile_bytes() const { return col_blocks() * kv_col_block_bytes(); }
  constexpr int v_tile_bytes() const { return v_col_blocks() * kv_col_block_bytes(); }
  constexpr int q_col_block_bytes() const { return block_m * row_bytes(); }
  constexpr int q_tile_bytes() const { return col_blocks() * q_col_block_bytes(); }
  constexpr int do_tile_bytes() const { return v_col_blocks() * q_col_block_bytes(); }
  // dS^T: keys as rows, queries as columns; under the head-dim split P^T
  // follows it in each buffer.
  constexpr int ds_col_block_bytes() const { return block_n * kDsRowBytes; }
  constexpr int ds_bytes() const { return (block_m / 64) * ds_col_block_bytes(); }
  constexpr int ds_buffer_bytes() const { return (splits_head_dim() ? 2 : 1) * ds_bytes(); }
  // Per consumer warpgroup, two buffers of [LSE | D][s_columns()] fp32.
  constexpr int stats_bytes() const { return 2 * 2 * s_columns() * 4; }

  // Bytes, relative to the 1024-byte aligned base of dynamic shared memory:
  // K, V, `stages` of Q and of dO, two dS^T buffers, each consumer
  // warpgroup's statistics, then dQ's staging buffers where staged, then the
  // mbarriers and the two work item slots.
  constexpr int offset_k() const { return 0; }
  constexpr int offset_v() const { return offset_k() + k_tile_bytes(); }
  constexpr int offset_q() const { return offset_v() + v_tile_bytes(); }
  constexpr int offset_do() const { return offset_q() + stages * q_tile_bytes(); }
  constexpr int offset_ds() const { return offset_do() + stages * do_tile_bytes(); }
  constexpr int offset_stats() const { return offset_ds() + 2 * ds_buffer_bytes(); }
  constexpr int offset_dq() const { return offset_stats() + 2 * stats_bytes(); }

  // dQ's tile (block_m x head dim) over the two consumer warpgroups: by rows
  // (block_m 128), over each one's own keys (sm90_backward_dq_own_keys), or
  // by halves of its columns; each one's part is 64 rows x dq_columns().
  constexpr bool dq_split_rows() const { return block_m == 128; }
  constexpr bool dq_own_keys() const {
    return sm90_backward_dq_own_keys(head_dim_qk, head_dim_v, block_m);
  }
  constexpr int dq_columns() const {
    return dq_split_rows() || dq_own_keys() ? tile_head_dim() : tile_head_dim() / 2;
  }
  constexpr int dq_box_bytes() const { return kDQBoxRows * kDQBoxColumns * 4; }
  constexpr int dq_stage_bytes() const { return dq_columns() / kDQBoxColumns * dq_box_bytes(); }

  // kv_full, kv_empty, item_full[2], item_empty[2], full[stages],
  // empty[stages], then the two work item slots.
  constexpr int barrier_count() const { return 6 + 2 * stages; }
  constexpr int barrier_bytes() const { return 8 * barrier_count() + 8; }
  // Whether each consumer warpgroup's dQ part goes through a buffer of its
  // own (a TMA reduce-add) rather than atomics: wherever the two fit.
  constexpr bool dq_staged() const {
    return offset_dq() + 2 * dq_stage_bytes() + barrier_bytes() + kSmemAlign <= kSmemLimit;
  }
  constexpr int offset_barriers() const {
    return offset_dq() + (dq_staged() ? 2 * dq_stage_bytes() : 0);
  }
  constexpr int smem_used() const { return offset_barriers() + barrier_bytes(); }
  // The dynamic shared memory to launch with: the base is rounded up to
  // kSmemAlign inside the kernel.
  constexpr int smem_bytes() const { return smem_used() + kSmemAlign; }
};

}  // namespace flashjit
