#include "generator/bwd_sm90_traits.h"

#include <algorithm>

#include "flashjit/problem.h"
#include "generator/config_error.h"
#include "generator/heuristic.h"
#include "generator/kernel_spec.h"
#include "generator/target_arch.h"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit {

std::string BwdSm90Traits::unsupported_reason(int head_dim_qk, int head_dim_v) {
  if (std::string why =
          sm90_head_dims_reason("the sm90 backward", "32, 64, 96, 128, 192 or 256", head_dim_qk,
                                head_dim_v);
      !why.empty())
    return why;
  // Under the head-dim split each warpgroup takes half of each head dim's
  // columns, whole swizzle rows, and dQ by halves of the Q/K head dim: no 32
  // or 64 beside a 192 or a 256.
  const int widest = widest_tile(head_dim_qk, head_dim_v);
  if (widest >= 192 &&
      std::min(sm90_backward_tile_head_dim(head_dim_qk, head_dim_v),
               sm90_backward_tile_head_dim(head_dim_v, head_dim_qk)) <= 64)
    return llvm::formatv(
        "head_dim_qk={0}, head_dim_v={1}: the sm90 backward splits a head dim tiled as {2} "
        "between its warpgroups, and then needs the other tiled as 128 or more (over 64)",
        head_dim_qk, head_dim_v, widest);
  return "";
}

std::string sm90_backward_automatic_reason(const Problem &problem, const TargetArch &arch,
                                           bool deterministic) {
  if (std::string why = sm90_backward_fallback_reason(problem, arch); !why.empty()) return why;
  // Deterministic: where the default tiles stage dQ (checked on the H200:
  // bit-identical runs, 0.72-0.90x the default mode's speed and 2.6x the
  // sm80 family's deterministic mode; docs/PERF.md, 2026-12-02).
  if (deterministic) {
    const KernelConfig c = BwdSm90Traits::default_config(problem.head_dim_qk, problem.head_dim_v);
    auto traits = BwdSm90Traits::make(problem.head_dim_qk, problem.head_dim_v, c.block_m, c.block_n,
                                      c.warps, c.stages, max_smem_per_block(arch), true);
    if (!traits) return llvm::toString(traits.takeError());
  }
  return "";
}

std::string sm90_backward_fallback_reason(const Problem &problem, const TargetArch &arch) {
  if (!(arch.sm() == 90 && arch.arch_specific))
    return "the sm90 backward needs an sm_90a target (wgmma, setmaxnreg, TMA), not " + arch.name();
  return BwdSm90Traits::unsupported_reason(problem.head_dim_qk, problem.head_dim_v);
}

// d=64: 128-query tiles, though they spill 44-84 bytes (ptxas -v): on the
// H200 at seqlen 8k they ran 318/264 TFLOP/s (full/causal) against 239/225
// for 64-query tiles, whose dQ over each warpgroup's own keys doubles the
// reductions (docs/PERF.md, 2026-11-29).
int BwdSm90Traits::default_block_m(int head_dim_qk, int head_dim_v) {
  return widest_tile(head_dim_qk, head_dim_v) <= 64 ? 128 : 64;
}

// Two Q/dO stages wherever they leave room for the staged dQ (tiled head
// dims 32 to 192 but for 256), else one. With two, the next tile's Q and dO
// load a whole tile ahead and dQ's store runs under the tile's last product
// (the kernel's kDQUnderLastMma). H200, bf16, 16k tokens, one process, one
// stage -> two, TFLOP/s: d=128 full 512/2k/8k 266/407/471 -> 281/435/492,
// causal 168/341/445 -> 173/362/485; d=64 +2-8%, d=32 +4-10%, d=96 +1-6%,
// d=192 +4-9%, 160 +3-4%, 192/128 +2-4% (docs/PERF.md,
// 2026-12-03). The grid's tuning of 2026-11-30 had chosen one stage for every
// d=128 class, on a kernel that released the stage before dQ's product and
// had no resident CTAs. A caller's modifiers (score_mod, mask_mod, sinks)
// take two as well where the query tiles have 64 rows (tiled 96 and up:
// at d=128 their consumers spill no more with two than with one, cuobjdump;
// their gradients checked on the H200 with two, their speed not timed), and
// one with 128-row tiles (tiled 32 and 64), where two spilled the consumers
// (d=64: documents 0 -> 55 STL, the window with sinks 23 -> 49).
KernelConfig BwdSm90Traits::default_config(int head_dim_qk, int head_dim_v, bool modified,
                                           int block_n) {
  const int block_m = default_block_m(head_dim_qk, head_dim_v);
  if (!block_n) block_n = default_block_n(head_dim_qk, head_dim_v, modified);
  const BwdSm90Traits two{head_dim_qk, block_m, block_n, kWarps, 2, head_dim_v};
  const int stages = two.dq_staged() && !(modified && block_m == 128) ? 2 : 1;
  return KernelConfig{KernelPath::sm90, block_m, block_n, kWarps, stages};
}

int64_t BwdSm90Traits::work_items(const Problem &problem, int block_n) {
  return (problem.seqlen_k + block_n - 1) / block_n * problem.heads_kv * problem.batch;
}

int64_t BwdSm90Traits::grid_ctas(const Problem &problem, int block_n, int sm_count,
                                 bool resident) {
  const int64_t items = work_items(problem, block_n);
  return resident && sm_count > 0 ? std::min<int64_t>(items, sm_count) : items;
}

BwdSm90Traits::DispatchOrder BwdSm90Traits::dispatch_order(const Problem &problem, int block_n,
                                                          bool mask_mod, bool deterministic) {
  const int64_t pairs = std::max<int64_t>(1, problem.heads_kv * problem.batch);
  const MaskKind mask = normalized_mask(problem);  // window(-1, 0) is causal
  const bool masked = mask != MaskKind::none || mask_mod;
  constexpr int64_t kL2Bytes = 40ll << 20;  // of the H100/H200's 50 MB, what data keeps
  const int64_t element = 2;                // bf16 or fp16
  const int64_t head_bytes =
      std::max<int64_t>(1, problem.seqlen_q) *
      ((problem.head_dim_qk + problem.head_dim_v) * element + problem.head_dim_qk * 4);
  // The most pairs, a power of two, whose heads fit in `bytes`.
  auto pairs_within = [&](int64_t bytes) {
    int64_t n = 1;
    while (n * 2 * head_bytes <= bytes && n * 2 <= pairs) n *= 2;
    return n;
  };
  // Shortest first leaves a tail of about one longest item (a pair's
  // first key block): only where the work per SM is many of them.
  constexpr int64_t kSms = 132;  // an H100's or H200's
  const bool many_items = work_items(problem, block_n) >= 12 * kSms;
  if (deterministic && mask != MaskKind::none && !mask_mod &&
      problem.heads_q == problem.heads_kv && problem.head_dim_qk == problem.head_dim_v &&
      head_bytes <= (32ll << 20) && many_items)
    return {static_cast<int>(pairs_within(24ll << 20)), true};  // see the header
  int64_t section = pairs_within(kL2Bytes);
  int64_t least = 1;
  if (deterministic) {
    // The head-dim split's 64-key blocks (192 and 256 wide): see the header.
    const bool wide = block_n == 64;
    const int64_t key_blocks = (std::max<int64_t>(1, problem.seqlen_k) + block_n - 1) / block_n;
    if (wide && !masked)
      return {static_cast<int>(std::clamp<int64_t>(section, std::min<int64_t>(pairs, 2), 8)),
              false};
    least = std::min<int64_t>(pairs, wide && key_blocks <= 32 ? 16 : 8);
  }
  if (!masked) return {static_cast<int>(least), false};
  // Sections that divide the pairs, where one down to half the size does:
  // a last section shorter than the others starts its heaviest items when
  // nothing else is left to dispatch, and SMs idle while they run. H200,
  // bf16, d=128, 16k tokens, GQA 28/4 causal (a simulation of 132 SMs,
  // busiest SM over the average, in brackets): at 1500 tokens 40 pairs in
  // sections of 16, 16, 8 (1.22) -> 10 (1.02), at 3000 20 pairs in 8, 8, 4
  // (1.27) -> 5 (1.06). The deterministic mode keeps its sections.
  if (!deterministic)
    for (int64_t divisor = section; 2 * divisor >= section; --divisor)
      if (pairs % divisor == 0) {
        section = divisor;
        break;
      }
  return {static_cast<int>(std::max(section, least)), false};
}

std::vector<KernelConfig> BwdSm90Traits::search_space(int head_dim_qk, int head_dim_v,
                                                      int max_smem_bytes) {
  std::vector<KernelConfig> out;
  for (int block_n : {64, 128})
    for (int block_m : {64, 128})
      for (int stages = 1; stages <= 3; ++stages) {
        BwdSm90Traits t{head_dim_qk, block_m, block_n, kWarps, stages, head_dim_v};
        if (block_n_allowed(head_dim_qk, head_dim_v, block_n) &&
            block_m_allowed(head_dim_qk, head_dim_v, block_m) && t.smem_bytes() <= max_smem_bytes)
          out.push_back(KernelConfig{KernelPath::sm90, block_m, block_n, kWarps, stages});
      }
  return out;
}

llvm::Expected<BwdSm90Traits> BwdSm90Traits::make(int head_dim_qk, int head_dim_v, int block_m,
                                                 int block_n, int warps, int stages,
                                                 int max_smem_bytes, bool deterministic) {
  BwdSm90Traits t{head_dim_qk, block_m, block_n, warps, stages, head_dim_v};
  std::vector<std::string> why;
  const std::string dims = unsupported_reason(head_dim_qk, head_dim_v);
  if (!dims.empty()) why.push_back(dims);
  // The head dims as the messages name them: "128", or "192/128" when they differ.
  const std::string dims_text = head_dim_v == head_dim_qk
                                    ? std::to_string(head_dim_qk)
                                    : llvm::formatv("{0}/{1}", head_dim_qk, head_dim_v).str();
  const int widest = widest_tile(head_dim_qk, head_dim_v);
  if (dims.empty() && !block_m_allowed(head_dim_qk, head_dim_v, block_m))
    why.push_back(
        llvm::formatv("block_m={0} is not {1} at head dim {2} (registers: S^T, dP^T, "
                      "dK and dV of a warpgroup)",
                      block_m, widest <= 64 ? "64 or 128" : "64", dims_text));
  if (dims.empty() && !block_n_allowed(head_dim_qk, head_dim_v, block_n)) {
    const char *allowed = "128", *why_n = "64 keys per consumer warpgroup, two";
    if (widest >= 192 && sm90_backward_wide_own_keys(head_dim_qk, t.v_dim())) {
      allowed = "64 or 128";
      why_n = "64 keys shared by two consumer warpgroups, or 64 each";
    } else if (widest >= 192) {
      allowed = "64";
      why_n = "64 keys shared by two consumer warpgroups";
    }
    why.push_back(llvm::formatv("block_n={0} is not {1} at head dim {2} ({3})", block_n, allowed,
                                dims_text, why_n));
  }
  if (warps != kWarps)
    why.push_back(llvm::formatv("warps={0} is not {1} (one producer and two consumer warpgroups)",
                                warps, kWarps));
  if (stages < 1 || stages > 3)
    why.push_back(llvm::formatv("stages={0} is not in [1, 3] (Q/dO buffers)", stages));
  // The deterministic mode is a matter of tiles: dQ must be staged.
  if (deterministic && why.empty() && !t.dq_staged())
    why.push_back(
        "the deterministic sm90 backward orders dQ's reduce-adds through shared memory, which "
        "has no room for the staged dQ at these head dims and tiles (use sm80, or fewer stages)");
  if (why.empty() && max_smem_bytes > 0 && t.smem_bytes() > max_smem_bytes)
    why.push_back(smem_reason(t.smem_bytes(), max_smem_bytes));
  if (!why.empty())
    return invalid_config("sm90 backward", block_m, block_n, warps, stages, head_dim_qk,
                          head_dim_v, why);
  return t;
}

}  // namespace flashjit
