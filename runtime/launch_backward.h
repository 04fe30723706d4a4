// The backward pass on the GPU, below the public API: validate, resolve the
// config, get the three loaded kernels (compiling on first use), launch.
#pragma once

#include <cuda.h>

#include "flashjit/backward.h"
#include <array>
#include <string>

#include "generator/kernel_spec.h"
#include "runtime/loaded_kernel.h"
#include "llvm/Support/Error.h"

namespace flashjit {

llvm::Error validate_backward_args(const Problem &problem, const BackwardArgs &args);

// `config` as the caller gave it if complete, else the database's tuning of
// the current device and the class (with the caller's `modifiers`, if any),
// else completed by the backward heuristic.
llvm::Expected<KernelSpec> resolve_backward_spec(const Problem &problem,
                                                 const KernelConfig &config,
                                                 const Modifiers *modifiers = nullptr);

// The loaded kernels of a backward spec: one per step, in backward_steps
// order, and with a block map (has_block_map) its pre-pass kernels.
struct BackwardKernelSet {
  std::array<const LoadedKernel *, 4> steps{};
  const LoadedKernel *block_kinds = nullptr;
  const LoadedKernel *block_list = nullptr;
  const LoadedKernel *block_mask_grid = nullptr;  // a caller's block mask's scatter
  // The program's KernelSpec::id(), once: the key of its kept block maps
  // (runtime/block_map_cache.h). Empty: its maps are built every call.
  std::string id{};
};

// Enqueues `spec`'s program on `stream` as a call runs it: the block map of
// a mask_mod (in a workspace freed after the main kernel), then each step
// (the sm90 main kernel with its TMA tensor maps, encoded before anything
// is enqueued). `args` are validated by the caller.
llvm::Error enqueue_backward(const BackwardKernelSet &kernels, const KernelSpec &spec,
                             const Problem &problem, const BackwardArgs &args, CUstream stream);

// Validates everything, then enqueues preprocess, main and dQ conversion on
// `stream`. Never launches on bad input.
llvm::Error launch_backward(const Problem &problem, const BackwardArgs &args, CUstream stream,
                            const KernelConfig &config);

}  // namespace flashjit
