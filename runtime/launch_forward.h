// The forward pass on the GPU, below the public API: resolve the config, get
// the loaded kernel (compiling on first use), and launch.
#pragma once

#include <cuda.h>

#include <string>

#include "flashjit/forward.h"
#include "templates/common/fwd_params.cuh"
#include "generator/kernel_spec.h"
#include "runtime/loaded_kernel.h"
#include "llvm/Support/Error.h"

namespace flashjit {

// Checks pointers (non-null, device-accessible) and strides against `problem`.
llvm::Error validate_forward_args(const Problem &problem, const ForwardArgs &args);

// A call's modifiers and aux values (either pass): valid fields, and exactly
// the bytes of their struct Aux (AuxValues packs them); aux without
// modifiers is a mistake, not something to ignore.
llvm::Error validate_modifier_args(const Modifiers *modifiers, const void *aux, size_t aux_bytes);
// Learned sinks' pointers against the modifiers: sinks (and, for the
// backward, dsinks) given exactly when modifiers->sinks asks for them.
llvm::Error validate_sink_args(const Modifiers *modifiers, const float *sinks,
                               const float *dsinks, bool backward);

// The spec `problem` gets on the current device: `config` when complete, else
// the process database's tuning for the problem class, else `config`
// completed by the heuristic (choose_forward_config), validated against the
// device's shared-memory limit.
llvm::Expected<KernelSpec> resolve_forward_spec(const Problem &problem, const KernelConfig &config);

// The loaded kernel for `spec` in the current context, from the process cache,
// else from the process database's cubin store, else compiled now (and
// stored).
llvm::Expected<const LoadedKernel &> get_forward_kernel(const KernelSpec &spec);

// The loaded kernels of a forward spec: its main kernel, and the split-KV
// combine kernel where the spec splits the keys (else null).
struct ForwardKernels {
  const LoadedKernel *main = nullptr;
  const LoadedKernel *combine = nullptr;
  // CTAs of the main kernel resident at once on the device: a persistent
  // grid's size, and the slots split counts are chosen for (decode tiles
  // small enough for two CTAs an SM get twice the SMs).
  int resident_ctas = 0;
  // A KV cache's append of new keys and values (specs with seqused_k).
  const LoadedKernel *append = nullptr;
  // The block map of a caller's mask_mod (has_block_map): classification
  // and list, run before the main kernel.
  const LoadedKernel *block_kinds = nullptr;
  const LoadedKernel *block_list = nullptr;
  const LoadedKernel *block_runs = nullptr;  // partial tiles' row runs (forward only)
  const LoadedKernel *block_mask_grid = nullptr;  // a caller's block mask's scatter
  // The order of a packed batch's sequences for persistent CTAs (sm90
  // varlen specs; fwd_sequence_order.cuh), run before the main kernel.
  const LoadedKernel *sequence_order = nullptr;
  // The program's KernelSpec::id(), once: the key of its kept block maps
  // (runtime/block_map_cache.h), which a call would otherwise format and
  // hash again. Empty: its maps are built every call.
  std::string id{};
};
llvm::Expected<ForwardKernels> get_forward_kernels(const KernelSpec &spec);

// The most sequences fwd_sequence_order.cuh orders (its CTA's threads); a
// larger batch keeps its own order.
constexpr int64_t kOrderedSequencesMax = 1024;

// Enqueues `kernel` (ForwardKernels::sequence_order) on `stream`: it writes
// the order of params.batch sequences (<= kOrderedSequencesMax) to
// params.sequence_order and zeroes params.tile_counter where it is set.
llvm::Error enqueue_sequence_order(const LoadedKernel &kernel, const FwdParams &params,
                                   CUstream stream);

// Enqueues `spec`'s kernels on `stream` with `num_splits` (forward_num_splits):
// first the append of args.cache's new keys and values where there are any;
// with more than one, the split-KV workspace is allocated stream-ordered
// from flashjit's own pool (runtime/workspace_pool.h) and freed after the
// combine kernel: the caller provides none. `params` comes from make_forward_params.
llvm::Error enqueue_forward(const ForwardKernels &kernels, const KernelSpec &spec,
                            const Problem &problem, const ForwardArgs &args, FwdParams params,
                            int num_splits, CUstream stream);

// Validates everything, then launches. Never launches on bad input.
llvm::Error launch_forward(const Problem &problem, const ForwardArgs &args, CUstream stream,
                           const KernelConfig &config);

}  // namespace flashjit
