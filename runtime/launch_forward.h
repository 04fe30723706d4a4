// The forward pass on the GPU, below the public API: resolve the config, get
// the loaded kernel (compiling on first use), and launch.
#pragma once

#include <cuda.h>

#include "flashjit/forward.h"
#include "generator/kernel_spec.h"
#include "runtime/loaded_kernel.h"
#include "llvm/Support/Error.h"

namespace flashjit {

// Checks pointers (non-null, device-accessible) and strides against `problem`.
llvm::Error validate_forward_args(const Problem &problem, const ForwardArgs &args);

// The spec `problem` gets on the current device: `config` when complete, else
// the process database's tuning for the problem class, else `config`
// completed by the heuristic (choose_forward_config), validated against the
// device's shared-memory limit.
llvm::Expected<KernelSpec> resolve_forward_spec(const Problem &problem, const KernelConfig &config);

// The loaded kernel for `spec` in the current context, from the process cache,
// else from the process database's cubin store, else compiled now (and
// stored).
llvm::Expected<const LoadedKernel &> get_forward_kernel(const KernelSpec &spec);

// Validates everything, then launches. Never launches on bad input.
llvm::Error launch_forward(const Problem &problem, const ForwardArgs &args, CUstream stream,
                           const KernelConfig &config);

}  // namespace flashjit
