// The block map of a caller's mask_mod (templates/fwd_block_map.cuh): its
// extent for one call and the two launches that build it, from the same
// layout arithmetic the sm90 forward compiles (common/fwd_sm90_layout.cuh),
// so the map the host sizes is the map the kernel reads.
#pragma once

#include <cstdint>

#include "generator/launch_geometry.h"

namespace flashjit {

struct KernelSpec;
struct Problem;

struct BlockMapGeometry {
  int64_t q_blocks = 0;   // query blocks of the kernel's work tiles
  int64_t key_tiles = 0;  // K/V tiles of block_n keys
  int64_t heads = 1;      // of the work tiles (1: shared, Modifiers::mask_mod_qk_only)
  int64_t batches = 1;    // 1: shared (qk-only and every sequence of the problem's lengths)

  int64_t rows() const { return heads * batches * q_blocks; }
  // The rows' counts and entries (int32), then the classification's bytes,
  // at a 256-byte boundary: one workspace.
  uint64_t list_bytes() const { return uint64_t(rows()) * uint64_t(key_tiles + 1) * 4; }
  uint64_t kinds_offset() const { return (list_bytes() + 255) / 256 * 256; }
  uint64_t workspace_bytes() const { return kinds_offset() + uint64_t(rows()) * key_tiles; }
  // FwdParams::block_map_*_stride, in rows.
  int64_t head_stride() const { return heads > 1 ? q_blocks : 0; }
  int64_t batch_stride() const { return batches > 1 ? heads * q_blocks : 0; }

  // flashjit_fwd_block_kinds: (heads x batches, query blocks, key tiles) x 128.
  LaunchGeometry kinds_launch() const;
  // flashjit_fwd_block_list: a warp a row, 4 a CTA.
  LaunchGeometry list_launch() const;
};

// Whether `spec`'s forward reads a block map (the sm90 family with a mask_mod).
bool has_block_map(const KernelSpec &spec);

// The map of `spec` for `problem`'s call (its longest sequences for a
// packed batch); zero rows where the spec has none.
BlockMapGeometry forward_block_map_geometry(const KernelSpec &spec, const Problem &problem);

}  // namespace flashjit
