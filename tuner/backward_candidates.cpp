#include "tuner/backward_candidates.h"

#include <algorithm>

#include "generator/backward_spec.h"
#include "generator/bwd_sm90_traits.h"
#include "generator/heuristic.h"

namespace flashjit {

std::vector<KernelConfig> backward_sm80_configs(const Problem &, const TargetArch &,
                                                bool deterministic) {
  // FlashAttention-2's sm80 backward tiles (64x128 and 128x128 with 8 warps,
  // 64x64 for large head dims) and their neighbours; the traits reject what
  // the kernel cannot tile (block_n under 16 keys per warp, more than 200
  // accumulators per thread) or what exceeds shared memory.
  std::vector<KernelConfig> configs;
  for (int block_m : {64, 128})
    for (int block_n : {32, 64, 128})
      for (int warps : {4, 8})
        for (int stages : {2, 1}) {
          KernelConfig c{KernelPath::sm80, block_m, block_n, warps, stages};
          c.deterministic = deterministic;
          configs.push_back(c);
        }
  return configs;
}

std::vector<KernelConfig> backward_sm90_configs(const Problem &problem, const TargetArch &arch,
                                                bool deterministic) {
  // Nothing where the family cannot serve the class (not sm_90a, a head dim
  // it lacks, default tiles that cannot stage dQ for the deterministic
  // mode): no candidates to prune. In the deterministic mode the traits
  // prune the tiles that do not stage dQ.
  if (!sm90_backward_automatic_reason(problem, arch, deterministic).empty()) return {};
  std::vector<KernelConfig> configs = BwdSm90Traits::search_space(
      problem.head_dim_qk, problem.head_dim_v, max_smem_per_block(arch));
  for (KernelConfig &c : configs) c.deterministic = deterministic;
  return configs;
}

namespace {

// One row per backward kernel family; a new family is one function and one
// row (make_backward_spec says on which targets it builds).
const BackwardFamilyConfigs kFamilies[] = {backward_sm80_configs, backward_sm90_configs};

}  // namespace

CandidateSet backward_candidates(const Problem &problem, const TargetArch &arch,
                                 int max_smem_bytes, bool deterministic, bool modified) {
  if (max_smem_bytes <= 0) max_smem_bytes = max_smem_per_block(arch);
  CandidateSet set;
  auto consider = [&](const KernelConfig &config) {
    if (std::find(set.configs.begin(), set.configs.end(), config) != set.configs.end()) return;
    if (std::any_of(set.pruned.begin(), set.pruned.end(),
                    [&](const PrunedConfig &p) { return p.config == config; }))
      return;
    if (llvm::Error rejected =
            make_backward_spec(problem, config, arch, max_smem_bytes).takeError())
      set.pruned.push_back({config, llvm::toString(std::move(rejected))});
    else
      set.configs.push_back(config);
  };
  KernelConfig mode;
  mode.deterministic = deterministic;
  consider(default_backward_config(problem, arch, max_smem_bytes, mode, modified));
  for (BackwardFamilyConfigs family : kFamilies)
    for (const KernelConfig &config : family(problem, arch, deterministic)) consider(config);
  return set;
}

}  // namespace flashjit
