// The sm90 forward's GEMMs (fwd_sm90.cuh): a consumer warpgroup's S = Q K^T
// (both operands from shared memory) and O += P V (P from registers), each
// one wgmma commit group, and P's A fragments from S's accumulators. With
// e4m3 both are k32 steps of 32 bytes, and P V reads V^T
// (fwd_sm90_v_transpose.cuh) K-major.
#pragma once

#include "fwd_sm90_config.cuh"
#include "common/sm90.cuh"
#include "common/sm90_wgmma.cuh"
#include "common/types.cuh"

namespace flashjit {
namespace fwd_sm90 {

// Issues S = Q K^T of the K tile in `stage` (one commit group): Q from
// `q_desc`, the K ring from `k_desc0`; kQKStepsPerWarpgroup k-steps from
// `step0` (0, or with split columns the second half's first).
__device__ __forceinline__ void issue_s(float (&acc_s)[kSRegisters], u64 q_desc, u64 k_desc0,
                                        int stage, int step0) {
  const u64 k_desc = k_desc0 + ((stage * kKTileBytes) >> 4);
  wgmma_fence_operands(acc_s);
  wgmma_fence();
#pragma unroll
  for (int i = 0; i < kQKStepsPerWarpgroup; ++i) {
    // k-step ks: column block ks/4, byte (ks%4)*32 within the 128-byte row.
    const int ks = step0 + i;
    const int q_off = (ks / 4) * kQColBlockBytes + (ks % 4) * 32;
    const int k_off = (ks / 4) * kKVColBlockBytes + (ks % 4) * 32;
    Wgmma<Element, kBlockN>::ss(acc_s, q_desc + (q_off >> 4), k_desc + (k_off >> 4), i > 0);
  }
  wgmma_commit();
  wgmma_fence_operands(acc_s);
}

// Issues O += P V of the V tile in `stage` (one commit group), P from
// registers, the V ring (e4m3: the V^T ring) from `v_desc0`. (A template
// so that only the element type's branch is instantiated.)
template <class E = Element>
__device__ __forceinline__ void issue_pv(float (&acc_o)[kORegisters], u32 (&p_frag)[kPVSteps][4],
                                         u64 v_desc0, int stage) {
  const u64 v_desc =
      v_desc0 +
      ((stage * (kFp8 ? kLayout.vt_tile_bytes() : kVFromK ? kKTileBytes : kVTileBytes)) >> 4);
  wgmma_fence_operands(acc_o);
#pragma unroll
  for (int kk = 0; kk < kPVSteps; ++kk) wgmma_fence_operands(p_frag[kk]);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kPVSteps; ++kk) {
    if constexpr (IsFp8<E>::value) {
      // k-step kk: keys 32kk.. of V^T's rows, 128-key block kk/4, byte
      // (kk%4)*32 within the 128-byte row.
      const int off = (kk / 4) * kLayout.vt_col_block_bytes() + (kk % 4) * 32;
      Wgmma<E, kOColumns>::rs(acc_o, p_frag[kk], v_desc + (off >> 4), 1);
    } else {
      // k-step kk: V rows 16kk.. = two 8-row (1024-byte) groups further on.
      Wgmma<E, kOColumns>::rs_bt(acc_o, p_frag[kk],
                                     v_desc + ((kk * 16 * kRowBytes) >> 4), 1);
    }
  }
  wgmma_commit();
  wgmma_fence_operands(acc_o);
#pragma unroll
  for (int kk = 0; kk < kPVSteps; ++kk) wgmma_fence_operands(p_frag[kk]);
}

// n8 tiles 2kk and 2kk+1 of S are exactly the A fragment of k-step kk.
// e4m3: n8 tiles 4kk..4kk+3 are k32 step kk's, each register four of the
// thread's accumulators (row `group`: tiles 4kk and 4kk+1, then 4kk+2 and
// 4kk+3; row + 8 likewise), in the key order V^T was written in.
template <class E = Element>
__device__ __forceinline__ void to_p(const float (&acc_s)[kSRegisters],
                                     u32 (&p_frag)[kPVSteps][4]) {
#pragma unroll
  for (int kk = 0; kk < kPVSteps; ++kk) {
    if constexpr (IsFp8<E>::value) {
      const float *a = &acc_s[16 * kk];
      p_frag[kk][0] = pack_e4m3x4(a[0], a[1], a[4], a[5]);
      p_frag[kk][1] = pack_e4m3x4(a[2], a[3], a[6], a[7]);
      p_frag[kk][2] = pack_e4m3x4(a[8], a[9], a[12], a[13]);
      p_frag[kk][3] = pack_e4m3x4(a[10], a[11], a[14], a[15]);
    } else {
      using EOps = ElementOps<E>;
      p_frag[kk][0] = EOps::pack(acc_s[8 * kk + 0], acc_s[8 * kk + 1]);
      p_frag[kk][1] = EOps::pack(acc_s[8 * kk + 2], acc_s[8 * kk + 3]);
      p_frag[kk][2] = EOps::pack(acc_s[8 * kk + 4], acc_s[8 * kk + 5]);
      p_frag[kk][3] = EOps::pack(acc_s[8 * kk + 6], acc_s[8 * kk + 7]);
    }
  }
}

}  // namespace fwd_sm90
}  // namespace flashjit
