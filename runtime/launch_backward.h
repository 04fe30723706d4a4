// The backward pass on the GPU, below the public API: validate, resolve the
// config, get the three loaded kernels (compiling on first use), launch.
#pragma once

#include <cuda.h>

#include "flashjit/backward.h"
#include "generator/kernel_spec.h"
#include "llvm/Support/Error.h"

namespace flashjit {

llvm::Error validate_backward_args(const Problem &problem, const BackwardArgs &args);

// `config` as the caller gave it if complete, else the database's tuning of
// the current device and the class (with the caller's `modifiers`, if any),
// else completed by the backward heuristic.
llvm::Expected<KernelSpec> resolve_backward_spec(const Problem &problem,
                                                 const KernelConfig &config,
                                                 const Modifiers *modifiers = nullptr);

// Validates everything, then enqueues preprocess, main and dQ conversion on
// `stream`. Never launches on bad input.
llvm::Error launch_backward(const Problem &problem, const BackwardArgs &args, CUstream stream,
                            const KernelConfig &config);

}  // namespace flashjit
