// The block map of a caller's mask_mod (templates/common/block_map.cuh;
// built by fwd_block_map.cuh for the forward, bwd_block_map.cuh for the
// backward): its extent for one call and the two launches that build it,
// from the same tile arithmetic the sm90 kernels compile
// (common/fwd_sm90_layout.cuh, the backward's block_m and block_n), so the
// map the host sizes is the map the kernel reads.
#pragma once

#include <cstdint>

#include "generator/launch_geometry.h"
#include "llvm/Support/Error.h"

namespace flashjit {

struct BlockMask;
struct KernelSpec;
struct Modifiers;
struct Problem;

struct BlockMapGeometry {
  // A row per row block of the kernel's tiles, listing tiles of the other
  // side: the forward's query blocks list key tiles of block_n keys, the
  // backward's key blocks of block_n list query tiles of block_m rows.
  int64_t row_blocks = 0;
  int64_t tiles = 0;
  int64_t heads = 1;  // of the work tiles, KV heads in the backward (1: shared, mask_mod_qk_only)
  int64_t batches = 1;    // 1: shared (qk-only and every sequence of the problem's lengths)
  // The forward's row runs of partial tiles (kBlockMapRuns), in 32-bit
  // words per slot of a row: one per query position of its work tile; 0
  // where the kernel reads none (the backward: runs with keys as the rows
  // cost registers the d=128 kernel does not have, and causal as a
  // mask_mod fell to 0.92x the built-in, H200, 2026-12-04; a packed GQA
  // tile whose mask_mod reads heads; d = 64's three-warpgroup forward).
  int64_t run_words = 0;
  static constexpr int64_t kRunSlots = 4;  // kBlockMapRunSlots

  int64_t rows() const { return heads * batches * row_blocks; }
  // The rows' counts and entries (int32), then the classification's bytes,
  // then the runs' positions (int32, kRunSlots a row) and words, each at a
  // 256-byte boundary: one workspace.
  uint64_t list_bytes() const { return uint64_t(rows()) * uint64_t(tiles + 1) * 4; }
  uint64_t kinds_offset() const { return (list_bytes() + 255) / 256 * 256; }
  uint64_t run_positions_offset() const {
    return (kinds_offset() + uint64_t(rows()) * tiles + 255) / 256 * 256;
  }
  uint64_t runs_offset() const {
    return run_positions_offset() + (run_words > 0 ? uint64_t(rows()) * kRunSlots * 4 + 255 : 0) /
                                        256 * 256;
  }
  uint64_t runs_bytes() const { return uint64_t(rows()) * kRunSlots * uint64_t(run_words) * 4; }
  uint64_t workspace_bytes() const { return runs_offset() + runs_bytes(); }
  // FwdParams::block_map_*_stride (and BwdParams'), in rows.
  int64_t head_stride() const { return heads > 1 ? row_blocks : 0; }
  int64_t batch_stride() const { return batches > 1 ? heads * row_blocks : 0; }

  // The kinds kernel: (heads x batches, row blocks, tiles) x 128; the
  // forward's takes (.., query blocks, key tiles) and the backward's (..,
  // key blocks, query tiles) alike.
  LaunchGeometry kinds_launch() const;
  // The list kernel: a warp a row, 4 a CTA.
  LaunchGeometry list_launch() const;
  // The runs kernel: (heads x batches, row blocks, kRunSlots) x 128.
  LaunchGeometry runs_launch() const;
  // Where a caller's block mask's grid starts in the workspace (after the
  // kinds, at a 256-byte boundary), and the scatter kernel's launch for its
  // `rows` (batches x heads x query blocks): a warp a row, 4 a CTA.
  uint64_t grid_offset() const { return (workspace_bytes() + 255) / 256 * 256; }
  static LaunchGeometry grid_launch(int64_t rows);
};

// A caller's block mask as the kinds kernels read it (common/block_map.cuh,
// BlockMaskGrid): one byte per (batch, head, query block, key block) of the
// caller's blocks, in the map's workspace after its kinds.
uint64_t block_mask_grid_bytes(const BlockMask &mask);

// Why `mask` cannot serve a call of `problem` with `modifiers` (an error
// naming the field and what it should be), or success: a mask_mod to go
// with it, positive block sizes, batches and heads of 1 or the problem's,
// q_blocks and k_blocks covering the (longest) sequences, the lists'
// pointers, and a grid under 2^31 bytes. The lists' contents are device
// data, bounded by the kernel that reads them.
llvm::Error validate_block_mask(const Problem &problem, const Modifiers *modifiers,
                                const BlockMask *mask);

// Whether `spec`'s kernel, forward or backward, reads a block map (the sm90
// family with a mask_mod).
bool has_block_map(const KernelSpec &spec);

// The map of `spec` for `problem`'s call (its longest sequences for a
// packed batch); zero rows where the spec has none.
BlockMapGeometry forward_block_map_geometry(const KernelSpec &spec, const Problem &problem);

// The map of backward `spec` for `problem`'s call: a row per (batch, KV head,
// key block), shared by the KV head's group of query heads (the kernel's
// CTA walks them all over the same tiles); zero rows where it has none.
BlockMapGeometry backward_block_map_geometry(const KernelSpec &spec, const Problem &problem);

}  // namespace flashjit
