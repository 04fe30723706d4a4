#include "generator/fwd_sm90_traits.h"

#include <algorithm>
#include <string>
#include <vector>

#include "flashjit/problem.h"
#include "generator/config_error.h"
#include "generator/kernel_spec.h"
#include "generator/target_arch.h"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit {

std::string FwdSm90Traits::unsupported_reason(int head_dim_qk, int head_dim_v) {
  for (auto [name, d] : {std::pair{"head_dim", head_dim_qk}, {"head_dim_v", head_dim_v}})
    if (!sm90_forward_head_dim_served(d))
      return llvm::formatv("{0}={1}: the sm90 kernel serves head dims that are multiples of 8 "
                           "from 32 to {2} (16-byte TMA rows, tiled as 64, 128, 192, 256, then "
                           "whole 64 columns)",
                           name, d, kSm90ForwardMaxHeadDim)
          .str();
  return "";
}

std::string sm90_fallback_reason(const Problem &problem, const TargetArch &arch) {
  if (!(arch.sm() == 90 && arch.arch_specific))
    return "the sm90 kernel needs an sm_90a target (wgmma, setmaxnreg, TMA), not " + arch.name();
  // TMA reads a page's rows as boxes in whole swizzle atoms; the sm80
  // family gathers any page size row by row (cp.async).
  if (problem.page_size % 16 != 0)
    return llvm::formatv("its TMA reads pages of whole 16-row boxes, and page_size={0} is not "
                         "a multiple of 16 (the sm80 family gathers such pages row by row)",
                         problem.page_size)
        .str();
  return FwdSm90Traits::unsupported_reason(problem.head_dim_qk, problem.head_dim_v);
}

bool FwdSm90Traits::lean(const Problem &problem, bool modified) {
  // The mask the kernel compiles: window(-1, 0) is the causal kernel.
  const MaskKind mask = normalized_mask(problem);
  return !modified && problem.softcap == 0.f &&
         (mask == MaskKind::none || mask == MaskKind::causal) && problem.page_size == 0 &&
         !problem.seqused_k;
}

int FwdSm90Traits::max_block_n(int head_dim, int block_m, bool lean) {
  // d=64 at block_n 192 spilled 64-280 bytes. d=128: 176 for lean problems,
  // FlashAttention-3's tile there (64 + 88 + 44 registers of O, S and P in
  // 240: 0 bytes since the intra-warpgroup overlap's rework, where it had
  // spilled), else 128. d=256 fits only 80 in shared memory with two
  // stages. Three consumer warpgroups at d=64 (160 registers each): 128 for
  // lean problems, else 112.
  // d=192 (intra-warpgroup overlap, O 96 registers): 112, FlashAttention-3's
  // tile there, and the widest whose two stages fit beside one Q buffer.
  if (block_m == 192) return lean ? 128 : 112;
  // Past 256 (two warpgroups per 64 rows, O 128 registers each): shared
  // memory bounds it first (d=512: Q 64 KB, each K and V tile 1 KB a key).
  if (head_dim > 256) return 64;
  head_dim = sm90_forward_tile_head_dim(head_dim);
  return head_dim == 64 ? 128 : head_dim == 128 ? (lean ? 176 : 128) : head_dim == 192 ? 112 : 96;
}

KernelConfig FwdSm90Traits::default_config(int head_dim, int64_t seqlen_q,
                                           int64_t rows_per_query, int page_size, bool masked,
                                           bool lean) {
  // FlashAttention-3 uses 192x128 (d=64), 128x176 (d=128) and 128x80 (d=256);
  // here block_n is capped by max_block_n. Fastest on the H200 (2026-11-30):
  // - d=64 beyond 1024 queries: 192x112 with 3 stages, three consumer
  //   warpgroups taking turns (8k full 452.7 -> 527.5 TFLOP/s, causal 423.7
  //   -> 480.9; 2048 full 432.0 -> 464.2, causal 365.3 -> 385.1). At 512 it
  //   lost (358.8 -> 347.1, causal 239.9 -> 208.0): 192-row tiles over 512
  //   or 1024 rows compute 11-12% padding rows (3 and 6 tiles), over 2048
  //   3%.
  // - d=64 without a mask, 513-1024 queries: 192x96 with 3 stages (H100,
  //   2026-12-06, `bench/compare.py` 16k tokens: 1024 full 382.7 -> 409.0
  //   TFLOP/s; at 512 within noise, 353.8 -> 360.4 with 192x112). Over
  //   1024 keys block_n 96 leaves a 64-key last tile where 112 leaves 16.
  // - Lean problems (lean()) take block_n 128 at 192 rows, FlashAttention-3's
  //   tile (H100, 2026-12-06, `flashjit run` 16k tokens, against 192x112:
  //   full 1k / 2k / 8k / 16k 395 / 485 / 538 / 524 -> 449 / 527 / 580 /
  //   532 TFLOP/s; causal 273 / 389 / 488 / 497 -> 289 / 401 / 493 / 524).
  //   Without a mask from 257 queries on (H100, `flashjit tune`, 32x32
  //   heads x 512: 1.14x over 128x128 s3; 192x112 had tied 128x128 at
  //   512, and 128 beat 112 by 14% at 1k).
  // - d=64 otherwise up to 1024 queries: 128x128 with 3 stages (2 the same).
  // - d=128: 128x128 with 2 stages, which leaves room for a second Q buffer
  //   (causal 512: 317 against 277 with 3 stages and one Q buffer; from 4k
  //   on the same). Lean and unmasked beyond 2048 queries: 128x160 (H100,
  //   same run: 4k / 8k / 16k 666 / 638 / 638 -> 674 / 687 / 650; 176
  //   673 / 681 / 648; at 512-2k and under a causal mask 128 is as fast or
  //   faster, up to 14% at causal 512).
  // - d=256: 128x80 with 2 (block_n 48, the largest with two Q buffers: 438
  //   against 492 at causal 2k).
  // - decode (seqlen_q times the packed heads within 64 rows): 64 rows, one
  //   consumer warpgroup; the kernel must stay bound by reading K and V.
  // - d=192: 128x112 with 2 stages and one Q buffer, FlashAttention-3's.
  // - past 256 (split columns): 64 x 32 with 2 stages, which fit beside
  //   the 64 KB of Q at d=512 (and MLA's 576/512 with one S exchange
  //   buffer), for prefill and decode alike.
  // Head dims between tile as the next of 64, 128, 192 and 256, and take its tiles.
  KernelConfig c;
  c.path = KernelPath::sm90;
  if (head_dim > 256) {
    c.block_m = 64;
    c.block_n = 32;
    c.stages = 2;
    c.warps = warps_for(c.block_m, head_dim);
    return c;
  }
  head_dim = sm90_forward_tile_head_dim(head_dim);
  if (seqlen_q > 0 && seqlen_q * rows_per_query <= 64) {
    // H200, Llama-3-8B decode (32/8 heads, d=128), GB/s (`flashjit run`,
    // 2026-12-01): one consumer warpgroup with block_n 64 x 2 stages
    // against 128 x 3: 1x8k 1667 / 1545, 64x4k 4188 / 4053, 1x128k 3998 /
    // 3619; against two warpgroups splitting the keys (64 x 4 stages):
    // 1x8k 1650 / 1426, 64x4k 4159 / 3931, 16x32k 4327 / 4082, 1x128k
    // 4056 / 3588. d=64 and 256 keep d=128's K/V tile bytes (not measured).
    c.block_m = 64;
    c.block_n = head_dim == 64 ? 128 : head_dim == 128 ? 64 : 80;
    c.stages = head_dim == 64 ? 3 : 2;
    // A paged cache with its pages shuffled costs each K/V load more
    // latency than a contiguous one: more bytes in flight pay. H200, d=128,
    // 1x128k / 16x32k / 256x1k GB/s against contiguous 64 x 2 (3977 / 4268
    // / 4252): page 64 at 64 x 2 3484 / 4000 / -, at 64 x 4 3607 / 4066 /
    // 3994; page 32 at 64 x 4 3718 / 4051 / 3985; page 16 at 64 x 4 2976 /
    // 3255 / 3237, at 128 x 3 3284 / 3636 / 3619 (docs/PERF.md).
    if (page_size > 0 && head_dim == 128) {
      c.block_n = page_size < 32 ? 128 : 64;
      c.stages = page_size < 32 ? 3 : 4;
    }
  } else if (head_dim == 64 && seqlen_q > kThreeWarpgroupsAbove) {
    c.block_m = 192;
    c.block_n = lean ? 128 : 112;
    c.stages = 3;
  } else if (head_dim == 64 && !masked &&
             seqlen_q > (lean ? kThreeWarpgroupsLeanUnmaskedAbove : kThreeWarpgroupsUnmaskedAbove)) {
    c.block_m = 192;
    c.block_n = lean ? 128 : 96;
    c.stages = 3;
  } else if (head_dim == 128 && !masked && lean && seqlen_q > kWideKeyTilesUnmaskedAbove) {
    c.block_m = kBlockM;
    c.block_n = 160;
    c.stages = 2;
  } else {
    c.block_m = kBlockM;
    c.block_n = head_dim == 256 ? 80 : head_dim == 192 ? 112 : 128;
    c.stages = head_dim == 64 ? 3 : 2;
  }
  c.warps = warps_for(c.block_m);
  return c;
}

std::vector<KernelConfig> FwdSm90Traits::search_space(int head_dim, int max_smem_bytes,
                                                      bool lean, int element_bytes) {
  std::vector<KernelConfig> out;
  if (element_bytes == 1) {
    for (int block_m : {64, 128})
      for (int stages = 2; stages <= 4; ++stages) {
        FwdSm90Traits t{head_dim, block_m, kFp8BlockN, warps_for(block_m), stages};
        t.element_bytes = 1;
        if (t.smem_bytes() <= max_smem_bytes)
          out.push_back(KernelConfig{KernelPath::sm90, block_m, kFp8BlockN, warps_for(block_m),
                                     stages});
      }
    return out;
  }
  if (head_dim > 256) {
    for (int block_n = 32; block_n <= max_block_n(head_dim, 64, lean); block_n += 16)
      for (int stages = 2; stages <= 4; ++stages) {
        FwdSm90Traits t{head_dim, 64, block_n, warps_for(64, head_dim), stages};
        if (t.smem_bytes() <= max_smem_bytes)
          out.push_back(KernelConfig{KernelPath::sm90, 64, block_n, t.warps, stages});
      }
    return out;
  }
  for (int block_m : {64, 128, 192}) {
    if (!block_m_allowed(head_dim, block_m)) continue;
    const int warps = warps_for(block_m);
    for (int block_n = 48; block_n <= max_block_n(head_dim, block_m, lean); block_n += 16)
      for (int stages = 2; stages <= 4; ++stages) {
        // 64 rows are decode's tile, bound by reading K/V: only block_n 64
        // (the heuristic's at d=128) and the widest that every problem
        // takes (the heuristic's for a paged cache of small pages; lean
        // problems' wider tiles were measured for prefill only).
        if (block_m == 64 && block_n != 64 && block_n != max_block_n(head_dim, block_m))
          continue;
        FwdSm90Traits t{head_dim, block_m, block_n, warps, stages};
        if (t.smem_bytes() <= max_smem_bytes)
          out.push_back(KernelConfig{KernelPath::sm90, block_m, block_n, warps, stages});
      }
  }
  return out;
}

KernelConfig FwdSm90Traits::fp8_config(const KernelConfig &c, int head_dim, bool quantized_q) {
  KernelConfig out = c;
  const bool wide = sm90_forward_tile_head_dim(head_dim, 1) == 256;
  out.block_m = c.block_m == 64 || (quantized_q && wide) ? 64 : kBlockM;
  out.warps = warps_for(out.block_m);
  out.block_n = kFp8BlockN;
  out.stages = sm90_forward_tile_head_dim(head_dim, 1) == 128 ? 3 : 2;
  return out;
}

llvm::Expected<FwdSm90Traits> FwdSm90Traits::make(int head_dim_qk, int head_dim_v, int block_m,
                                                 int block_n, int warps, int stages,
                                                 int max_smem_bytes, bool lean,
                                                 int element_bytes, int q_element_bytes) {
  FwdSm90Traits t{head_dim_qk, block_m, block_n, warps, stages};
  t.head_dim_v = head_dim_v;
  t.element_bytes = element_bytes;
  t.q_element_bytes = q_element_bytes;
  // e4m3: the tiles its V^T and register budgets were laid out for.
  const bool fp8 = element_bytes == 1;
  std::vector<std::string> why;
  std::string dims = unsupported_reason(head_dim_qk, head_dim_v);
  if (!dims.empty()) why.push_back(dims);
  // Unequal head dims are bound by the wider one (O's registers, K's bytes).
  const int head_dim = std::max(head_dim_qk, head_dim_v);
  if (fp8 && head_dim > 256)
    why.push_back(llvm::formatv("head dim {0}: e4m3 serves head dims up to 256", head_dim));
  else if (fp8 ? block_m != 64 && block_m != 128 : !block_m_allowed(head_dim, block_m))
    why.push_back(fp8 ? llvm::formatv("block_m={0} is not 64 or 128 with e4m3", block_m).str()
                  : head_dim > 256
                      ? llvm::formatv("block_m={0} is not 64 (past head dim 256 two consumer "
                                      "warpgroups share one group of 64 rows)",
                                      block_m)
                            .str()
                      : llvm::formatv("block_m={0} is not 64 or 128 (one or two consumer "
                                      "warpgroups of 64 rows) or, at head dim 64, 192 (three)",
                                      block_m)
                            .str());
  else if (const int expected = warps_for(block_m, fp8 ? 0 : head_dim); warps != expected)
    why.push_back(llvm::formatv("warps={0} is not {1} (one producer and {2} consumer warpgroups "
                                "at block_m={3})",
                                warps, expected, (expected - 4) / 4, block_m));
  if (fp8 && block_n != kFp8BlockN)
    why.push_back(llvm::formatv("block_n={0} is not {1} with e4m3 (V^T's rows are one 128-byte "
                                "swizzle block of keys)",
                                block_n, kFp8BlockN));
  else if (!fp8 && (block_n < 16 || block_n % 16 || block_n > 256))
    why.push_back(llvm::formatv("block_n={0} is not a multiple of 16 in [16, 256]", block_n));
  else if (!fp8 && dims.empty() && block_n > max_block_n(head_dim, block_m, lean))
    why.push_back(llvm::formatv(
        "block_n={0} exceeds {1} at head dim {2}, block_m {3} (the kernel spills{4})", block_n,
        max_block_n(head_dim, block_m, lean), head_dim, block_m,
        !lean && block_n <= max_block_n(head_dim, block_m, true)
            ? "; wider only without a softcap, a window, a KV cache or modifiers"
            : ""));
  if (stages < 2 || stages > 4)
    why.push_back(llvm::formatv("stages={0} is not in [2, 4]", stages));
  if (why.empty() && max_smem_bytes > 0 && t.smem_bytes() > max_smem_bytes)
    why.push_back(smem_reason(t.smem_bytes(), max_smem_bytes));
  if (!why.empty())
    return invalid_config(fp8 ? "sm90 e4m3 forward" : "sm90 forward", block_m, block_n, warps,
                          stages, head_dim_qk, head_dim_v, why);
  return t;
}

}  // namespace flashjit
