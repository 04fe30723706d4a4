// A caller's block mask as the block-map kernels take it
// (common/block_map.cuh), shared byte-for-byte by the host
// (runtime/block_map_launch.h) and the device: only builtin types, so it
// compiles in both worlds without headers.
#pragma once

namespace flashjit {

// A caller's block mask (flashjit::BlockMask, FlexAttention's BlockMask),
// as a dense grid of kinds at the caller's block sizes: [batches][heads]
// [q_blocks][k_blocks] bytes, 0 hidden, 1 partial (mask_mod decides each
// element), 2 shown whole. The kinds kernels classify the kernel's own tiles
// from it instead of calling mask_mod: the caller's blocks need not match
// the kernel's tiles (a tuned block_n of 176 against Flex's 128). kinds
// null: no block mask, mask_mod decides.
struct BlockMaskGrid {
  const unsigned char *kinds;
  int block_q, block_k;  // the caller's block sizes, in queries and keys
  int batches, heads;    // 1: one for every batch (head)
  int q_blocks, k_blocks;
};

// The caller's lists, scattered into the grid (zeroed before) by
// scatter_block_mask: per row (batch, head, query block) a count and
// k_blocks indices of partial blocks, and likewise of full ones (full_*
// null: none).
struct BlockMaskLists {
  const int *num, *indices, *full_num, *full_indices;
  unsigned char *kinds;
  int rows, k_blocks;
};

}  // namespace flashjit
