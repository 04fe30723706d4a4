// A block mask of a caller's mask_mod, built once and passed to every call
// that uses it (every layer of a step), in FlexAttention's BlockMask layout
// (common/block_mask_grid.cuh reads it back): per (batch, head, block of
// block_q queries) the blocks of block_k keys it sees in part and those it
// sees whole. The kernels' own pre-pass (fwd/bwd_block_map.cuh) computes
// the same classification at their tile sizes on every call; a caller who
// builds the mask once pays it once.
//
// Two kernels, in stream order, over a kinds buffer of one byte per block:
//   flashjit_block_mask_kinds  one CTA of kThreads per (batch and head of
//       the mask, query block, key block): its threads evaluate mask_mod on
//       every (query, key) of the block the sequence holds and classify it
//       (block_kind: 0 hidden, 1 partial, 2 whole), stopping as soon as the
//       block is known partial.
//   flashjit_block_mask_lists  one warp per (batch, head, query block):
//       the partial and the whole blocks' indices in order (ballots), their
//       counts, and the rows' tails zeroed.
// batches and heads are 1 where mask_mod reads only q and k
// (Modifiers::kMaskQkOnly); then one mask serves every batch and head.
//
// The parameter block is plain data, so the host includes this file too.
#pragma once

namespace flashjit {

struct BlockMaskBuildParams {
  int *kv_num_blocks;       // [batches][heads][q_blocks]
  int *kv_indices;          // [batches][heads][q_blocks][k_blocks]
  int *full_kv_num_blocks;  // the same, for the blocks shown whole
  int *full_kv_indices;
  unsigned char *kinds;  // scratch: [batches][heads][q_blocks][k_blocks]
  int batches, heads, q_blocks, k_blocks;
  int block_q, block_k;
  int seqlen_q, seqlen_k;
  // The modifiers' struct Aux, inline (as FwdParams::aux).
  unsigned long long aux[8];
};

constexpr int kBlockMaskBuildThreads = 128;

}  // namespace flashjit

#if defined(__CUDACC__)

#include "common/block_map.cuh"

// Grid (batches x heads, q_blocks, k_blocks).
extern "C" __global__ void __launch_bounds__(flashjit::kBlockMaskBuildThreads)
    flashjit_block_mask_kinds(const flashjit::BlockMaskBuildParams p) {
  using namespace flashjit;
  const int head = static_cast<int>(blockIdx.x) % p.heads;
  const int batch = static_cast<int>(blockIdx.x) / p.heads;
  const int q0 = static_cast<int>(blockIdx.y) * p.block_q;
  const int n0 = static_cast<int>(blockIdx.z) * p.block_k;
  // The block's part of the sequence: a last block's rows and keys past
  // the ends are nobody's (and a block of any size stays in int range).
  const int rows = min(p.block_q, p.seqlen_q - q0), cols = min(p.block_k, p.seqlen_k - n0);
  const int kind = block_kind<NoMask, cfg::Modifiers, kBlockMaskBuildThreads>(
      p, true, p.seqlen_q, p.seqlen_k, 0, batch, head, 1, q0, rows, n0, cols);
  if (threadIdx.x == 0) {
    const i64 row = (static_cast<i64>(batch) * p.heads + head) * p.q_blocks + blockIdx.y;
    p.kinds[row * p.k_blocks + blockIdx.z] = static_cast<unsigned char>(kind);
  }
}

// Grid: one warp per row, kBlockMaskBuildThreads / 32 rows a CTA.
extern "C" __global__ void __launch_bounds__(flashjit::kBlockMaskBuildThreads)
    flashjit_block_mask_lists(const flashjit::BlockMaskBuildParams p) {
  using namespace flashjit;
  constexpr int kWarps = kBlockMaskBuildThreads / 32;
  const i64 row = static_cast<i64>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= static_cast<i64>(p.batches) * p.heads * p.q_blocks) return;
  const unsigned char *kinds = p.kinds + row * p.k_blocks;
  int *partial = p.kv_indices + row * p.k_blocks;
  int *whole = p.full_kv_indices + row * p.k_blocks;
  const unsigned below = (1u << lane) - 1;
  int partial_count = 0, whole_count = 0;
  for (int t0 = 0; t0 < p.k_blocks; t0 += 32) {
    const int t = t0 + lane;
    const int kind = t < p.k_blocks ? kinds[t] : 0;
    const unsigned partial_lanes = __ballot_sync(0xffffffffu, kind == 1);
    const unsigned whole_lanes = __ballot_sync(0xffffffffu, kind == 2);
    if (kind == 1) partial[partial_count + __popc(partial_lanes & below)] = t;
    if (kind == 2) whole[whole_count + __popc(whole_lanes & below)] = t;
    partial_count += __popc(partial_lanes);
    whole_count += __popc(whole_lanes);
  }
  // The tails: deterministic contents (the readers stop at the counts).
  for (int t = partial_count + lane; t < p.k_blocks; t += 32) partial[t] = 0;
  for (int t = whole_count + lane; t < p.k_blocks; t += 32) whole[t] = 0;
  if (lane == 0) {
    p.kv_num_blocks[row] = partial_count;
    p.full_kv_num_blocks[row] = whole_count;
  }
}

#endif  // __CUDACC__
