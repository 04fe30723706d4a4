// Host twin of templates/bwd_sm90.cuh's derived constants: which head dims
// and tiles the TMA + wgmma backward serves, and its launch shape. Its
// shared memory is BwdSm90Layout's (templates/common/bwd_sm90_layout.cuh),
// the arithmetic the kernel compiles.
#pragma once

#include <string>
#include <vector>

#include "llvm/Support/Error.h"
#include "templates/common/bwd_sm90_layout.cuh"

namespace flashjit {

struct Problem;
struct KernelConfig;
struct TargetArch;

struct BwdSm90Traits {
  int head_dim = 0;  // of Q and K, the problem's (tiled as sm90_backward_tile_head_dim)
  int block_m = 0;   // query rows per tile of the inner loop
  int block_n = 0;   // keys per CTA: block_n_allowed, default_block_n
  int warps = 0;
  int stages = 0;    // Q/dO buffers
  int head_dim_v = 0;  // of V and dO, the problem's (0: head_dim)

  static constexpr int kWarps = BwdSm90Layout::kWarps;  // a producer and two consumer warpgroups
  // What the producer and the dQ writer, on 24 registers, may keep of their
  // loop's state in local memory (L1, off the consumers' path; cuobjdump:
  // 11-38 STL/LDL there with two Q/dO stages at d = 128-192, against 0-4 in
  // the consumers). The tuner's spill limit and the compile tests' allow it
  // on top of their own.
  static constexpr int kProducerSpillBytes = 136;
  // What the consumers of 192/128 with 128 keys a CTA (S^T and dP^T in two
  // passes, bwd_sm90_layout.cuh's kSParts) keep in local memory on top:
  // descriptors and an item's state, 84-212 bytes of stores by ptxas
  // (deterministic at the top), none of them wgmma operands (no
  // serialisation); timed all the same, 1.15-1.61x the head-dim split
  // (H100, docs/PERF.md, 2026-12-05).
  static constexpr int kTwoPassSpillBytes = 216;

  int threads() const { return 32 * warps; }
  // The wider of the two tiled head dims: it sets the key tile, the split
  // and the query tiles.
  static int widest_tile(int head_dim_qk, int head_dim_v) {
    const int dv = head_dim_v > 0 ? head_dim_v : head_dim_qk;
    const int qk = sm90_backward_tile_head_dim(head_dim_qk, dv);
    const int v = sm90_backward_tile_head_dim(dv, head_dim_qk);
    return qk > v ? qk : v;
  }
  // The two consumer warpgroups own 64 keys each (128 per CTA) or, where a
  // head dim is tiled as 192 or 256, split the head dims of 64 shared keys
  // (dK and dV of 64 keys x 256 would take 256 registers per thread, x 192
  // with S^T and dP^T 256); at 192/128 either (sm90_backward_wide_own_keys).
  static bool block_n_allowed(int head_dim_qk, int head_dim_v, int block_n) {
    const int dv = head_dim_v > 0 ? head_dim_v : head_dim_qk;
    if (widest_tile(head_dim_qk, dv) < 192) return block_n == 128;
    return block_n == 64 || (block_n == 128 && sm90_backward_wide_own_keys(head_dim_qk, dv));
  }
  // The heuristic's key tile. At 192/128, 128 keys a CTA halve the L2
  // traffic per FLOP that bounds the split there (Q's and dO's loads, dQ's
  // reduce-adds; ncu, 8k causal: L2 throughput 95.8%), and with the first
  // pass's dV and dK products under the second pass's element-wise work
  // (the kernel's kEarlyPartProducts) they win in every mode. H100, bf16,
  // 16k tokens, TFLOP/s, 64 -> 128 keys: 8k full 367.9 -> 472.6, causal
  // 8k 353.2 -> 422.1, 2k 278.0 -> 332.3, deterministic 8k causal 229.8 ->
  // 371.0 (docs/PERF.md, 2026-12-05). A
  // caller's modifiers keep the split: on 128 keys mask_mod, score_mod and
  // softcap together keep 304-344 bytes in local memory (the split none),
  // past the tuner's limit.
  static int default_block_n(int head_dim_qk, int head_dim_v, bool modified) {
    const int dv = head_dim_v > 0 ? head_dim_v : head_dim_qk;
    if (widest_tile(head_dim_qk, dv) < 192) return 128;
    return sm90_backward_wide_own_keys(head_dim_qk, dv) && !modified ? 128 : 64;
  }
  int v_dim() const { return head_dim_v > 0 ? head_dim_v : head_dim; }
  int tiled_head_dim() const { return layout().tile_head_dim(); }
  int tiled_head_dim_v() const { return layout().tile_head_dim_v(); }
  bool splits_head_dim() const { return layout().splits_head_dim(); }
  // The layout arithmetic, compiled from the header the kernel uses.
  BwdSm90Layout layout() const { return {head_dim, v_dim(), block_m, block_n, stages}; }
  // K, V; `stages` of Q and dO; two dS^T buffers (with P^T under the head-dim
  // split); two LSE/D buffers per consumer warpgroup, for its S^T columns;
  // each consumer warpgroup's dQ part when staged; the mbarriers; slack to
  // align the base.
  int smem_bytes() const { return layout().smem_bytes(); }
  // Whether the consumers hand dQ's parts to the TMA unit through shared
  // buffers (reduce-add) rather than adding them with per-thread atomics:
  // wherever the buffers fit (the kernel's kDQStaged).
  bool dq_staged() const { return layout().dq_staged(); }

  // Why the sm90 backward cannot serve this problem at all (empty: it can).
  static std::string unsupported_reason(int head_dim_qk, int head_dim_v);
  // The query tiles each head dim's registers allow: S^T and dP^T (block_m/2
  // each) next to dK and dV (head_dim/2 each; a quarter at 192 and 256) within 240
  // per thread, and dQ in whole swizzle rows: 64 or 128 where both head dims
  // are tiled as 32 or 64 (dQ over each warpgroup's own keys, or split by rows),
  // else 64 (split by columns).
  static bool block_m_allowed(int head_dim_qk, int head_dim_v, int block_m) {
    return block_m == 64 || (block_m == 128 && widest_tile(head_dim_qk, head_dim_v) <= 64);
  }
  static int default_block_m(int head_dim_qk, int head_dim_v);
  static llvm::Expected<BwdSm90Traits> make(int head_dim_qk, int head_dim_v, int block_m,
                                            int block_n, int warps, int stages,
                                            int max_smem_bytes, bool deterministic = false);
  // `modified`: the caller's modifiers (score_mod, mask_mod, sinks);
  // `block_n`: the caller's key tile (0: default_block_n's), whose stages
  // the config then takes (at 192/128 two stages of 128 keys leave no room
  // for the staged dQ).
  static KernelConfig default_config(int head_dim_qk, int head_dim_v, bool modified = false,
                                     int block_n = 0);
  // The kernel's dispatch order: (KV head, batch) pairs per section
  // (BwdParams::dispatch_section) and, deterministic, which key block of a
  // section first (BwdParams::shortest_first). A CTA under a causal mask
  // costs the query tiles its keys see, most for the first key block;
  // dispatched pair by
  // pair, the last pair's heaviest CTAs start near the end and run on alone
  // (a simulation of 132 SMs, busiest SM over the average: GQA 28/4 heads,
  // 6000 causal 1.34, 64/8 1.18, MHA 8k 1.06). Key blocks outer over all
  // pairs balances them (1.11, 1.01, 1.00), but then every CTA streams its
  // Q and dO from HBM and the dQ reductions leave L2; so sections of as
  // many pairs as one query head's Q, dO and dQ accumulator of each fit in
  // L2 (the CTAs running at once walk a group's query heads in step), a
  // power of two (FlashAttention's backward LPT scheduler sizes its
  // sections so), or a divisor of the pairs down to half that, so that the
  // last section is not a short one. 1 without a mask: every CTA costs the
  // same, and the pair-by-pair order keeps the fewest heads' Q and dO live.
  // A caller's mask_mod counts as a mask (its block map makes the costs
  // uneven: causal as a mask_mod ran 0.88x the built-in causal's backward
  // pair by pair).
  // The deterministic mode: a query tile's dQ takes its key blocks' adds
  // one after another. Under a built-in mask (causal, window) without GQA,
  // where one head's Q, dO and dQ accumulator fit in 32 MB and there are
  // at least 12 work items an SM (132 SMs), shortest first: a section's key blocks last first, each walking its tiles first
  // first, a tile's adds last first, so key block j+1 reaches each shared
  // tile a step or more before key block j (as many queries as keys; no
  // later in any case), where longest first every key block reaches a
  // tile at the same step of its walk, and those started together queue
  // on it; in sections of a power of two of pairs within 24 MB, since each
  // pair's key blocks then spread over its tiles and keep all of them live
  // in L2. H100, d=256 causal, deterministic, longest -> shortest first,
  // TFLOP/s: 1k 197.4 -> 215.6, 2k 257.1 -> 285.9, 4k 313.6 -> 341.5, 8k
  // 366.1 -> 376.6 (16k 392.7 -> 397.8, 32 MB; 32k 408.4 -> 367.4 with 64
  // MB, left longest first); d=192 2k 274.7 -> 295.7, 8k 357.4 -> 374.4;
  // d=128 2k 377.2 -> 389.7, 8k 508.5 -> 505.3, d=64 8k 415.6 -> 465.7.
  // With GQA the
  // longest items start last (d=256 16/4 heads 2k 196.1 -> 144.2), at
  // 192/128 it lost (412.4 -> 396.3), and without a mask it gained nothing
  // (d=256 4k 391.4 / 392.1): longest first there (docs/PERF.md,
  // 2026-12-05). Its longest items start last, so it leaves a
  // tail of about one of them: with fewer items it loses in a model of
  // the schedule (tools/bwd_det_schedule_model.py orders; longest /
  // shortest first against the default mode, the work per SM in longest
  // items: 7.8 (every row of the 16k-token grid) 0.83-0.96 / 0.89-0.92,
  // 3.9 0.88-0.96 / 0.86-0.87, 1.9 0.79-0.90 / 0.75-0.76, and GQA 16/4
  // 0.96-0.98 / 0.76, as measured), so longest first below 12 items an SM
  // (6 longest items; the grid has 15.5).
  // Longest first, each pair's key blocks running at once form a chain
  // whose links wait for the key block before to reach the tile;
  // more pairs a section make shorter chains, but keep more heads' Q, dO
  // and dQ live in L2 at once. At least 8 pairs (or all there are) where
  // each warpgroup takes its own keys, with or without a mask: about 16
  // key blocks of a pair on the 132 SMs (H200, against the L2-sized
  // sections, TFLOP/s: d=256 8k causal 269 -> 316, d=128 8k full 413 ->
  // 421, causal 436 -> 439; 32 pairs: 318, 406, 404). With the 64-key
  // blocks of the head-dim split (192 and 256 wide), where each tile adds
  // 64 KB at d=256, chosen by measurement: under a mask at least 16 pairs
  // while a pair has at most 32 key blocks, at least 8 past that; without
  // a mask the L2-sized sections, 2 to 8 pairs. H100, deterministic,
  // d=256, sections of 8 / 16 pairs (TFLOP/s): causal 1k 148 / 197.5, 2k
  // 242.4 / 256.9, 4k 316.2 / 278.6, 8k 371.9 / 253.9; d=192 8k causal
  // 361.2 / 256.7; without a mask 4k (4 pairs) 391.4 against 341.1 with
  // 8, 8k (2) 407.4 against 280.9 (docs/PERF.md, 2026-12-05;
  // on the H200 on 2026-12-04 16 were ahead at 4k and 8k causal by 1-4%).
  struct DispatchOrder {
    int section;
    bool shortest_first;
  };
  static DispatchOrder dispatch_order(const Problem &problem, int block_n, bool mask_mod = false,
                                      bool deterministic = false);
  // The kernel's work items, one per (key block of `block_n` keys, KV head,
  // batch entry) (BwdParams::work_items; the longest sequence's key blocks
  // when packed).
  static int64_t work_items(const Problem &problem, int block_n);
  // Its grid: one resident CTA per SM taking items until they run out (a
  // CTA per SM is what its shared memory and registers allow); every item a
  // CTA of its own where the kernel is not `resident`
  // (sm90_backward_resident) or `sm_count` is unknown (0). The resident
  // CTAs hide an item's start and end, which short items pay for (H200,
  // bf16, 16k tokens, TFLOP/s: d=128 512 full 256 -> 266, 2k causal 335 ->
  // 341); long ones neither gain nor lose (GQA 64/8 and 28/4 d=128 causal
  // at 3000 and 6000 tokens, 376-752 query tiles an item: within 0.5%).
  static int64_t grid_ctas(const Problem &problem, int block_n, int sm_count, bool resident);
  // Every config the kernel claims at these head dims within `max_smem_bytes`.
  static std::vector<KernelConfig> search_space(int head_dim_qk, int head_dim_v,
                                                int max_smem_bytes);
};

// Why the sm90 backward cannot serve `problem` on `arch` (empty: it can).
std::string sm90_backward_fallback_reason(const Problem &problem, const TargetArch &arch);
// Why the heuristic and the tuner do not take it on their own: the above,
// or, in the deterministic mode, default tiles that do not stage dQ (empty:
// they take it).
std::string sm90_backward_automatic_reason(const Problem &problem, const TargetArch &arch,
                                           bool deterministic);

}  // namespace flashjit
