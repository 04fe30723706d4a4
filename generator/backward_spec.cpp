#include "generator/backward_spec.h"

#include "generator/bwd_sm80_traits.h"
#include "generator/bwd_sm90_traits.h"
#include "generator/heuristic.h"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit {

llvm::Expected<KernelSpec> make_backward_spec(const Problem &problem, const KernelConfig &config,
                                              const TargetArch &arch, int max_smem_bytes) {
  if (auto e = validate_problem(problem)) return e;
  auto fail = [](const llvm::Twine &message) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
  };
  if (problem.dtype == DType::e4m3 || problem.kv_dtype == KvDType::e4m3)
    return fail("the fp8 backward is not supported (FlashAttention-3 has none either): run the "
                "backward in bf16 or fp16");
  // Per-sequence key counts are a packed batch's (seqused_k with
  // cu_seqlens_k); a cache (pages, or counts over dense K/V) has no backward.
  if (problem.page_size > 0 || (problem.seqused_k && !problem.varlen))
    return fail("the backward takes no KV cache (seqused_k, page_size): a cache is an "
                "inference input; pass K and V as dense tensors of equal lengths, or a packed "
                "batch (varlen) with its key counts");
  if (arch.sm() < 80)
    return fail(llvm::formatv("architecture {0} is not supported: flashjit needs sm_80 or newer",
                              arch.name()));
  if (!config.is_complete() || config.path == KernelPath::automatic)
    return fail("backward config is incomplete: " + describe(config) +
                " (fill it with default_backward_config)");
  if (max_smem_bytes <= 0) max_smem_bytes = max_smem_per_block(arch);
  if (config.path == KernelPath::sm90) {
    if (std::string why = sm90_backward_fallback_reason(problem, arch); !why.empty())
      return fail("backward kernel path sm90 is not available: " + why + "; use sm80");
    auto traits = BwdSm90Traits::make(problem.head_dim_qk, problem.head_dim_v, config.block_m,
                                      config.block_n, config.warps, config.stages,
                                      max_smem_bytes, config.deterministic);
    if (!traits) return traits.takeError();
    return kernel_spec_for(Pass::backward, problem, config, arch);
  }
  auto traits = BwdSm80Traits::make(problem.head_dim_qk, problem.head_dim_v, config.block_m,
                                    config.block_n, config.warps, config.stages, max_smem_bytes,
                                    config.deterministic);
  if (!traits) return traits.takeError();
  return kernel_spec_for(Pass::backward, problem, config, arch);
}

KernelConfig default_backward_config(const Problem &problem, const TargetArch &arch,
                                     int max_smem_bytes, const KernelConfig &partial,
                                     bool modified) {
  if (max_smem_bytes <= 0) max_smem_bytes = max_smem_per_block(arch);
  // sm90 where it serves the problem: asked for, or chosen automatically on
  // sm_90a when the caller fixed no tile (tile sizes mean sm80's otherwise).
  // Measured on the H200 (docs/PERF.md, 2026-11-29): d=128 seqlen 8k 386
  // TFLOP/s against the sm80 family's 158 (1.27x FlashAttention-2).
  const bool no_tiles = !partial.block_m && !partial.block_n && !partial.warps && !partial.stages;
  const bool want_sm90 = partial.path == KernelPath::sm90 ||
                         (partial.path == KernelPath::automatic && no_tiles);
  const bool sm90_serves =
      partial.path == KernelPath::sm90
          ? sm90_backward_fallback_reason(problem, arch).empty()
          : sm90_backward_automatic_reason(problem, arch, partial.deterministic).empty();
  if (want_sm90 && sm90_serves) {
    // A key tile the caller names (192/128 has two) brings its own stages.
    const bool named_block_n =
        BwdSm90Traits::block_n_allowed(problem.head_dim_qk, problem.head_dim_v, partial.block_n);
    const KernelConfig first =
        BwdSm90Traits::default_config(problem.head_dim_qk, problem.head_dim_v, modified,
                                      named_block_n ? partial.block_n : 0);
    const TileChoice tile{first.block_m, first.block_n, first.warps, first.stages};
    TileOutcome sm90 = choose_tiles(partial, KernelPath::sm90, tile, [&](const KernelConfig &c) {
      return BwdSm90Traits::make(problem.head_dim_qk, problem.head_dim_v, c.block_m, c.block_n,
                                 c.warps, c.stages, max_smem_bytes, c.deterministic)
          .takeError();
    });
    // Asked for by name, it stays even when it does not fit: validation
    // then says why.
    if (sm90.fits || partial.path == KernelPath::sm90) return sm90.config;
  } else if (partial.path == KernelPath::sm90) {
    return keep_named_sm90(partial, BwdSm90Traits::default_config(128, 128));
  }
  const int d = std::max(problem.head_dim_qk, problem.head_dim_v);
  // FlashAttention-2's flash_bwd_launch_template.h choices for sm80, then
  // single-buffered Q/dO and smaller tiles for 163 KB and 99 KB parts.
  // Past 256 (no sm90 backward there): 32 keys over 8 warps, the most keys
  // whose dK and dV fit the registers (128 a thread at 512), with one
  // Q/dO buffer (K, V, Q and dO take 192 KB at 512).
  const TileChoice first = d <= 64    ? TileChoice{128, 128, 8, 2}
                           : d <= 128 ? TileChoice{64, 128, 8, 2}
                           : d <= 256 ? TileChoice{64, 64, 8, 2}
                                      : TileChoice{64, 32, 8, 1};
  const TileChoice tiles[] = {first, {64, 64, 8, 2}, {64, 64, 8, 1}, {64, 64, 4, 1}};
  return choose_tiles(partial, KernelPath::sm80, tiles, [&](const KernelConfig &c) {
           return BwdSm80Traits::make(problem.head_dim_qk, problem.head_dim_v, c.block_m,
                                      c.block_n, c.warps, c.stages, max_smem_bytes,
                                      c.deterministic)
               .takeError();
         }).config;
}

namespace {

BwdSm80Traits backward_sm80_traits(const KernelSpec &spec) {
  return BwdSm80Traits{spec.head_dim_qk,         spec.head_dim_v,   spec.config.block_m,
                       spec.config.block_n,      spec.config.warps, spec.config.stages,
                       spec.config.deterministic};
}

// Preprocess and dQ conversion (bwd_rowwise.cuh): a thread per query row, 128 a
// CTA.
constexpr int kRowwiseThreads = 128;

}  // namespace

LaunchGeometry backward_block_geometry(const KernelSpec &spec) {
  LaunchGeometry g;
  if (spec.config.path == KernelPath::sm90) {
    const BwdSm90Traits t{spec.head_dim_qk,  spec.config.block_m, spec.config.block_n,
                          spec.config.warps, spec.config.stages,  spec.head_dim_v};
    g.block.x = static_cast<unsigned>(t.threads());
    g.dynamic_smem_bytes = t.smem_bytes();
  } else {
    const BwdSm80Traits t = backward_sm80_traits(spec);
    g.block.x = static_cast<unsigned>(t.threads());
    g.dynamic_smem_bytes = t.smem_bytes();
  }
  return g;
}

LaunchGeometry backward_launch_geometry(const KernelSpec &spec, const Problem &problem,
                                        int sm_count) {
  LaunchGeometry g = backward_block_geometry(spec);
  if (spec.config.path == KernelPath::sm90) {
    // One dimension: the kernel orders its work itself (dispatch_order)
    // and takes items until they run out (BwdParams::work_items).
    const bool resident = sm90_backward_resident(!spec.modifiers.score_mod.empty(),
                                                 !spec.modifiers.mask_mod.empty());
    g.grid.x = static_cast<unsigned>(
        BwdSm90Traits::grid_ctas(problem, spec.config.block_n, sm_count, resident));
    return g;
  }
  return row_tiled_geometry(problem.seqlen_k, spec.config.block_n, problem.heads_kv, problem.batch,
                            static_cast<int>(g.block.x), g.dynamic_smem_bytes);
}

LaunchGeometry backward_dq_block_geometry(const KernelSpec &spec) {
  const BwdSm80Traits t = backward_sm80_traits(spec);
  LaunchGeometry g;
  g.block.x = static_cast<unsigned>(t.dq_threads());
  g.dynamic_smem_bytes = t.dq_smem_bytes();
  return g;
}

LaunchGeometry backward_dq_geometry(const KernelSpec &spec, const Problem &problem) {
  const LaunchGeometry g = backward_dq_block_geometry(spec);
  return row_tiled_geometry(problem.seqlen_q, spec.config.block_m, problem.heads_q, problem.batch,
                            static_cast<int>(g.block.x), g.dynamic_smem_bytes);
}

LaunchGeometry backward_rowwise_block_geometry() {
  LaunchGeometry g;
  g.block.x = kRowwiseThreads;
  return g;
}

LaunchGeometry backward_rowwise_geometry(const Problem &problem) {
  return row_tiled_geometry(problem.seqlen_q, kRowwiseThreads, problem.heads_q, problem.batch,
                            kRowwiseThreads, 0);
}

}  // namespace flashjit
