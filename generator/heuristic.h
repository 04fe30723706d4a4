// The configuration a problem gets when nothing better is known (no tuning).
#pragma once

#include "flashjit/problem.h"
#include "generator/target_arch.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/Error.h"

namespace flashjit {

// A complete config for `problem` on `arch` that fits `max_smem_bytes`
// (0: the architecture's limit). Fields already set in `partial` are kept.
KernelConfig default_forward_config(const Problem &problem, const TargetArch &arch,
                                    int max_smem_bytes = 0, const KernelConfig &partial = {});

// Tile sizes a heuristic tries, in order.
struct TileChoice {
  int block_m, block_n, warps, stages;
};

struct TileOutcome {
  KernelConfig config;
  bool fits = false;
};

// `partial` on `path` with each of `tiles` in turn filling the fields it
// leaves unset: the first that `fits` (an error: it does not), else the first
// complete one (fits = false) for validation to say why it does not fit.
TileOutcome choose_tiles(const KernelConfig &partial, KernelPath path,
                         llvm::ArrayRef<TileChoice> tiles,
                         llvm::function_ref<llvm::Error(const KernelConfig &)> fits);

// Opt-in shared memory per block the architecture allows.
int max_smem_per_block(const TargetArch &arch);

}  // namespace flashjit
