// The sm90 backward's epilogue (bwd_sm90.cuh): a consumer warpgroup's dK
// (scaled) and dV of a work item's keys, from the fragments, 8 bytes a
// store.
#pragma once

#include "bwd_sm90_layout.cuh"
#include "common/bwd_params.cuh"
#include "common/sequence.cuh"
#include "common/types.cuh"

namespace flashjit {
namespace bwd_sm90 {

// A thread holds columns 2 quad_lane, +1 of each n8 tile of its two rows;
// lanes q and q ^ 1 swap one tile of each pair (nt, nt + 1), so that the
// even lane stores 4 columns of tile nt and the odd lane 4 of tile
// nt + 1: a quad writes whole 32-byte sectors, with half the stores. (One
// 4-byte store per tile held the global store queue at short sequences,
// where an item has few tiles: ncu, d=128 512, 10.6% of the warps'
// samples on lg_throttle.)
__device__ __forceinline__ void store_dk_dv(const BwdParams &p, const ConsumerThread &thread,
                                           const Sequence &seq, int batch, int kv_head, int n0,
                                           int seqlen_k, const float (&acc_dk)[kKRegisters],
                                           const float (&acc_dv)[kVRegisters]) {
  // This warpgroup's first key (of the CTA's) and first columns of dK and dV.
  const int key0 = kSplitHeadDim ? 0 : thread.cwg * 64;
  const int k_col0 = kSplitHeadDim ? thread.cwg * kKN : 0;
  const int v_col0 = kSplitHeadDim ? thread.cwg * kVN : 0;
  static_assert(kKN % 16 == 0 && kVN % 16 == 0, "n8 tiles in pairs");
  u16 *dk = static_cast<u16 *>(p.dk) + batch * p.dk_batch_stride + kv_head * p.dk_head_stride;
  u16 *dv = static_cast<u16 *>(p.dv) + batch * p.dv_batch_stride + kv_head * p.dv_head_stride;
  if constexpr (kVarlen) {  // the packed tensors: batch entry 0, the sequence's rows
    dk += seq.k_row0 * p.dk_row_stride - batch * p.dk_batch_stride;
    dv += seq.k_row0 * p.dv_row_stride - batch * p.dv_batch_stride;
  }
  const bool odd = thread.quad_lane & 1;
  // Tiles nt and nt + 1 of one row, packed: the 8 bytes this lane stores,
  // at column 8 (nt + odd) + 2 (quad_lane & ~1) of the tiles' first.
  auto pair = [&](u32 a, u32 b) {
    const u32 other = __shfl_xor_sync(0xffffffffu, odd ? a : b, 1);
    return odd ? U32x2{other, b} : U32x2{a, other};
  };
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int key = n0 + key0 + thread.warp * 16 + thread.group + h * 8;
    // Whole n8 tiles are in or past the problem's columns (a multiple of 8).
#pragma unroll
    for (int nt = 0; nt < kMaxKVN / 8; nt += 2) {
      const int tile_col = (nt + (odd ? 1 : 0)) * 8 + 2 * (thread.quad_lane & ~1);
      if (nt < kKN / 8) {
        const float s = p.softmax_scale;
        const U32x2 v = pair(Ops::pack(acc_dk[4 * nt + 2 * h] * s, acc_dk[4 * nt + 2 * h + 1] * s),
                             Ops::pack(acc_dk[4 * nt + 4 + 2 * h] * s,
                                       acc_dk[4 * nt + 4 + 2 * h + 1] * s));
        if (key < seqlen_k && (kHeadDim == kHeadDimQK || k_col0 + tile_col < kHeadDimQK))
          *reinterpret_cast<U32x2 *>(dk + key * p.dk_row_stride + k_col0 + tile_col) = v;
      }
      if (nt < kVN / 8) {
        const U32x2 v = pair(Ops::pack(acc_dv[4 * nt + 2 * h], acc_dv[4 * nt + 2 * h + 1]),
                             Ops::pack(acc_dv[4 * nt + 4 + 2 * h], acc_dv[4 * nt + 4 + 2 * h + 1]));
        if (key < seqlen_k && (kHeadDimVTile == kHeadDimV || v_col0 + tile_col < kHeadDimV))
          *reinterpret_cast<U32x2 *>(dv + key * p.dv_row_stride + v_col0 + tile_col) = v;
      }
    }
  }
}

}  // namespace bwd_sm90
}  // namespace flashjit
