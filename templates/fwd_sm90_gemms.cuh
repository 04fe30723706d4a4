// The sm90 forward's GEMMs (fwd_sm90.cuh): a consumer warpgroup's S = Q K^T
// (both operands from shared memory) and O += P V (P from registers), each
// one wgmma commit group, and P's A fragments from S's accumulators.
#pragma once

#include "fwd_sm90_config.cuh"
#include "common/sm90.cuh"
#include "common/sm90_wgmma.cuh"
#include "common/types.cuh"

namespace flashjit {
namespace fwd_sm90 {

// Issues S = Q K^T of the K tile in `stage` (one commit group): Q from
// `q_desc`, the K ring from `k_desc0`.
__device__ __forceinline__ void issue_s(float (&acc_s)[kSRegisters], u64 q_desc, u64 k_desc0,
                                        int stage) {
  const u64 k_desc = k_desc0 + ((stage * kKTileBytes) >> 4);
  wgmma_fence_operands(acc_s);
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < kQKSteps; ++ks) {
    // k-step ks: column block ks/4, byte (ks%4)*32 within the 128-byte row.
    const int q_off = (ks / 4) * kQColBlockBytes + (ks % 4) * 32;
    const int k_off = (ks / 4) * kKVColBlockBytes + (ks % 4) * 32;
    Wgmma<Element, kBlockN>::ss(acc_s, q_desc + (q_off >> 4), k_desc + (k_off >> 4), ks > 0);
  }
  wgmma_commit();
  wgmma_fence_operands(acc_s);
}

// Issues O += P V of the V tile in `stage` (one commit group), P from
// registers, the V ring from `v_desc0`.
__device__ __forceinline__ void issue_pv(float (&acc_o)[kORegisters], u32 (&p_frag)[kPVSteps][4],
                                         u64 v_desc0, int stage) {
  const u64 v_desc = v_desc0 + ((stage * kVTileBytes) >> 4);
  wgmma_fence_operands(acc_o);
#pragma unroll
  for (int kk = 0; kk < kPVSteps; ++kk) wgmma_fence_operands(p_frag[kk]);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kPVSteps; ++kk) {
    // k-step kk: V rows 16kk.. = two 8-row (1024-byte) groups further on.
    Wgmma<Element, kHeadDimVTile>::rs_bt(acc_o, p_frag[kk],
                                         v_desc + ((kk * 16 * kRowBytes) >> 4), 1);
  }
  wgmma_commit();
  wgmma_fence_operands(acc_o);
#pragma unroll
  for (int kk = 0; kk < kPVSteps; ++kk) wgmma_fence_operands(p_frag[kk]);
}

// n8 tiles 2kk and 2kk+1 of S are exactly the A fragment of k-step kk.
__device__ __forceinline__ void to_p(const float (&acc_s)[kSRegisters],
                                     u32 (&p_frag)[kPVSteps][4]) {
#pragma unroll
  for (int kk = 0; kk < kPVSteps; ++kk) {
    p_frag[kk][0] = Ops::pack(acc_s[8 * kk + 0], acc_s[8 * kk + 1]);
    p_frag[kk][1] = Ops::pack(acc_s[8 * kk + 2], acc_s[8 * kk + 3]);
    p_frag[kk][2] = Ops::pack(acc_s[8 * kk + 4], acc_s[8 * kk + 5]);
    p_frag[kk][3] = Ops::pack(acc_s[8 * kk + 6], acc_s[8 * kk + 7]);
  }
}

}  // namespace fwd_sm90
}  // namespace flashjit
