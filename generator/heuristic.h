// The configuration a problem gets when nothing better is known (no tuning).
#pragma once

#include "flashjit/problem.h"
#include "generator/target_arch.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/Error.h"

namespace flashjit {

// A complete config for `problem` on `arch` that fits `max_smem_bytes`
// (0: the architecture's limit). Fields already set in `partial` are kept;
// splits and pack_gqa come out concrete (>= 1; on or off). `sm_count` is the
// device's (0: unknown, taken as an H100/H200's 132). `modified`: the
// kernel compiles a caller's modifiers in (they hold registers, so the
// widest tiles are left out: FwdSm90Traits::lean).
KernelConfig default_forward_config(const Problem &problem, const TargetArch &arch,
                                    int max_smem_bytes = 0, const KernelConfig &partial = {},
                                    int sm_count = 0, bool modified = false);

// `config` (tiles set) with its pack_gqa and splits filled where they are
// left to the heuristic (automatic, 0), from pack_gqa_pays and
// forward_splits_heuristic.
KernelConfig with_decode_fields(const Problem &problem, KernelConfig config, int sm_count);

// Whether packing the GQA group's query heads into a tile's rows pays:
// FlashAttention-3's rule, when it fills the query tiles by more than 1/0.9
// (few query positions: decode), and the group fits a warpgroup's 64 rows.
bool pack_gqa_pays(const Problem &problem);

// The split count for `problem` under `config` (its tiles and packing) on a
// GPU of `sm_count` SMs (0: 132): none when the work tiles fill ~80% of the
// SMs; otherwise the count, at most one split per key tile,
// that minimises the longest CTA chain, waves x (key tiles per split + a
// split's fixed cost) + the combine's; the smallest such count.
int forward_splits_heuristic(const Problem &problem, const KernelConfig &config, int sm_count);

// Tile sizes a heuristic tries, in order.
struct TileChoice {
  int block_m, block_n, warps, stages;
};

struct TileOutcome {
  KernelConfig config;
  bool fits = false;
};

// `partial` on `path` with each of `tiles` in turn filling the fields it
// leaves unset: the first that `fits` (an error: it does not), else the first
// complete one (fits = false) for validation to say why it does not fit.
TileOutcome choose_tiles(const KernelConfig &partial, KernelPath path,
                         llvm::ArrayRef<TileChoice> tiles,
                         llvm::function_ref<llvm::Error(const KernelConfig &)> fits);

// An explicit sm90 that cannot serve the problem (head dim, target, mode):
// `partial` kept on path sm90, `fill`'s tiles in the fields it leaves unset,
// so that validation names the reason rather than an sm80 kernel running in
// its place.
KernelConfig keep_named_sm90(const KernelConfig &partial, const KernelConfig &fill);

// Opt-in shared memory per block the architecture allows.
int max_smem_per_block(const TargetArch &arch);

}  // namespace flashjit
