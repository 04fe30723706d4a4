// Host-side twin of the sm90 forward kernel's traits (templates/fwd_sm90.cuh):
// which head dims and tiles the TMA + wgmma kernel serves, its shared memory
// and launch shape, derived from the same primitive parameters. A change to
// the kernel's layout must be mirrored here.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "generator/launch_geometry.h"
#include "llvm/Support/Error.h"
#include "templates/common/fwd_sm90_layout.cuh"

namespace flashjit {

struct Problem;
struct KernelConfig;
struct TargetArch;

struct FwdSm90Traits {
  int head_dim = 0;  // of Q and K, the problem's (tiled as sm90_forward_tile_head_dim)
  int block_m = 0;
  int block_n = 0;
  int warps = 0;
  int stages = 0;
  int pack_gqa = 1;  // query heads packed into a tile's rows (1: none)
  int page_size = 0;  // K/V rows per page (0: contiguous)
  int head_dim_v = 0;  // of V and O (0: head_dim)
  int element_bytes = 2;  // of K and V (and the GEMMs' Q): 1 for e4m3 (FwdSm90Layout)
  int q_element_bytes = 0;  // of the caller's Q (0: element_bytes)
  bool v_in_k = false;  // V read from K's tiles (FwdSm90Layout::v_in_k)

  // 64 query rows per consumer warpgroup: two (block_m 128) at every head
  // dim, three (block_m 192) at head dim 64, whose short GEMMs leave a
  // warpgroup's softmax two others' turns to hide under, and one (block_m
  // 64) for decode, where a 128-row tile would compute mostly padding rows
  // and the kernel must stay bound by reading K and V.
  static constexpr int kBlockM = 128;
  // Packed GQA: a group's query heads share one 64-row warpgroup, so at
  // most 64 of them pack.
  static constexpr int kMaxPackedHeads = FwdSm90Layout::kWarpgroupRows;
  // The query heads a packed tile holds for a GQA group of `ratio`: the
  // whole group, or where it is wider than kMaxPackedHeads its largest part
  // that divides it (128 heads on one KV head: 64, two tiles a group); 1
  // where no part of 2 or more does.
  static int packed_heads(int64_t ratio) {
    for (int64_t part = std::min<int64_t>(ratio, kMaxPackedHeads); part >= 2; --part)
      if (ratio % part == 0) return static_cast<int>(part);
    return 1;
  }
  // Past 256 columns two consumer warpgroups share one row group of 64
  // (sm90_forward_column_split): block_m 64 only. `head_dim`: the wider of
  // the problem's two.
  static bool block_m_allowed(int head_dim, int block_m) {
    if (head_dim > 256) return block_m == 64;
    return block_m == 64 || block_m == 128 ||
           (block_m == 192 && sm90_forward_tile_head_dim(head_dim) == 64);
  }
  // The producer warpgroup + the consumers (two per row group past 256).
  static int warps_for(int block_m, int head_dim = 0) {
    return 4 * (1 + block_m / 64 * (head_dim > 256 ? 2 : 1));
  }
  static constexpr int kSmemAlign = FwdSm90Layout::kSmemAlign;
  static constexpr int kSmemBudget = FwdSm90Layout::kSmemBudget;

  // The layout arithmetic, compiled from the header the kernel uses.
  FwdSm90Layout layout() const {
    return {sm90_forward_tile_head_dim(head_dim, element_bytes),
            block_m,
            block_n,
            stages,
            pack_gqa,
            page_size,
            sm90_forward_tile_head_dim_v(head_dim, head_dim_v > 0 ? head_dim_v : head_dim,
                                         element_bytes),
            element_bytes,
            q_element_bytes,
            v_in_k};
  }
  int threads() const { return 32 * warps; }
  // Q buffers: two where they fit in kSmemBudget (the next work tile's Q
  // loads while this one's is still in use), else one.
  int q_stages() const { return layout().q_stages(); }
  // Q buffers, kStages K and V tiles, the mbarriers, and slack to align the base.
  int smem_bytes() const { return layout().smem_bytes(); }

  // Why the sm90 kernel cannot serve this head-dim pair at all (empty: it can).
  static std::string unsupported_reason(int head_dim_qk, int head_dim_v);
  // The grid: one CTA per SM (each looping over work tiles) rather than one
  // CTA per work tile. Without a mask every work tile costs the same. Under
  // a mask the tiles of a head cost from 1 to `query_blocks` K/V tiles, and
  // the kernel's rotation (round k, CTA c: tile k * SMs + (c + k) % SMs,
  // heaviest query block first) walks each CTA through those costs one step
  // per round: with at least about as many rounds as query blocks every CTA
  // sees the whole range and the static assignment balances; with fewer the
  // hardware's block scheduler does better. H200, TFLOP/s, one CTA per SM
  // against one per work tile: causal 2048 d=64 (31 rounds, 16 blocks) 336
  // -> 368, d=128 (15.5 rounds) 496 -> 521, d=256 (7.75 rounds) 507 -> 480;
  // causal 8192 d=128 (15.5 rounds, 64 blocks) lost 12%.
  static bool persistent_grid(bool masked, int64_t query_blocks, int64_t work_tiles,
                              int sm_count) {
    return !masked || work_tiles >= (query_blocks - 1) * sm_count;
  }
  // Every reason the config cannot be compiled or launched, in one message.
  // `lean`: the problem is one of lean()'s (wider tiles allowed).
  // `element_bytes` 1 (e4m3): block_n 128, whose V^T rows are one 128-byte
  // swizzle block (fp8 wgmma's k32 steps walk them), and 64 or 128 rows.
  static llvm::Expected<FwdSm90Traits> make(int head_dim_qk, int head_dim_v, int block_m,
                                            int block_n, int warps, int stages,
                                            int max_smem_bytes, bool lean = false,
                                            int element_bytes = 2, int q_element_bytes = 0);
  // An e4m3 problem's tiles from the 16-bit heuristic's `c` at `head_dim`:
  // its rows (64 for decode, else 128) and 128 keys; 3 stages where the tile
  // head dim is 128, else 2 (one Q buffer at 256: 224 KB). `quantized_q`
  // (16-bit Q over an e4m3 cache, whose 16-bit Q buffer is twice the e4m3
  // one's): 64 rows at 256, where 128 do not fit.
  static KernelConfig fp8_config(const KernelConfig &c, int head_dim, bool quantized_q = false);
  static constexpr int kFp8BlockN = 128;
  // The variants whose consumers hold the fewest live registers: no
  // softcap, no window (as the kernel compiles it: normalized_mask), K/V
  // not in a cache (paged, or with per-sequence key counts), none of a
  // caller's modifiers (`modified`). Only they take the widest tiles,
  // FlashAttention-3's: 192x128 at d=64, where a softcap, a window, a paged
  // cache or a score_mod under a causal mask spilled 8-172 bytes, and
  // block_n 144-176 at d=128, where a mask_mod spilled 4-132 and a causal
  // serving batch (varlen over a cache, packed heads) 16-44.
  static bool lean(const Problem &problem, bool modified);
  // The largest block_n per head dim and block_m whose kernel compiled
  // without spills (ptxas -v): S, P and O of a consumer warpgroup share its
  // 240 registers (160 with three consumer warpgroups); wider for lean
  // problems.
  static int max_block_n(int head_dim, int block_m, bool lean = false);
  // The heuristic's config for `seqlen_q` queries (0: unknown, taken as
  // short): measured on the H200, a starting point for the tuner. Its
  // seqlen rule follows the tuning database's size buckets (ceil(log2)), so
  // a whole bucket gets one config.
  // `rows_per_query` is the query heads packed into a tile's rows (1: none):
  // when seqlen_q of them fit one warpgroup's 64 rows (decode), one consumer
  // warpgroup. `masked`: a causal or window mask (its diagonal tiles make
  // the three warpgroups' padding rows dearer). `lean`: the problem is one
  // of lean()'s, which take the widest tiles (at d=128 only without a mask
  // beyond kWideKeyTilesUnmaskedAbove queries).
  static constexpr int64_t kThreeWarpgroupsAbove = 1024;
  static constexpr int64_t kThreeWarpgroupsUnmaskedAbove = 512;
  // Lean problems' 192x128 tiles pay from the (256, 512] bucket on,
  // although 512 queries pad to 576 rows (default_config's measurements);
  // at 256 two 128-row tiles cover them without padding.
  static constexpr int64_t kThreeWarpgroupsLeanUnmaskedAbove = 256;
  static constexpr int64_t kWideKeyTilesUnmaskedAbove = 2048;
  static KernelConfig default_config(int head_dim, int64_t seqlen_q, int64_t rows_per_query = 1,
                                     int page_size = 0, bool masked = true, bool lean = false);
  // Every config the kernel claims at `head_dim` within `max_smem_bytes`:
  // block_n from 48 to max_block_n in steps of 16, 2 to 4 stages. The compile
  // test builds each of them and checks for spills.
  static std::vector<KernelConfig> search_space(int head_dim, int max_smem_bytes,
                                                bool lean = false, int element_bytes = 2);
};

// Why the sm90 family cannot serve `problem` on `arch` (empty: it can): the
// target is not sm_90a, or the head dims are not ones it has.
std::string sm90_fallback_reason(const Problem &problem, const TargetArch &arch);

}  // namespace flashjit
