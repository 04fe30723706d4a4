#include "generator/kernel_spec.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "generator/fwd_sm80_traits.h"
#include "generator/fwd_sm90_traits.h"
#include "generator/heuristic.h"
#include "generator/modifier_source.h"
#include "templates/common/fwd_sm90_layout.cuh"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit {

namespace {

llvm::Error problem_error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

constexpr int kMaxSplits = 256;

// splits and pack_gqa: in range, and asked only of the family that has them.
llvm::Error validate_decode_fields(const Problem &problem, const KernelConfig &config) {
  if (config.splits < 0 || config.splits > kMaxSplits)
    return problem_error(llvm::formatv(
        "splits={0} is out of range: expected 0 (heuristic), 1 (off) or up to {1}", config.splits,
        kMaxSplits));
  if (config.pack_gqa != GqaPacking::automatic && config.pack_gqa != GqaPacking::on &&
      config.pack_gqa != GqaPacking::off)
    return problem_error(llvm::formatv("pack_gqa={0} is not auto, on or off",
                                       static_cast<int>(config.pack_gqa)));
  if (config.pack_gqa == GqaPacking::on) {
    if (config.path == KernelPath::sm80)
      return problem_error("pack_gqa=on: GQA packing is implemented in the sm90 family only; "
                           "use pack_gqa=off (or auto) with the sm80 family");
    const int64_t ratio = problem.heads_q / std::max<int64_t>(problem.heads_kv, 1);
    if (ratio > FwdSm90Traits::kMaxPackedHeads && FwdSm90Traits::packed_heads(ratio) < 2)
      return problem_error(llvm::formatv(
          "pack_gqa=on with heads_q/heads_kv={0}: at most {1} query heads pack into a tile's "
          "64-row warpgroup, a part of the group that divides it (none does); use pack_gqa=off",
          ratio, FwdSm90Traits::kMaxPackedHeads));
  }
  if (config.splits > 1) {
    const int64_t tiles = forward_key_tiles(problem, config.block_n);
    if (config.block_n > 0 && config.splits > tiles)
      return problem_error(llvm::formatv(
          "splits={0} exceeds the {1} key tiles of block_n={2} keys (seqlen_k={3}): each split "
          "needs at least one; use splits <= {1}",
          config.splits, tiles, config.block_n, problem.seqlen_k));
    // The kernel numbers its work tiles (query blocks x splits x heads x
    // batch) in 32 bits; 64-row tiles are the most of them.
    const int64_t heads =
        config.pack_gqa == GqaPacking::on
            ? problem.heads_q /
                  FwdSm90Traits::packed_heads(problem.heads_q / std::max<int64_t>(problem.heads_kv, 1))
            : problem.heads_q;
    const int64_t work = (problem.seqlen_q + 63) / 64 * heads * problem.batch * config.splits;
    if (work > std::numeric_limits<int32_t>::max())
      return problem_error(llvm::formatv(
          "splits={0} makes {1} work tiles (query blocks x splits x heads x batch), more than "
          "the kernel numbers in 32 bits; use fewer splits (they pay only when the work tiles "
          "do not fill the GPU)",
          config.splits, work));
  }
  return llvm::Error::success();
}

}  // namespace

MaskKind normalized_mask(const Problem &p) {
  if (p.mask != MaskKind::window) return p.mask;
  bool left_unbounded = p.window_left < 0;
  bool right_unbounded = p.window_right < 0;
  if (left_unbounded && right_unbounded) return MaskKind::none;
  if (left_unbounded && p.window_right == 0) return MaskKind::causal;
  return MaskKind::window;
}

llvm::Error validate_problem(const Problem &p) {
  // Every index the kernel computes is a 32-bit row or head number; strides
  // and offsets are 64-bit.
  constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();
  auto positive = [&](const char *name, int64_t value) -> llvm::Error {
    if (value < 1 || value > kMaxInt)
      return problem_error(llvm::formatv("{0}={1} is out of range: expected 1 to {2}", name, value,
                                         kMaxInt));
    return llvm::Error::success();
  };
  if (p.dtype != DType::bf16 && p.dtype != DType::fp16 && p.dtype != DType::e4m3)
    return problem_error(
        llvm::formatv("dtype={0} is not bf16, fp16 or e4m3", static_cast<int>(p.dtype)));
  if (p.kv_dtype != KvDType::same && p.kv_dtype != KvDType::e4m3)
    return problem_error(
        llvm::formatv("kv_dtype={0} is not same or e4m3", static_cast<int>(p.kv_dtype)));
  if (p.out_dtype != OutDType::automatic && p.out_dtype != OutDType::bf16 &&
      p.out_dtype != OutDType::fp16)
    return problem_error(
        llvm::formatv("out_dtype={0} is not auto, bf16 or fp16", static_cast<int>(p.out_dtype)));
  if (p.dtype != DType::e4m3 && p.out_dtype != OutDType::automatic &&
      out_element(p) != p.dtype)
    return problem_error(llvm::formatv(
        "out_dtype={0} with dtype={1}: a 16-bit problem's output has its own dtype; leave "
        "out_dtype auto",
        to_string(p.out_dtype), to_string(p.dtype)));
  if (p.dtype == DType::e4m3 || p.kv_dtype == KvDType::e4m3)
    for (auto [name, d] : {std::pair{"head_dim_qk", p.head_dim_qk}, {"head_dim_v", p.head_dim_v}})
      if (d % 16)
        return problem_error(llvm::formatv(
            "{0}={1} is not supported with e4m3: expected a multiple of 16 (TMA moves rows of "
            "whole 16 bytes)",
            name, d));
  if (auto e = positive("batch", p.batch)) return e;
  if (auto e = positive("heads_q", p.heads_q)) return e;
  if (auto e = positive("heads_kv", p.heads_kv)) return e;
  if (auto e = positive("seqlen_q", p.seqlen_q)) return e;
  if (auto e = positive("seqlen_k", p.seqlen_k)) return e;
  if (p.heads_q % p.heads_kv)
    return problem_error(llvm::formatv(
        "heads_q={0} is not a multiple of heads_kv={1} (GQA/MQA need whole groups)", p.heads_q,
        p.heads_kv));
  if (p.batch * p.heads_q > 65535 * 65535LL)
    return problem_error(llvm::formatv("batch*heads_q={0} exceeds the grid", p.batch * p.heads_q));
  if (p.heads_q > 65535 || p.batch > 65535)
    return problem_error(llvm::formatv(
        "heads_q={0}, batch={1}: each must be at most 65535 (grid dimensions)", p.heads_q, p.batch));
  for (auto [name, d] : {std::pair{"head_dim_qk", p.head_dim_qk}, {"head_dim_v", p.head_dim_v}})
    if (d < 8 || d > kSm90ForwardMaxHeadDim || d % 8)
      return problem_error(llvm::formatv(
          "{0}={1} is not supported: expected a multiple of 8 in [8, {2}] (pad other sizes; "
          "the Python binding does this for you)",
          name, d, kSm90ForwardMaxHeadDim));
  // Each side's rows times its largest per-row size (the backward's fp32 dQ
  // accumulator and D: 4*(head_dim_qk+1) bytes) must fit 64-bit byte offsets.
  const int64_t row_bytes = 4 * (int64_t(std::max(p.head_dim_qk, p.head_dim_v)) + 1);
  for (auto [heads_name, heads, seqlen_name, seqlen] :
       {std::tuple{"heads_q", p.heads_q, "seqlen_q", p.seqlen_q},
        std::tuple{"heads_kv", p.heads_kv, "seqlen_k", p.seqlen_k}}) {
    int64_t total = 0;
    if (__builtin_mul_overflow(p.batch, heads, &total) ||
        __builtin_mul_overflow(total, seqlen, &total) ||
        __builtin_mul_overflow(total, row_bytes, &total))
      return problem_error(llvm::formatv(
          "batch*{0}*{1}={2}*{3}*{4} rows is too large: the tensors' byte offsets would "
          "overflow 64 bits",
          heads_name, seqlen_name, p.batch, heads, seqlen));
  }
  // The sm90 forward numbers its work tiles (128 query rows, head, batch) in
  // one 32-bit index.
  if (const int64_t tiles = p.batch * p.heads_q * ((p.seqlen_q + 127) / 128); tiles > kMaxInt)
    return problem_error(llvm::formatv(
        "batch*heads_q*ceil(seqlen_q/128)={0} query tiles exceed {1} (kernels number them in "
        "32 bits)",
        tiles, kMaxInt));
  if (p.page_size != 0 && (p.page_size < 1 || p.page_size > 512))
    return problem_error(llvm::formatv(
        "page_size={0} is not supported: expected 0 (contiguous K/V) or 1 to 512 rows (a "
        "multiple of 16 reads pages by TMA, others are gathered row by row)",
        p.page_size));
  if (p.page_size > 0 && p.seqlen_k % p.page_size != 0)
    return problem_error(llvm::formatv(
        "seqlen_k={0} is not a multiple of page_size={1}: with a paged cache seqlen_k is the "
        "page table's width (pages per sequence) times page_size",
        p.seqlen_k, p.page_size));
  if (p.mask != MaskKind::none && p.mask != MaskKind::causal && p.mask != MaskKind::window)
    return problem_error(llvm::formatv("mask={0} is not none, causal or window",
                                       static_cast<int>(p.mask)));
  if (p.attention_chunk < 0)
    return problem_error(llvm::formatv(
        "attention_chunk={0} is invalid: expected 0 (off) or a chunk length > 0",
        p.attention_chunk));
  if (p.mask == MaskKind::window && (p.window_left < -1 || p.window_right < -1))
    return problem_error(llvm::formatv(
        "window=({0},{1}) is invalid: each bound is -1 (unbounded) or >= 0", p.window_left,
        p.window_right));
  if (!std::isfinite(p.softmax_scale) || p.softmax_scale < 0)
    return problem_error(llvm::formatv(
        "softmax_scale={0} is invalid: expected a finite value > 0 (or 0 for 1/sqrt(d))",
        p.softmax_scale));
  if (!std::isfinite(p.softcap) || p.softcap < 0)
    return problem_error(
        llvm::formatv("softcap={0} is invalid: expected a finite value > 0 (or 0 for off)",
                      p.softcap));
  return llvm::Error::success();
}

const char *to_string(Pass pass) { return pass == Pass::forward ? "fwd" : "bwd"; }

Modifiers modifiers_of_pass(const Modifiers &modifiers, Pass pass) {
  Modifiers m = modifiers;
  if (pass == Pass::forward) m.score_mod_grad.clear();
  return m;
}

Modifiers KernelSpec::compiled_modifiers() const { return modifiers_of_pass(modifiers, pass); }

std::string KernelSpec::id() const {
  std::string decode;
  if (kv_dtype != dtype) decode += std::string("_kv") + to_string(kv_dtype);
  if (out_dtype != dtype) decode += std::string("_o") + to_string(out_dtype);
  if (pack_gqa > 1) decode += llvm::formatv("_gqa{0}", pack_gqa).str();
  if (split_kv) decode += "_split";
  if (seqused_k) decode += "_seqused";
  if (page_size > 0) decode += llvm::formatv("_page{0}", page_size).str();
  if (varlen) decode += "_varlen";
  if (chunked) decode += "_chunk";
  if (v_in_k) decode += "_vink";
  if (const Modifiers compiled = compiled_modifiers(); !compiled.empty())
    decode += "_mod" + modifiers_hash(compiled);
  return llvm::formatv("{11}_{0}_{1}_hdqk{2}_hdv{3}_{4}_{5}_bm{6}_bn{7}_w{8}_s{9}{12}{13}_{10}",
                       to_string(config.path), to_string(dtype), head_dim_qk, head_dim_v,
                       to_string(mask), softcap ? "softcap" : "nocap", config.block_m,
                       config.block_n, config.warps, config.stages, arch.name(), to_string(pass),
                       config.deterministic ? "_det" : "", decode)
      .str();
}

KernelSpec kernel_spec_for(Pass pass, const Problem &problem, const KernelConfig &config,
                           const TargetArch &arch) {
  KernelSpec spec;
  spec.pass = pass;
  spec.dtype = problem.dtype;
  spec.out_dtype = out_element(problem);
  spec.kv_dtype = kv_element(problem);
  spec.head_dim_qk = problem.head_dim_qk;
  spec.head_dim_v = problem.head_dim_v;
  spec.mask = normalized_mask(problem);
  spec.chunked = problem.attention_chunk > 0;
  spec.softcap = problem.softcap != 0.f;
  spec.config = config;
  spec.arch = arch;
  spec.varlen = problem.varlen;
  // Both passes: the backward's only with a packed batch (make_backward_spec).
  spec.seqused_k = problem.seqused_k;
  if (pass == Pass::forward) {
    const int64_t ratio = problem.heads_q / std::max<int64_t>(problem.heads_kv, 1);
    spec.pack_gqa = config.pack_gqa == GqaPacking::on ? FwdSm90Traits::packed_heads(ratio) : 1;
    spec.split_kv = config.splits > 1;
    spec.page_size = problem.page_size;
  }
  return spec;
}

llvm::Expected<KernelSpec> make_forward_spec(const Problem &problem, const KernelConfig &config,
                                             const TargetArch &arch, int max_smem_bytes,
                                             bool modified) {
  if (auto e = validate_problem(problem)) return e;
  if (arch.sm() < 80)
    return problem_error(llvm::formatv(
        "architecture {0} is not supported: flashjit needs sm_80 or newer", arch.name()));
  if (config.path == KernelPath::sm90 && !(arch.sm() == 90 && arch.arch_specific))
    return problem_error(llvm::formatv(
        "kernel path sm90 needs an sm_90a target (wgmma, setmaxnreg, TMA), not {0}: use sm80",
        arch.name()));
  if (!config.is_complete() || config.path == KernelPath::automatic)
    return problem_error("kernel config is incomplete: " + describe(config) +
                         " (fill it with default_forward_config)");
  if (max_smem_bytes <= 0) max_smem_bytes = max_smem_per_block(arch);
  if (llvm::Error e = validate_decode_fields(problem, config)) return e;
  if (kv_element(problem) == DType::e4m3 && config.path != KernelPath::sm90)
    return problem_error(llvm::formatv(
        "{0}=e4m3 needs the sm90 kernel family on an sm_90a target (fp8 wgmma), not kernel "
        "path {1} on {2}: the sm80 family has no fp8 kernel",
        problem.dtype == DType::e4m3 ? "dtype" : "kv_dtype", to_string(config.path),
        arch.name()));
  if (config.path == KernelPath::sm90) {
    if (std::string why = sm90_fallback_reason(problem, arch); !why.empty())
      return problem_error("kernel path sm90 is not available: " + why + "; use sm80");
    auto traits = FwdSm90Traits::make(problem.head_dim_qk, problem.head_dim_v, config.block_m,
                                      config.block_n, config.warps, config.stages, max_smem_bytes,
                                      FwdSm90Traits::lean(problem, modified),
                                      element_bytes(kv_element(problem)),
                                      element_bytes(problem.dtype));
    if (!traits) return traits.takeError();
  } else {
    auto traits = FwdSm80Traits::make(problem.head_dim_qk, problem.head_dim_v, config.block_m,
                                      config.block_n, config.warps, config.stages, max_smem_bytes);
    if (!traits) return traits.takeError();
  }
  return kernel_spec_for(Pass::forward, problem, config, arch);
}

LaunchGeometry row_tiled_geometry(int64_t rows, int block_rows, int64_t heads, int64_t batch,
                                  int threads, int dynamic_smem_bytes) {
  LaunchGeometry g;
  g.grid.x = static_cast<unsigned>((rows + block_rows - 1) / block_rows);
  g.grid.y = static_cast<unsigned>(heads);
  g.grid.z = static_cast<unsigned>(batch);
  g.block.x = static_cast<unsigned>(threads);
  g.dynamic_smem_bytes = dynamic_smem_bytes;
  return g;
}

namespace {

FwdSm90Traits forward_sm90_traits(const KernelSpec &spec) {
  return FwdSm90Traits{spec.head_dim_qk,  spec.config.block_m, spec.config.block_n,
                       spec.config.warps, spec.config.stages,  spec.pack_gqa,
                       spec.page_size,    spec.head_dim_v,     element_bytes(spec.kv_dtype),
                       element_bytes(spec.dtype), spec.v_in_k};
}

FwdSm80Traits forward_sm80_traits(const KernelSpec &spec) {
  return FwdSm80Traits{spec.head_dim_qk,    spec.head_dim_v,   spec.config.block_m,
                       spec.config.block_n, spec.config.warps, spec.config.stages};
}

}  // namespace

LaunchGeometry forward_block_geometry(const KernelSpec &spec) {
  LaunchGeometry g;
  if (spec.config.path == KernelPath::sm90) {
    const FwdSm90Traits t = forward_sm90_traits(spec);
    g.block.x = static_cast<unsigned>(t.threads());
    g.dynamic_smem_bytes = t.smem_bytes();
  } else {
    const FwdSm80Traits t = forward_sm80_traits(spec);
    g.block.x = static_cast<unsigned>(t.threads());
    g.dynamic_smem_bytes = t.smem_bytes();
  }
  return g;
}

LaunchGeometry forward_launch_geometry(const KernelSpec &spec, const Problem &problem,
                                       int sm_count, int num_splits) {
  const LaunchGeometry block = forward_block_geometry(spec);
  if (spec.config.path == KernelPath::sm90) {
    const FwdSm90Layout layout = forward_sm90_traits(spec).layout();
    // Packed: the work tiles' rows are positions x the group's heads, and
    // there is one per KV head.
    const int64_t heads = spec.pack_gqa > 1 ? problem.heads_q / spec.pack_gqa : problem.heads_q;
    LaunchGeometry g =
        row_tiled_geometry(problem.seqlen_q, layout.q_rows_per_tile(), heads, problem.batch,
                           static_cast<int>(block.block.x), block.dynamic_smem_bytes);
    const int64_t query_blocks = g.grid.x;
    // Work tiles in x; the kernel decodes (query block, split, head, batch)
    // itself.
    const int64_t work = query_blocks * std::max(num_splits, 1) * g.grid.y * g.grid.z;
    const bool persistent =
        sm_count > 0 &&
        FwdSm90Traits::persistent_grid(spec.mask != MaskKind::none || spec.chunked, query_blocks,
                                       work, sm_count);
    g.grid.x = static_cast<unsigned>(persistent ? std::min<int64_t>(work, sm_count) : work);
    g.grid.y = g.grid.z = 1;
    return g;
  }
  LaunchGeometry g =
      row_tiled_geometry(problem.seqlen_q, spec.config.block_m, problem.heads_q, problem.batch,
                         static_cast<int>(block.block.x), block.dynamic_smem_bytes);
  // Split-KV: x is (query block, split), splits fastest (fwd_sm80.cuh).
  g.grid.x *= static_cast<unsigned>(std::max(num_splits, 1));
  return g;
}

bool forward_tile_costs_vary(const KernelSpec &spec) {
  // A mask_mod hides whole key tiles as a mask does (its block map), so its
  // work tiles may cost as unevenly: a causal mask_mod on the static
  // rotation of a persistent grid ran 0.82x the built-in causal (H200, 8k,
  // d=128); on one CTA per work tile 0.92x, but a document mask (even
  // tiles) lost 9% there. So its persistent CTAs take tiles from the
  // counter instead.
  return spec.mask != MaskKind::none || spec.chunked || !spec.modifiers.mask_mod.empty();
}

bool forward_grid_is_persistent(const KernelSpec &spec, const Problem &problem, int sm_count,
                                int num_splits) {
  return sm_count > 0 &&
         forward_launch_geometry(spec, problem, sm_count, num_splits).grid.x <
             forward_launch_geometry(spec, problem, 0, num_splits).grid.x;
}

LaunchGeometry forward_combine_geometry(const Problem &problem, int64_t total_q) {
  // fwd_combine.cuh: 8 warps per CTA, one row each.
  constexpr int kRowsPerBlock = 8;
  const int64_t rows = forward_lse_rows(problem, total_q);
  LaunchGeometry g;
  g.grid.x = static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
  g.block.x = 32 * kRowsPerBlock;
  g.dynamic_smem_bytes = 0;
  return g;
}

LaunchGeometry kv_append_geometry(const Problem &problem, int64_t seqlen_new) {
  LaunchGeometry g;  // kv_append.cuh: 128 threads
  g.grid.x = static_cast<unsigned>(std::max<int64_t>(seqlen_new, 1));
  // A packed batch's new rows each find their sequence.
  g.grid.y = static_cast<unsigned>(problem.varlen ? 1 : problem.batch);
  g.block.x = 128;
  g.dynamic_smem_bytes = 0;
  return g;
}

int64_t forward_key_tiles(const Problem &problem, int block_n) {
  if (block_n <= 0) return 0;
  // Masks leave some query blocks fewer: their surplus splits write empty
  // partials, which weigh nothing in the combine.
  return (problem.seqlen_k + block_n - 1) / block_n;
}

int forward_num_splits(const KernelSpec &spec, const Problem &problem, int requested,
                       int sm_count) {
  if (!spec.split_kv) return 1;
  const int64_t tiles = forward_key_tiles(problem, spec.config.block_n);
  int64_t splits =
      requested > 0 ? requested : forward_splits_heuristic(problem, spec.config, sm_count);
  splits = std::min<int64_t>(splits, tiles);
  return static_cast<int>(std::max<int64_t>(splits, 1));
}

int64_t forward_lse_rows(const Problem &problem, int64_t total_q) {
  return problem.varlen ? problem.heads_q * total_q
                        : problem.batch * problem.heads_q * problem.seqlen_q;
}

uint64_t forward_split_workspace_bytes(const Problem &problem, int num_splits, int64_t total_q) {
  if (num_splits <= 1) return 0;
  const uint64_t rows = static_cast<uint64_t>(forward_lse_rows(problem, total_q));
  return uint64_t(num_splits) * rows * (uint64_t(problem.head_dim_v) + 1) * sizeof(float);
}

}  // namespace flashjit
