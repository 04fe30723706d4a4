// What the sm90 kernels share (sm_90's shared memory, the head dims they
// serve), and the forward's layout arithmetic: its tiled head dim, rows per
// tile, shared memory per stage, the Q buffers and the whole footprint.
// Plain constexpr C++ with no CUDA and no includes, so the kernel
// (templates/fwd_sm90.cuh) and its host twin (generator/fwd_sm90_traits.cpp,
// which prunes configs before any compile and sizes the launch) compile the
// same code and cannot disagree. The backward's is common/bwd_sm90_layout.cuh.
#pragma once

namespace flashjit {

// sm_90's opt-in maximum of shared memory per block (227 KB).
constexpr int kSm90SmemBudget = 227 * 1024;
// The base of dynamic shared memory is rounded up to this inside the
// kernels: the 128-byte swizzle (which TMA and wgmma both apply to absolute
// shared addresses) repeats every 1024 bytes.
constexpr int kSm90SmemAlign = 1024;

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
//
// e4m3 rows are tiled in whole 128-byte blocks too (128 or 256 columns), so
// 64 and 192 pay for 128 and 256: fp8 wgmma reads K-major operands only and
// its 128-byte swizzle spans 128 elements.
//
// Past 256 (16-bit only) two consumer warpgroups share each 64 rows
// (sm90_forward_column_split): Q and K tile in whole 64-column blocks (320
// to 576: MLA's 576 is nine), V and O in whole 128 columns, so that each
// warpgroup's half of O is whole swizzle blocks (sm90_forward_tile_head_dim_v).
constexpr int sm90_forward_tile_head_dim(int head_dim, int element_bytes = 2) {
  if (element_bytes == 1) return head_dim <= 128 ? 128 : 256;
  if (head_dim > 256) return (head_dim + 63) / 64 * 64;
  return head_dim <= 64 ? 64 : head_dim <= 128 ? 128 : head_dim <= 192 ? 192 : 256;
}

// The head dims the sm90 kernels serve: TMA rows of whole 16 bytes, at most
// the widest tile (the backward's and e4m3's).
constexpr bool sm90_head_dim_served(int head_dim) {
  return head_dim % 8 == 0 && head_dim >= 32 && head_dim <= 256;
}

// The 16-bit forward's: up to 576 (DeepSeek's MLA: 512 latent + 64 rope
// columns of Q and K), with two consumer warpgroups splitting each 64 rows'
// columns past 256.
constexpr int kSm90ForwardMaxHeadDim = 576;
constexpr bool sm90_forward_head_dim_served(int head_dim) {
  return head_dim % 8 == 0 && head_dim >= 32 && head_dim <= kSm90ForwardMaxHeadDim;
}

// Consumer warpgroups per 64 rows: 2 where either head dim passes 256 (O's
// 64 x 512 fp32 accumulators are twice one warpgroup's registers: each
// warpgroup holds half of O's columns, computes S over half of the Q/K
// columns, and the two halves of S are added through shared memory), else 1.
constexpr int sm90_forward_column_split(int head_dim_qk, int head_dim_v) {
  return head_dim_qk > 256 || head_dim_v > 256 ? 2 : 1;
}

// V's (and O's) tiled head dim: whole 128 columns where the columns are split.
constexpr int sm90_forward_tile_head_dim_v(int head_dim_qk, int head_dim_v,
                                           int element_bytes = 2) {
  return sm90_forward_column_split(head_dim_qk, head_dim_v) == 2
             ? (head_dim_v + 127) / 128 * 128
             : sm90_forward_tile_head_dim(head_dim_v, element_bytes);
}

// Whether V can be read from K's tiles (MLA's latent cache, V a view of K's
// first columns): 16 bits, and V's tiled columns within K's (at 264, say, K
// tiles as 320 and V as 384: V is then read apart).
constexpr bool sm90_forward_v_in_k_fits(int head_dim_qk, int head_dim_v, int element_bytes = 2) {
  return element_bytes == 2 && head_dim_v <= head_dim_qk &&
         sm90_forward_tile_head_dim_v(head_dim_qk, head_dim_v) <=
             sm90_forward_tile_head_dim(head_dim_qk);
}

struct FwdSm90Layout {
  // Of Q and K, tiled (sm90_forward_tile_head_dim): 64, 128, 192 or 256
  // (e4m3: 128 or 256).
  int head_dim;
  int block_m;    // 64 rows per consumer warpgroup: 64, 128 or 192
  int block_n;    // keys per K/V tile
  int stages;     // K/V ring depth
  int pack_gqa;   // query heads packed into a tile's rows (1: none)
  int page_size = 0;  // K/V rows per page (0: contiguous)
  int head_dim_v = 0;  // of V and O, tiled (0: head_dim)
  // Bytes of one Q/K/V element: 2 (bf16, fp16), or 1 (e4m3), whose V is
  // transposed in shared memory (fp8 wgmma reads B K-major only): TMA lands
  // each V tile in a staging ring, the producer warpgroup writes it as V^T
  // into a ring of its own.
  int element_bytes = 2;
  // Bytes of the caller's Q element: element_bytes, or 2 where 16-bit
  // queries meet an e4m3 KV cache: TMA then lands Q 16-bit and the producer
  // warpgroup's spare warps quantize it per row in place (the e4m3 rows at
  // the start of each warpgroup's buffer), its rows' scales beside it.
  int q_element_bytes = 0;  // 0: element_bytes
  // V is the first head_dim_v columns of K's rows (MLA's latent cache, one
  // tensor for both): no V ring; P V reads its V from the K stage.
  bool v_in_k = false;

  static constexpr int kSmemAlign = kSm90SmemAlign;
  static constexpr int kSmemBudget = kSm90SmemBudget;
  static constexpr int kRowBytes = 128;           // one swizzle row: 64 16-bit or 128 e4m3 elements
  static constexpr int kWarpgroupRows = 64;       // rows of one consumer warpgroup's wgmma

  // Past 256 columns two consumer warpgroups share each 64 rows, one half
  // of O's columns each (sm90_forward_column_split, of the tiled dims).
  constexpr int column_split() const { return head_dim > 256 || v_dim() > 256 ? 2 : 1; }
  // Groups of 64 query rows; consumer warpgroups, column_split() per group.
  constexpr int row_groups() const { return block_m / kWarpgroupRows; }
  constexpr int consumer_warpgroups() const { return row_groups() * column_split(); }
  constexpr int warps() const { return 4 * (1 + consumer_warpgroups()); }  // + the producer
  // 128-byte swizzle columns of Q and K, and of V.
  constexpr int col_blocks() const { return head_dim * element_bytes / kRowBytes; }
  constexpr int v_dim() const { return head_dim_v > 0 ? head_dim_v : head_dim; }
  constexpr int v_col_blocks() const { return v_dim() * element_bytes / kRowBytes; }
  constexpr bool transposes_v() const { return element_bytes == 1; }
  constexpr int q_elem_bytes() const {
    return q_element_bytes > 0 ? q_element_bytes : element_bytes;
  }
  constexpr bool quantizes_q() const { return q_elem_bytes() != element_bytes; }

  // Packed GQA: a warpgroup's 64 rows are (query position, head in group)
  // pairs, head fastest, so a tile holds whole groups of kPack heads of
  // 64 / kPack positions (a TMA box of [positions][heads][64 columns]); rows
  // past the last whole group are never loaded nor stored.
  constexpr int q_rows_per_warpgroup() const { return kWarpgroupRows / pack_gqa; }
  constexpr int loaded_rows_per_warpgroup() const { return q_rows_per_warpgroup() * pack_gqa; }
  constexpr int q_rows_per_tile() const { return q_rows_per_warpgroup() * row_groups(); }

  // Bytes of one Q buffer (every consumer warpgroup's 64 rows), and what TMA
  // writes into it (the transaction count of its barrier).
  constexpr int q_col_block_bytes() const { return kWarpgroupRows * kRowBytes; }
  constexpr int q_warpgroup_bytes() const { return col_blocks() * q_col_block_bytes(); }
  constexpr int q_bytes() const { return row_groups() * q_warpgroup_bytes(); }
  // TMA's Q (the staging buffer's where Q is quantized): its column blocks.
  constexpr int q_loaded_col_blocks() const { return head_dim * q_elem_bytes() / kRowBytes; }
  constexpr int q_loaded_bytes() const {
    return row_groups() * q_loaded_col_blocks() * loaded_rows_per_warpgroup() * kRowBytes;
  }
  // One Q buffer as TMA lands it (16-bit where Q is quantized, which then
  // holds the e4m3 rows too) and a warpgroup's share of it; and a quantized
  // Q's rows' scales (fp32), per Q buffer (0 otherwise).
  constexpr int q_buffer_warpgroup_bytes() const {
    return q_loaded_col_blocks() * q_col_block_bytes();
  }
  constexpr int q_buffer_bytes() const {
    return row_groups() * q_buffer_warpgroup_bytes();
  }
  constexpr int q_scale_bytes() const { return quantizes_q() ? 4 * block_m : 0; }
  // mbarriers of the Q buffers: q_full, q_empty, and where Q is quantized
  // qc_full (the e4m3 Q written), per buffer.
  constexpr int q_barriers() const { return quantizes_q() ? 3 : 2; }
  constexpr int kv_col_block_bytes() const { return block_n * kRowBytes; }
  constexpr int k_tile_bytes() const { return col_blocks() * kv_col_block_bytes(); }
  constexpr int v_tile_bytes() const { return v_in_k ? 0 : v_col_blocks() * kv_col_block_bytes(); }
  // V^T of one tile ([key blocks of 128][v_dim rows][128 B]), e4m3 only.
  constexpr int vt_col_block_bytes() const { return v_dim() * kRowBytes; }
  constexpr int vt_tile_bytes() const {
    return transposes_v() ? block_n / kRowBytes * vt_col_block_bytes() : 0;
  }
  // mbarriers of the K/V ring: k_full, v_full, k_empty, v_empty, and with
  // V^T its vt_full and vt_empty, `stages` each.
  constexpr int kv_barriers() const { return (transposes_v() ? 6 : 4) * stages; }
  constexpr int kv_box_rows() const { return flashjit::kv_box_rows(page_size, block_n); }

  // Split columns: each warpgroup's partial S (block_n / 2 fp32 per thread,
  // [register][thread] so that each store is one conflict-free row) for
  // its partner, per row group; two buffers where they fit (one barrier per
  // K/V tile), else one (a second barrier: read before overwritten).
  constexpr int s_exchange_warpgroup_bytes() const { return block_n / 2 * 128 * 4; }
  constexpr int s_exchange_buffer_bytes() const {
    return column_split() == 2 ? consumer_warpgroups() * s_exchange_warpgroup_bytes() : 0;
  }
  constexpr int s_exchange_buffers() const {
    return column_split() == 2 &&
                   smem_used_with(1, 2) + kSmemAlign <= kSmemBudget
               ? 2
               : 1;
  }

  // Bytes used with `q_buffers` Q buffers and `exchange_buffers` S exchange
  // buffers: the Q tiles, `stages` K tiles,
  // `stages` V tiles (and V^T tiles), a quantized Q's scales, the exchange,
  // then the mbarriers, 8 bytes each: q_full[q_buffers], q_empty[q_buffers],
  // the K/V ring's, and qc_full[q_buffers] where Q is quantized; then
  // a tile slot per Q buffer (8 bytes each): the work tile whose Q the
  // buffer holds, when the producer takes tiles from a counter.
  constexpr int smem_used_with(int q_buffers, int exchange_buffers) const {
    return q_buffers * (q_buffer_bytes() + q_scale_bytes()) +
           stages * (k_tile_bytes() + v_tile_bytes() + vt_tile_bytes()) +
           exchange_buffers * s_exchange_buffer_bytes() +
           8 * (q_barriers() * q_buffers + kv_barriers()) + 8 * q_buffers;
  }
  constexpr int smem_used(int q_buffers) const {
    return smem_used_with(q_buffers, s_exchange_buffers());
  }
  // Two Q buffers where they fit: the next work tile's Q loads while this
  // one's is still in use (until its last S).
  constexpr int q_stages() const { return smem_used(2) + kSmemAlign <= kSmemBudget ? 2 : 1; }
  constexpr int offset_k() const { return q_stages() * q_buffer_bytes(); }
  constexpr int offset_v() const { return offset_k() + stages * k_tile_bytes(); }
  constexpr int offset_vt() const { return offset_v() + stages * v_tile_bytes(); }
  constexpr int offset_s_exchange() const { return offset_vt() + stages * vt_tile_bytes(); }
  constexpr int offset_q_scales() const {
    return offset_s_exchange() + s_exchange_buffers() * s_exchange_buffer_bytes();
  }
  constexpr int offset_barriers() const { return offset_q_scales() + q_stages() * q_scale_bytes(); }
  constexpr int offset_tile_slots() const {
    return offset_barriers() + 8 * (q_barriers() * q_stages() + kv_barriers());
  }
  // The dynamic shared memory to launch with: the base is rounded up to
  // kSmemAlign inside the kernel.
  constexpr int smem_bytes() const { return smem_used(q_stages()) + kSmemAlign; }

};

}  // namespace flashjit
