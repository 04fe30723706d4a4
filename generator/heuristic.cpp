#include "generator/heuristic.h"

#include "generator/fwd_sm80_traits.h"
#include "generator/fwd_sm90_traits.h"

namespace flashjit {

int max_smem_per_block(const TargetArch &arch) {
  switch (arch.sm()) {
    case 80: case 87: return 163 * 1024;
    case 86: case 89: return 99 * 1024;
    case 90: return 227 * 1024;
    default: return arch.sm() > 90 ? 227 * 1024 : 99 * 1024;
  }
}

namespace {

// First choices follow FlashAttention-2's hand-tuned sm80 tiles (its
// flash_fwd_launch_template.h), which keep O and one S tile of a warp within
// ~192 fp32 registers: 32 rows per warp up to d=160, 16 rows above. Later
// entries are fallbacks for smaller shared memory (sm86/sm89: 99 KB).
void preferred(int d, int dv, TileChoice out[4]) {
  int dmax = d > dv ? d : dv;
  if (dmax <= 64) {
    out[0] = {128, 128, 4, 2};
    out[1] = {128, 64, 4, 2};
  } else if (dmax <= 128) {
    out[0] = {128, 64, 4, 2};
    out[1] = {128, 32, 4, 2};
  } else if (dmax <= 160) {
    out[0] = {128, 32, 4, 2};
    out[1] = {64, 64, 4, 2};
  } else {
    out[0] = {128, 64, 8, 2};
    out[1] = {128, 32, 8, 2};
  }
  out[2] = {64, 32, 4, 2};
  out[3] = {64, 16, 4, 2};
}

}  // namespace

KernelConfig default_forward_config(const Problem &problem, const TargetArch &arch,
                                    int max_smem_bytes, const KernelConfig &partial) {
  if (max_smem_bytes <= 0) max_smem_bytes = max_smem_per_block(arch);
  // sm90 where it serves the problem: asked for, or chosen automatically on
  // sm_90a when the caller fixed no tile (tile sizes mean sm80's otherwise).
  // Measured on the H200 (docs/PERF.md, 2026-11-29): 1.4-2.1x the sm80
  // family at d = 64/128/256. A problem it cannot serve falls back to sm80
  // here, and sm90_fallback_reason says why.
  const bool no_tiles = !partial.block_m && !partial.block_n && !partial.warps && !partial.stages;
  const bool want_sm90 = partial.path == KernelPath::sm90 ||
                         (partial.path == KernelPath::automatic && no_tiles);
  if (want_sm90 && sm90_fallback_reason(problem, arch).empty()) {
    // The seqlen's choice first, then the 128-row tile every head dim has
    // (a caller's partial config, e.g. block_n 128 at d=64, may rule out
    // three consumer warpgroups).
    const KernelConfig first = FwdSm90Traits::default_config(problem.head_dim_qk, problem.seqlen_q);
    const KernelConfig second = FwdSm90Traits::default_config(problem.head_dim_qk, 0);
    const TileChoice tiles[] = {{first.block_m, first.block_n, first.warps, first.stages},
                                {second.block_m, second.block_n, second.warps, second.stages}};
    TileOutcome sm90 = choose_tiles(partial, KernelPath::sm90, tiles, [&](const KernelConfig &c) {
      return FwdSm90Traits::make(problem.head_dim_qk, problem.head_dim_v, c.block_m, c.block_n,
                                 c.warps, c.stages, max_smem_bytes)
          .takeError();
    });
    if (sm90.fits) return sm90.config;
    // Too big for this device's shared memory: the sm80 family below.
  }
  TileChoice list[4];
  preferred(problem.head_dim_qk, problem.head_dim_v, list);
  // Nothing fits: the first choice, and validation says why.
  return choose_tiles(partial, KernelPath::sm80, list, [&](const KernelConfig &c) {
           return FwdSm80Traits::make(problem.head_dim_qk, problem.head_dim_v, c.block_m,
                                      c.block_n, c.warps, c.stages, max_smem_bytes)
               .takeError();
         }).config;
}

TileOutcome choose_tiles(const KernelConfig &partial, KernelPath path,
                         llvm::ArrayRef<TileChoice> tiles,
                         llvm::function_ref<llvm::Error(const KernelConfig &)> fits) {
  TileOutcome fallback;
  for (const TileChoice &t : tiles) {
    KernelConfig config = partial;
    config.path = path;
    if (!config.block_m) config.block_m = t.block_m;
    if (!config.block_n) config.block_n = t.block_n;
    if (!config.warps) config.warps = t.warps;
    if (!config.stages) config.stages = t.stages;
    if (!fallback.config.is_complete()) fallback.config = config;
    llvm::Error error = fits(config);
    if (!error) return {config, true};
    llvm::consumeError(std::move(error));
  }
  return fallback;
}

}  // namespace flashjit
