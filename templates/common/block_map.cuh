// The block map of a caller's mask_mod, as the sm90 forward reads it
// (fwd_block_map.cuh builds it; FwdParams::block_map says the layout): per
// query block of the kernel's work tiles, the key tiles that any query of
// the block sees, in order, each flagged where mask_mod shows every key of
// it. The kernel walks only those (a hidden tile costs neither its loads nor
// its GEMMs) and calls mask_mod only on the unflagged ones (FlexAttention's
// partial and full blocks).
#pragma once

#include "common/types.cuh"

namespace flashjit {

// Set on an entry whose tile mask_mod shows whole.
constexpr int kBlockMapFull = 1 << 30;

// The offset in p.block_map of the row of (batch, head, m_block): [0] the
// count, then the entries. An int: the host keeps the map under 2^31
// entries (generator/block_map.h).
template <class Params>
__device__ __forceinline__ int block_map_row(const Params &p, int batch, int head, int m_block) {
  const i64 row = batch * p.block_map_batch_stride + head * p.block_map_head_stride + m_block;
  return static_cast<int>(row * p.block_map_row_stride);
}

}  // namespace flashjit
