#include "generator/heuristic.h"

#include "generator/fwd_sm80_traits.h"
#include "generator/fwd_sm90_traits.h"
#include "generator/kernel_spec.h"
#include "templates/common/fwd_sm90_layout.cuh"

#include <algorithm>
#include <cstdint>

namespace flashjit {

int max_smem_per_block(const TargetArch &arch) {
  switch (arch.sm()) {
    case 80: case 87: return 163 * 1024;
    case 86: case 89: return 99 * 1024;
    case 90: return kSm90SmemBudget;
    default: return arch.sm() > 90 ? kSm90SmemBudget : 99 * 1024;
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

namespace {

constexpr int kDefaultSmCount = 132;  // H100 SXM, H200
constexpr int kMaxHeuristicSplits = 128;
// A split's fixed cost in keys (forward_splits_heuristic).
constexpr int64_t kSplitStartKeys = 128;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The family and tiles (defined below): FlashAttention-3's and -2's choices.
KernelConfig default_forward_tiles(const Problem &problem, const TargetArch &arch,
                                   int max_smem_bytes, const KernelConfig &partial, bool modified);

// Work tiles of `config` for `problem`, before splitting: query blocks x
// heads (KV heads when packed) x batch.
int64_t forward_work_tiles(const Problem &problem, const KernelConfig &config) {
  const bool packed = config.pack_gqa == GqaPacking::on;
  const int64_t ratio = FwdSm90Traits::packed_heads(problem.heads_q / problem.heads_kv);
  const int64_t heads = packed ? problem.heads_q / ratio : problem.heads_q;
  int64_t rows_per_tile = config.block_m;
  if (config.path == KernelPath::sm90 && packed)
    rows_per_tile = config.block_m / 64 * (64 / ratio);  // positions per tile
  return ceil_div(problem.seqlen_q, std::max<int64_t>(rows_per_tile, 1)) * heads * problem.batch;
}

}  // namespace

bool pack_gqa_pays(const Problem &problem) {
  // A group wider than 64 query heads packs in parts (packed_heads).
  const int64_t ratio = FwdSm90Traits::packed_heads(problem.heads_q / problem.heads_kv);
  if (ratio < 2) return false;
  // The serving call (a packed batch over a KV cache) mixes decode steps,
  // one query each, with prefill chunks: seqlen_q is the longest chunk, but
  // every decode sequence's tile would otherwise hold one row and read its
  // whole cache once per query head of the group. Packed, a prefill chunk
  // fills its tiles as well as unpacked (rows are positions x heads).
  if (problem.varlen && (problem.seqused_k || problem.page_size > 0)) return true;
  // Filled rows per 64-row warpgroup tile, unpacked against packed.
  auto efficiency = [](int64_t rows) { return double(rows) / (ceil_div(rows, 64) * 64); };
  return efficiency(problem.seqlen_q * ratio) > efficiency(problem.seqlen_q) / 0.9;
}

int forward_splits_heuristic(const Problem &problem, const KernelConfig &config, int sm_count) {
  if (config.block_n <= 0 || config.block_m <= 0) return 1;
  if (sm_count <= 0) sm_count = kDefaultSmCount;
  // The slots work tiles fill: one CTA an SM (every sm90 forward config;
  // for the sm80 family, which may fit more, a conservative count).
  const int64_t slots = sm_count;
  const int64_t work = forward_work_tiles(problem, config);
  // Work tiles that fill ~80% of the SMs already: no split. Splitting them
  // would only trade the last wave's idle SMs for partials in fp32 and a
  // combine, and the persistent scheduler balances that wave anyway.
  if (work * 10 >= slots * 8) return 1;
  const int64_t key_tiles = ceil_div(problem.seqlen_k, config.block_n);
  const int64_t max_splits = std::min<int64_t>(key_tiles, kMaxHeuristicSplits);
  // The time of the longest CTA chain, in key tiles: per wave, the CTA's
  // share of the key tiles plus its start (launch, the first TMA round trip
  // with every CTA's loads queued at once, the epilogue: ~2 us on the H200,
  // which streams ~64 keys/us per CTA), and the combine when split.
  // Measured at 1 x 8k (8 packed work tiles, 128 key tiles of 64): 15
  // splits, the old wave-efficiency rule's, leave one CTA 9 tiles where 16
  // give every CTA 8 (H200, 2026-12-01).
  const int64_t start = ceil_div(kSplitStartKeys, config.block_n);
  auto cost = [&](int64_t splits) {
    const int64_t waves = ceil_div(work * splits, slots);
    return waves * (ceil_div(key_tiles, splits) + start) + (splits > 1 ? start : 0);
  };
  // Past two waves the cost only grows with the count (waves x start grows
  // faster than the share shrinks), so the search stops there: a decode
  // call runs this per call, and 128 candidates' divisions took ~2 us.
  const int64_t last = std::min<int64_t>(max_splits, ceil_div(2 * slots, work) + 1);
  int64_t best = 1, best_cost = cost(1);
  for (int64_t s = 2; s <= last; ++s)
    if (const int64_t c = cost(s); c < best_cost) best = s, best_cost = c;
  return static_cast<int>(best);
}

KernelConfig default_forward_config(const Problem &problem, const TargetArch &arch,
                                    int max_smem_bytes, const KernelConfig &partial,
                                    int sm_count, bool modified) {
  // The tiles, then the decode fields from the tiles.
  return with_decode_fields(problem,
                            default_forward_tiles(problem, arch, max_smem_bytes, partial,
                                                  modified),
                            sm_count);
}

KernelConfig with_decode_fields(const Problem &problem, KernelConfig config, int sm_count) {
  if (config.pack_gqa == GqaPacking::automatic)
    config.pack_gqa = config.path == KernelPath::sm90 && pack_gqa_pays(problem) ? GqaPacking::on
                                                                                : GqaPacking::off;
  if (config.splits == 0) config.splits = forward_splits_heuristic(problem, config, sm_count);
  return config;
}

namespace {

KernelConfig default_forward_tiles(const Problem &problem, const TargetArch &arch,
                                   int max_smem_bytes, const KernelConfig &partial, bool modified) {
  if (max_smem_bytes <= 0) max_smem_bytes = max_smem_per_block(arch);
  // sm90 where it serves the problem: asked for, or chosen automatically on
  // sm_90a when the caller fixed no tile (tile sizes mean sm80's otherwise).
  // Measured on the H200 (docs/PERF.md, 2026-11-29): 1.4-2.1x the sm80
  // family at d = 64/128/256. A problem it cannot serve falls back to sm80
  // here, and sm90_fallback_reason says why; asked for by name, it is kept
  // (below), so that make_forward_spec refuses it with that reason.
  const bool no_tiles = !partial.block_m && !partial.block_n && !partial.warps && !partial.stages;
  const bool want_sm90 = partial.path == KernelPath::sm90 ||
                         (partial.path == KernelPath::automatic && no_tiles);
  if (want_sm90 && sm90_fallback_reason(problem, arch).empty()) {
    // The seqlen's choice first, then the 128-row tile every head dim has
    // (a caller's partial config, e.g. block_n 128 at d=64, may rule out
    // three consumer warpgroups).
    // Packed heads count as rows (decode takes one consumer warpgroup).
    const bool pack = partial.pack_gqa == GqaPacking::on ||
                      (partial.pack_gqa == GqaPacking::automatic && pack_gqa_pays(problem));
    // Unequal head dims take the wider one's tiles (O's registers and K's
    // shared memory both bound them).
    const int head_dim = std::max(problem.head_dim_qk, problem.head_dim_v);
    const bool lean = FwdSm90Traits::lean(problem, modified);
    KernelConfig first = FwdSm90Traits::default_config(
        head_dim, problem.seqlen_q, pack ? problem.heads_q / problem.heads_kv : 1,
        problem.page_size, normalized_mask(problem) != MaskKind::none, lean);
    KernelConfig second = FwdSm90Traits::default_config(head_dim, 0);
    // e4m3 K/V (and Q, or 16-bit Q quantized in the kernel) take its tiles.
    const int bytes = element_bytes(kv_element(problem));
    if (bytes == 1) {
      const bool quantized_q = problem.dtype != DType::e4m3;
      first = FwdSm90Traits::fp8_config(first, head_dim, quantized_q);
      second = FwdSm90Traits::fp8_config(second, head_dim, quantized_q);
    }
    const TileChoice tiles[] = {{first.block_m, first.block_n, first.warps, first.stages},
                                {second.block_m, second.block_n, second.warps, second.stages}};
    TileOutcome sm90 = choose_tiles(partial, KernelPath::sm90, tiles, [&](const KernelConfig &c) {
      return FwdSm90Traits::make(problem.head_dim_qk, problem.head_dim_v, c.block_m, c.block_n,
                                 c.warps, c.stages, max_smem_bytes, lean, bytes,
                                 element_bytes(problem.dtype))
          .takeError();
    });
    // Asked for by name, the sm90 config stays even when it does not fit:
    // validation then says why, rather than an error about an sm80 config
    // the caller never asked for.
    // e4m3 has no sm80 kernel: its config stays too, for the same reason.
    if (sm90.fits || partial.path == KernelPath::sm90 || bytes == 1) return sm90.config;
    // Too big for this device's shared memory: the sm80 family below.
  } else if (partial.path == KernelPath::sm90) {
    return keep_named_sm90(partial, FwdSm90Traits::default_config(128, 0));
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

}  // namespace

KernelConfig keep_named_sm90(const KernelConfig &partial, const KernelConfig &fill) {
  const TileChoice tile{fill.block_m, fill.block_n, fill.warps, fill.stages};
  return choose_tiles(partial, KernelPath::sm90, tile,
                      [](const KernelConfig &) { return llvm::Error::success(); })
      .config;
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
