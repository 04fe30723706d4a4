#include "generator/backward_spec.h"

#include "generator/bwd_sm80_traits.h"
#include "generator/heuristic.h"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit {

llvm::Expected<KernelSpec> make_backward_spec(const Problem &problem, const KernelConfig &config,
                                              const TargetArch &arch, int max_smem_bytes) {
  if (auto e = validate_problem(problem)) return e;
  auto fail = [](const llvm::Twine &message) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
  };
  if (arch.sm() < 80)
    return fail(llvm::formatv("architecture {0} is not supported: flashjit needs sm_80 or newer",
                              arch.name()));
  if (config.path == KernelPath::sm90)
    return fail(llvm::formatv("backward kernel path {0} is not available: use sm80",
                              to_string(config.path)));
  if (!config.is_complete() || config.path == KernelPath::automatic)
    return fail("backward config is incomplete: " + describe(config) +
                " (fill it with default_backward_config)");
  if (max_smem_bytes <= 0) max_smem_bytes = max_smem_per_block(arch);
  auto traits = BwdSm80Traits::make(problem.head_dim_qk, problem.head_dim_v, config.block_m,
                                    config.block_n, config.warps, config.stages, max_smem_bytes,
                                    config.deterministic);
  if (!traits) return traits.takeError();
  KernelSpec spec;
  spec.pass = Pass::backward;
  spec.dtype = problem.dtype;
  spec.head_dim_qk = problem.head_dim_qk;
  spec.head_dim_v = problem.head_dim_v;
  spec.mask = normalized_mask(problem);
  spec.softcap = problem.softcap != 0.f;
  spec.config = config;
  spec.arch = arch;
  return spec;
}

KernelConfig default_backward_config(const Problem &problem, const TargetArch &arch,
                                     int max_smem_bytes, const KernelConfig &partial) {
  if (max_smem_bytes <= 0) max_smem_bytes = max_smem_per_block(arch);
  const int d = std::max(problem.head_dim_qk, problem.head_dim_v);
  struct Tile {
    int m, n, w, s;
  };
  // FlashAttention-2's flash_bwd_launch_template.h choices for sm80, then
  // single-buffered Q/dO and smaller tiles for 163 KB and 99 KB parts.
  const Tile first =
      d <= 64 ? Tile{128, 128, 8, 2} : d <= 128 ? Tile{64, 128, 8, 2} : Tile{64, 64, 8, 2};
  const Tile tiles[] = {first, {64, 64, 8, 2}, {64, 64, 8, 1}, {64, 64, 4, 1}};
  KernelConfig fallback;
  for (const Tile &t : tiles) {
    KernelConfig c = partial;
    c.path = KernelPath::sm80;
    if (!c.block_m) c.block_m = t.m;
    if (!c.block_n) c.block_n = t.n;
    if (!c.warps) c.warps = t.w;
    if (!c.stages) c.stages = t.s;
    if (!fallback.is_complete()) fallback = c;
    auto traits = BwdSm80Traits::make(problem.head_dim_qk, problem.head_dim_v, c.block_m,
                                      c.block_n, c.warps, c.stages, max_smem_bytes,
                                      c.deterministic);
    if (traits) return c;
    llvm::consumeError(traits.takeError());
  }
  return fallback;
}

LaunchGeometry backward_launch_geometry(const KernelSpec &spec, const Problem &problem) {
  BwdSm80Traits t{spec.head_dim_qk, spec.head_dim_v, spec.config.block_m, spec.config.block_n,
                  spec.config.warps, spec.config.stages};
  LaunchGeometry g;
  g.grid.x = static_cast<unsigned>((problem.seqlen_k + t.block_n - 1) / t.block_n);
  g.grid.y = static_cast<unsigned>(problem.heads_kv);
  g.grid.z = static_cast<unsigned>(problem.batch);
  g.block.x = static_cast<unsigned>(t.threads());
  g.dynamic_smem_bytes = t.smem_bytes();
  return g;
}

LaunchGeometry backward_dq_geometry(const KernelSpec &spec, const Problem &problem) {
  BwdSm80Traits t{spec.head_dim_qk, spec.head_dim_v, spec.config.block_m, spec.config.block_n,
                  spec.config.warps, spec.config.stages, true};
  LaunchGeometry g;
  g.grid.x = static_cast<unsigned>((problem.seqlen_q + t.block_m - 1) / t.block_m);
  g.grid.y = static_cast<unsigned>(problem.heads_q);
  g.grid.z = static_cast<unsigned>(problem.batch);
  g.block.x = static_cast<unsigned>(t.dq_threads());
  g.dynamic_smem_bytes = t.dq_smem_bytes();
  return g;
}

LaunchGeometry backward_rowwise_geometry(const Problem &problem) {
  LaunchGeometry g;
  g.grid.x = static_cast<unsigned>((problem.seqlen_q + 127) / 128);
  g.grid.y = static_cast<unsigned>(problem.heads_q);
  g.grid.z = static_cast<unsigned>(problem.batch);
  g.block.x = 128;
  return g;
}

}  // namespace flashjit
