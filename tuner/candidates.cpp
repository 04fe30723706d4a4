#include "tuner/candidates.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "generator/fwd_sm80_traits.h"
#include "generator/fwd_sm90_traits.h"
#include "generator/heuristic.h"
#include "generator/kernel_spec.h"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit {

CandidateSet forward_candidates(const Problem &problem, const TargetArch &arch,
                                int max_smem_bytes, bool modified) {
  if (max_smem_bytes <= 0) max_smem_bytes = max_smem_per_block(arch);
  CandidateSet set;
  auto add = [&](const KernelConfig &config) {
    auto seen = [&](const KernelConfig &c) { return c == config; };
    if (std::any_of(set.configs.begin(), set.configs.end(), seen)) return;
    if (std::any_of(set.pruned.begin(), set.pruned.end(),
                    [&](const PrunedConfig &p) { return p.config == config; }))
      return;
    // The spec's validation is the kernel's own resource model (the traits:
    // shared memory, rows per warp, accumulator registers) and the decode
    // fields' rules: what it rejects would fail to compile, to launch, or
    // would spill, so it is never worth an NVRTC run.
    llvm::Error rejected =
        make_forward_spec(problem, config, arch, max_smem_bytes, modified).takeError();
    if (!rejected) {
      set.configs.push_back(config);
    } else {
      set.pruned.push_back({config, llvm::toString(std::move(rejected))});
    }
  };

  // Every candidate's splits and pack_gqa are concrete: a candidate is then
  // what its kernel runs, a tuning stores that, and tiles the heuristic also
  // chose are one candidate, not two compiling the same kernel. The
  // heuristic's fields first; decode tiles (64 rows) also with the other
  // packing and around the heuristic's split count (half, double, none):
  // the count is a launch parameter, so those share one compiled kernel.
  auto consider = [&](const KernelConfig &tiles) {
    const KernelConfig config = with_decode_fields(problem, tiles, /*sm_count=*/0);
    add(config);
    if (config.path != KernelPath::sm90 || config.block_m != 64) return;
    std::vector<KernelConfig> packings = {config};
    if (tiles.pack_gqa == GqaPacking::automatic && problem.heads_q / problem.heads_kv > 1) {
      KernelConfig other = tiles;
      other.pack_gqa = config.pack_gqa == GqaPacking::on ? GqaPacking::off : GqaPacking::on;
      packings.push_back(with_decode_fields(problem, other, /*sm_count=*/0));
    }
    const int64_t key_tiles = forward_key_tiles(problem, config.block_n);
    for (const KernelConfig &packed : packings) {
      add(packed);
      if (tiles.splits != 0 || packed.splits <= 1) continue;
      for (int64_t splits : {int64_t(1), int64_t(packed.splits / 2), int64_t(packed.splits) * 2}) {
        if (splits < 1 || splits > key_tiles || splits > 256) continue;
        KernelConfig variant = packed;
        variant.splits = static_cast<int>(splits);
        add(variant);
      }
    }
  };

  // The heuristic first: successive halving breaks ties by index, so a
  // candidate must be strictly faster to displace the default.
  consider(default_forward_config(problem, arch, max_smem_bytes, {}, 0, modified));
  // The sm80 space of bench/sweep_configs.py and a little more: the H200
  // sweep (docs/PERF.md) had winners at 128x128x4 (d=64), 128x64x4 and
  // 256x64x8 (d=128) and 128x64x8 (d=256), all inside this grid.
  for (int block_m : {64, 128, 256})
    for (int block_n : {32, 64, 128})
      for (int warps : {4, 8})
        for (int stages : {2, 3})
          consider(KernelConfig{KernelPath::sm80, block_m, block_n, warps, stages});
  // Both families on Hopper: the sm90 kernel's own tiles where it serves the
  // problem (sm90_fallback_reason says why not), the wider head dim's, as
  // the heuristic and validation take them (qk 64 / v 128: 128x160).
  if (sm90_fallback_reason(problem, arch).empty())
    for (const KernelConfig &config :
         FwdSm90Traits::search_space(std::max(problem.head_dim_qk, problem.head_dim_v),
                                     max_smem_bytes,
                                     FwdSm90Traits::lean(problem, modified),
                                     element_bytes(kv_element(problem))))
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
