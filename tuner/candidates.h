// The search space of a problem: every config the traits accept, pruned by
// the resource model before anything is compiled (shared memory, registers,
// threads), then by the compiled kernel's attributes (spills, occupancy).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "flashjit/problem.h"
#include "generator/target_arch.h"

namespace flashjit {

struct PrunedConfig {
  KernelConfig config;
  std::string reason;
};

struct CandidateSet {
  std::vector<KernelConfig> configs;  // to compile and measure
  std::vector<PrunedConfig> pruned;   // rejected before compiling, with why
};

// sm80 family: block_m {64, 128, 256} x block_n {32, 64, 128} x warps
// {4, 8} x stages {2, 3}, filtered by FwdSm80Traits; on sm_90a, also the
// sm90 family's search space where it serves the problem. The heuristic's
// config is always first. Every candidate's splits and pack_gqa are concrete,
// filled for its tiles as the heuristic fills its own (with_decode_fields).
// `modified`: the candidates compile a caller's modifiers in (the widest
// sm90 tiles are then left out, as the heuristic leaves them).
CandidateSet forward_candidates(const Problem &problem, const TargetArch &arch,
                                int max_smem_bytes, bool modified = false);

// After compiling: a candidate is dropped when it spills more than
// `max_spill_bytes` per thread or fits no CTA on an SM.
constexpr int kDefaultMaxSpillBytes = 64;
std::optional<std::string> reject_compiled(int spill_bytes, int occupancy,
                                           int max_spill_bytes = kDefaultMaxSpillBytes);

}  // namespace flashjit
