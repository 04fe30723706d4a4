// The configuration a problem gets when nothing better is known (no tuning).
#pragma once

#include "flashjit/problem.h"
#include "generator/target_arch.h"

namespace flashjit {

// A complete config for `problem` on `arch` that fits `max_smem_bytes`
// (0: the architecture's limit). Fields already set in `partial` are kept.
KernelConfig default_forward_config(const Problem &problem, const TargetArch &arch,
                                    int max_smem_bytes = 0, const KernelConfig &partial = {});

// Opt-in shared memory per block the architecture allows.
int max_smem_per_block(const TargetArch &arch);

}  // namespace flashjit
