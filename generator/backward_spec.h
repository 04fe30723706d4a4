// The backward pass's spec, default config and launch geometry. Backward is
// its own problem class: its own kernels, tiles and tunings.
#pragma once

#include "flashjit/problem.h"
#include "generator/kernel_spec.h"
#include "generator/launch_geometry.h"
#include "generator/target_arch.h"
#include "llvm/Support/Error.h"

namespace flashjit {

// `config.stages` is the Q/dO buffering: 2 (overlapped) or 1.
llvm::Expected<KernelSpec> make_backward_spec(const Problem &problem, const KernelConfig &config,
                                              const TargetArch &arch, int max_smem_bytes = 0);

// FlashAttention-2's sm80 backward tiles, the first that fits
// `max_smem_bytes`: d <= 64: 128x128; d <= 128: 64x128; else 64x64; 8 warps,
// 2 stages; then 1 stage where shared memory is short.
// `modified`: the caller's modifiers (score_mod, mask_mod, sinks; see
// BwdSm90Traits::default_config).
KernelConfig default_backward_config(const Problem &problem, const TargetArch &arch,
                                     int max_smem_bytes = 0, const KernelConfig &partial = {},
                                     bool modified = false);

// The main kernel: sm80, one CTA per (key tile, KV head, batch); sm90, as
// many CTAs as BwdSm90Traits::grid_ctas says for `sm_count` SMs (0: unknown).
LaunchGeometry backward_launch_geometry(const KernelSpec &spec, const Problem &problem,
                                        int sm_count = 0);
// Its block and dynamic shared memory: what every launch of it shares,
// whatever the problem (the grid is left at one CTA).
LaunchGeometry backward_block_geometry(const KernelSpec &spec);
// The deterministic dQ kernel: one CTA per (query tile, head, batch).
LaunchGeometry backward_dq_geometry(const KernelSpec &spec, const Problem &problem);
// Its block and dynamic shared memory (the grid left at one CTA).
LaunchGeometry backward_dq_block_geometry(const KernelSpec &spec);
// Preprocess and dQ conversion: one thread per query row.
LaunchGeometry backward_rowwise_geometry(const Problem &problem);
// Their block (no shared memory; the grid left at one CTA).
LaunchGeometry backward_rowwise_block_geometry();

}  // namespace flashjit
