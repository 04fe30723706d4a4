// The backward's search space: each kernel family contributes its configs
// through one function, and every config is checked by make_backward_spec
// (the family's traits) before anything is compiled. The deterministic mode
// is not searched: it is the caller's choice and a class of its own
// (class_pass), so a tune of it searches tiles with deterministic set.
#pragma once

#include "flashjit/problem.h"
#include "generator/target_arch.h"
#include "tuner/candidates.h"

namespace flashjit {

// One family's configs for `problem` (unfiltered: the spec check prunes).
using BackwardFamilyConfigs = std::vector<KernelConfig> (*)(const Problem &problem,
                                                            const TargetArch &arch,
                                                            bool deterministic);

// sm80 (templates/bwd_sm80.cuh): block_m {64, 128} x block_n {32, 64, 128}
// x warps {4, 8} x stages {2, 1}.
std::vector<KernelConfig> backward_sm80_configs(const Problem &problem, const TargetArch &arch,
                                                bool deterministic);
// sm90 (templates/bwd_sm90.cuh) on sm_90a for head dims 64 and 128, not
// deterministic: its fixed tiles with 1 to 3 Q/dO stages.
std::vector<KernelConfig> backward_sm90_configs(const Problem &problem, const TargetArch &arch,
                                                bool deterministic);

// The heuristic's config first (halving breaks ties by index, so a candidate
// must be strictly faster to displace it), then every family's configs that
// validate for `problem` on `arch` with `max_smem_bytes` (0: the arch's
// limit); the rest in `pruned` with why. `modified`: the class has a
// caller's modifiers, whose heuristic config may differ
// (default_backward_config).
CandidateSet backward_candidates(const Problem &problem, const TargetArch &arch,
                                 int max_smem_bytes, bool deterministic, bool modified = false);

}  // namespace flashjit
