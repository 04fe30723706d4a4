#include "tuner/candidates.h"

#include <algorithm>

#include "generator/fwd_sm80_traits.h"
#include "generator/fwd_sm90_traits.h"
#include "generator/heuristic.h"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit {

CandidateSet forward_candidates(const Problem &problem, const TargetArch &arch,
                                int max_smem_bytes) {
  if (max_smem_bytes <= 0) max_smem_bytes = max_smem_per_block(arch);
  CandidateSet set;
  auto consider = [&](const KernelConfig &tiles) {
    // splits and pack_gqa as the heuristic fills them for these tiles (the
    // heuristic's own config comes out so): a candidate is then what its
    // kernel runs, a tuning stores that, and tiles the heuristic also chose
    // are one candidate, not two compiling the same kernel.
    const KernelConfig config = with_decode_fields(problem, tiles, /*sm_count=*/0);
    auto seen = [&](const KernelConfig &c) { return c == config; };
    if (std::any_of(set.configs.begin(), set.configs.end(), seen)) return;
    if (std::any_of(set.pruned.begin(), set.pruned.end(),
                    [&](const PrunedConfig &p) { return p.config == config; }))
      return;
    // The traits are the kernel's own resource model (shared memory, rows
    // per warp, accumulator registers): what they reject would fail to
    // compile, to launch, or would spill, so it is never worth an NVRTC run.
    llvm::Error rejected =
        config.path == KernelPath::sm90
            ? FwdSm90Traits::make(problem.head_dim_qk, problem.head_dim_v, config.block_m,
                                  config.block_n, config.warps, config.stages, max_smem_bytes)
                  .takeError()
            : FwdSm80Traits::make(problem.head_dim_qk, problem.head_dim_v, config.block_m,
                                  config.block_n, config.warps, config.stages, max_smem_bytes)
                  .takeError();
    if (!rejected) {
      set.configs.push_back(config);
    } else {
      set.pruned.push_back({config, llvm::toString(std::move(rejected))});
    }
  };

  // The heuristic first: successive halving breaks ties by index, so a
  // candidate must be strictly faster to displace the default.
  consider(default_forward_config(problem, arch, max_smem_bytes));
  // The sm80 space of bench/sweep_configs.py and a little more: the H200
  // sweep (docs/PERF.md) had winners at 128x128x4 (d=64), 128x64x4 and
  // 256x64x8 (d=128) and 128x64x8 (d=256), all inside this grid.
  for (int block_m : {64, 128, 256})
    for (int block_n : {32, 64, 128})
      for (int warps : {4, 8})
        for (int stages : {2, 3})
          consider(KernelConfig{KernelPath::sm80, block_m, block_n, warps, stages});
  // Both families on Hopper: the sm90 kernel's own tiles where it serves the
  // problem (its fallback reason says why not otherwise).
  if (sm90_fallback_reason(problem, arch).empty())
    for (const KernelConfig &config :
         FwdSm90Traits::search_space(problem.head_dim_qk, max_smem_bytes))
      consider(config);
  return set;
}

std::optional<std::string> reject_compiled(int spill_bytes, int occupancy, int max_spill_bytes) {
  if (occupancy < 1)
    return llvm::formatv("no CTA fits on an SM (occupancy {0})", occupancy).str();
  // A few bytes of local memory are a stack slot or two, reloaded once; more
  // is a register tile spilled inside the K/V loop (docs/PERF.md: 100 B of
  // spill cost d=128 about 12%).
  if (spill_bytes > max_spill_bytes)
    return llvm::formatv("spills {0} B per thread (more than {1} B)", spill_bytes,
                         max_spill_bytes)
        .str();
  return std::nullopt;
}

}  // namespace flashjit
