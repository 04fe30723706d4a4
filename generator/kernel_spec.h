// A validated description of one kernel to generate: everything that changes
// the compiled code, and nothing that does not (sequence lengths, batch,
// heads, window bounds and scales are run-time parameters, so one compiled
// kernel serves a whole problem class).
#pragma once

#include <string>

#include "flashjit/modifiers.h"
#include "flashjit/problem.h"
#include "generator/launch_geometry.h"
#include "generator/target_arch.h"
#include "llvm/Support/Error.h"

namespace flashjit {

// Which pass a kernel computes; each is its own problem class.
enum class Pass : uint8_t { forward, backward };
const char *to_string(Pass pass);  // "fwd" | "bwd"

struct KernelSpec {
  Pass pass = Pass::forward;
  DType dtype = DType::bf16;      // Q's, K's and V's elements
  DType out_dtype = DType::bf16;  // O's: dtype, or bf16/fp16 under e4m3
  DType kv_dtype = DType::bf16;   // K's and V's: dtype, or e4m3 (an fp8 KV cache)
  int head_dim_qk = 128;
  int head_dim_v = 128;
  MaskKind mask = MaskKind::none;  // normalised: window(-1,0) is causal
  bool chunked = false;            // Problem::attention_chunk > 0 (its length: a parameter)
  bool softcap = false;
  KernelConfig config;  // complete
  TargetArch arch;
  // Forward only, derived from the config and the problem: the query heads
  // packed into one tile's rows (the GQA ratio under pack_gqa on; 1: none),
  // and whether the kernel can split the key range (config.splits > 1; the
  // count itself is a launch parameter) and carries the combine kernel.
  int pack_gqa = 1;
  bool split_kv = false;
  // Forward only, the problem's KV cache: per-sequence key counts read on
  // the device, and the rows of a K/V page (0: contiguous K/V); a packed
  // batch (varlen) may read one too (the serving call).
  bool seqused_k = false;
  int page_size = 0;
  // A packed batch of sequences of different lengths (Problem::varlen).
  bool varlen = false;
  // Forward, sm90 only: V is the first head_dim_v columns of K's rows (the
  // caller's V a view of K, as MLA's latent cache is for both): each K/V
  // tile is read once, P V reading V from the K stage.
  bool v_in_k = false;
  // The caller's score and mask modifiers, compiled in (either pass).
  Modifiers modifiers;
  // What the pass's program compiles of them (modifiers_of_pass).
  Modifiers compiled_modifiers() const;

  // Readable and unique: every parameter appears in it, e.g.
  // fwd_sm80_bf16_hdqk128_hdv128_causal_nocap_bm128_bn64_w4_s2_sm_90a
  // (the pass first: bwd_... for the backward kernels; _kve4m3 and _obf16
  // where K/V's or O's dtype is not Q's; _gqa4, _split,
  // _seqused and _page64 before the arch where the forward packs GQA heads,
  // splits the keys, reads per-sequence key counts or pages; _varlen for a
  // packed batch, _chunk under chunked attention, _vink where V is read
  // from K's tiles; _mod and 16 hex digits
  // of the hash of compiled_modifiers() where it compiles a caller's
  // modifiers)
  std::string id() const;
  bool operator==(const KernelSpec &) const = default;
};

// What a pass's program compiles of `modifiers`, so what keys its kernels
// and its tuning class: the forward never calls score_mod_grad and leaves
// it out (a training call, with the derivative, and an inference call
// share one forward kernel and one class).
Modifiers modifiers_of_pass(const Modifiers &modifiers, Pass pass);

// The problem's mask with equivalent forms folded: a window with no bounds is
// `none`, window(-1, 0) is `causal`.
MaskKind normalized_mask(const Problem &problem);

// Whether the forward program of `spec` carries the KV cache's append of
// this step's keys (flashjit_kv_append): any cache with per-sequence counts,
// a dense batch's or a packed one's (its packed new keys, cu_seqlens_k_new).
inline bool appends_keys(const KernelSpec &spec) {
  return spec.pass == Pass::forward && spec.seqused_k;
}

// Checks the problem itself (shapes, head dims, heads ratio, window, scales).
llvm::Error validate_problem(const Problem &problem);

// The spec of `pass` for `problem` with `config` on `arch`, unchecked (the
// make_*_spec functions validate first).
KernelSpec kernel_spec_for(Pass pass, const Problem &problem, const KernelConfig &config,
                           const TargetArch &arch);

// Validates `config` (complete) for `problem` on `arch` and builds the spec.
// `max_smem_bytes` is the device's opt-in shared memory per block (0: the
// architecture's known limit). `modified`: the kernel will compile a
// caller's modifiers in (which the caller then sets on the spec), so the
// widest sm90 tiles, which would spill, are refused
// (FwdSm90Traits::lean).
llvm::Expected<KernelSpec> make_forward_spec(const Problem &problem, const KernelConfig &config,
                                             const TargetArch &arch, int max_smem_bytes = 0,
                                             bool modified = false);

// One CTA of `threads` threads per `block_rows` of `rows` (rounded up), per
// head and per batch: grid (row tiles, heads, batch).
LaunchGeometry row_tiled_geometry(int64_t rows, int block_rows, int64_t heads, int64_t batch,
                                  int threads, int dynamic_smem_bytes);

// The block and dynamic shared memory of `spec`'s forward kernel: what
// every launch of it shares, whatever the problem (the grid is left at one
// CTA). The kernel is loaded with this shared memory.
LaunchGeometry forward_block_geometry(const KernelSpec &spec);

// Grid (Q tiles, heads, batch), block and shared memory of a forward launch.
// Where FwdSm90Traits::persistent_grid, the sm90 kernel runs one CTA per SM
// (`sm_count`; 0 when unknown gives one CTA per work tile), each looping over
// work tiles (query blocks x `num_splits` x heads x batch); otherwise one CTA
// per work tile.
LaunchGeometry forward_launch_geometry(const KernelSpec &spec, const Problem &problem,
                                       int sm_count = 0, int num_splits = 1);
// Whether the work tiles of `spec`'s forward differ in cost: a mask, or a
// caller's mask_mod (whose block map skips tiles as a mask does). Where
// they do, persistent sm90 CTAs take their tiles from a counter (packed
// batches, and mask_mods on any batch).
bool forward_tile_costs_vary(const KernelSpec &spec);
// Whether that launch runs persistent CTAs (fewer than its work tiles), as
// forward_launch_geometry decides: only then does a masked packed batch
// take its tiles from a counter (common/fwd_scheduler.cuh).
bool forward_grid_is_persistent(const KernelSpec &spec, const Problem &problem, int sm_count,
                                int num_splits = 1);

// The split-KV combine kernel's launch: one warp per output row.
// `total_q`: the tokens of a packed varlen batch (read only for varlen).
LaunchGeometry forward_combine_geometry(const Problem &problem, int64_t total_q = 0);

// The KV-cache append kernel's launch: one CTA per new row and sequence (a
// packed batch: per packed new row, seqlen_new of them).
LaunchGeometry kv_append_geometry(const Problem &problem, int64_t seqlen_new);

// The key tiles of `block_n` keys the longest work tile of `problem` visits
// (a split count above it leaves splits with nothing to do).
int64_t forward_key_tiles(const Problem &problem, int block_n);

// The split count a launch of `spec` uses for `problem`: `requested` (the
// caller's or the tuning's; 0 lets forward_splits_heuristic pick) clamped to
// [1, key tiles]; 1 where the kernel cannot split.
int forward_num_splits(const KernelSpec &spec, const Problem &problem, int requested,
                       int sm_count);

// Rows of the forward's LSE, and of each split's slice of the workspace:
// batch * heads_q * seqlen_q, or heads_q * total_q of a packed varlen batch
// (`total_q`: its tokens; read only for varlen).
int64_t forward_lse_rows(const Problem &problem, int64_t total_q);

// Bytes of the split-KV workspace a launch with `num_splits` needs: the fp32
// partial O and log-sum-exp of every split and row (0 for one split).
uint64_t forward_split_workspace_bytes(const Problem &problem, int num_splits,
                                       int64_t total_q = 0);

}  // namespace flashjit
