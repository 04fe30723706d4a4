// The sm90 backward's dQ part (bwd_sm90.cuh): each consumer warpgroup's
// part of a tile's dQ = dS K, issued as one commit group, and its way to
// the fp32 accumulator: staged in shared memory for the dQ writer's TMA
// reduce-add (kDQStaged; bwd_sm90_dq_writer.cuh), else vectorised fp32
// reductions from the fragments.
#pragma once

#include "bwd_sm90_layout.cuh"
#include "common/bwd_params.cuh"
#include "common/ptx.cuh"
#include "common/sequence.cuh"
#include "common/sm90.cuh"
#include "common/sm90_wgmma.cuh"
#include "common/types.cuh"

namespace flashjit {
namespace bwd_sm90 {

// dst[0..1] += {a, b}: one vectorised reduction (sm_90) instead of two.
__device__ __forceinline__ void red_add_v2(float *dst, float a, float b) {
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(dst), "f"(a), "f"(b) : "memory");
}

// dQ's part = dS K (this warpgroup's rows or columns, see kDQN), issued as
// one commit group; reduce_dq adds it to the fp32 accumulator once waited.
// The accumulator is declared per tile: one live across the loop would
// hold its registers through everything else.
using DqAccumulator = float[kDQRegisters];
// dS^T from `ds_tile` (both warpgroups' rows), K as MN-major `k_cols_desc`.
__device__ __forceinline__ void issue_dq(DqAccumulator &acc_dq, u32 ds_tile, int cwg,
                                        u64 k_cols_desc) {
  const u64 ds_desc = smem_descriptor_sw128(ds_tile + (kDQSplitRows ? cwg * kDsColBlockBytes
                                                       : kDQOwnKeys ? cwg * 64 * kDsRowBytes
                                                                    : 0),
                                            kDsColBlockBytes, 1024);
  wgmma_fence_operands(acc_dq);
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < kDQSteps; ++ks) {
    // k-step ks = keys 16ks.. = rows of both dS^T and K.
    const int off = (ks * 16 * kDsRowBytes) >> 4;
    const int k_off = (ks * 16 * kRowBytes) >> 4;
    Wgmma<Element, kDQN>::ss_tt(acc_dq, ds_desc + off, k_cols_desc + k_off, ks > 0);
  }
  wgmma_commit();
  wgmma_fence_operands(acc_dq);
}

// Adds warpgroup `thread.cwg`'s part of the CTA's `tile`-th tile (query
// rows m0.. of `head`) to the accumulator.
__device__ __forceinline__ void reduce_dq(const BwdParams &p, const DqAccumulator &acc_dq,
                                         const ConsumerThread &thread, u32 smem, u32 tile,
                                         const Sequence &seq, int batch, int head, int m0,
                                         int seqlen_q) {
  const int col0 = kDQSplitRows || kDQOwnKeys ? 0 : thread.cwg * kDQN;
  if constexpr (kDQStaged) {
    // The buffer is free once the writer of the tile before has passed
    // its last reduce to the TMA unit and that has read it (a tile ago:
    // no wait in practice).
    named_barrier_sync(kBarrierDQFree + 4 * dq_writer_of(tile - 1) + thread.cwg, kDQBarrierThreads);
    // acc_dq[4nt + 2h + c] is row 16 warp + group + 8h, column 8nt + 2 quad_lane
    // + c: 16-byte chunk (nt % 4) * 2 + quad_lane / 2 of its box's 128-byte
    // row, XORed with the row's group (row % 8). From the thread index
    // recomputed here (opaque), so no address stays live across the loop.
    const int t = opaque(static_cast<int>(threadIdx.x)) % 128;
    const int g = (t % 32) / 4;
    const u32 base =
        smem + kOffsetDQ + thread.cwg * kDQStageBytes + (t / 32 * 16 + g) * 128 + (t % 2) * 8;
    const int swizzle = ((t % 4) / 2) ^ g;
#pragma unroll
    for (int nt = 0; nt < kDQTiles; ++nt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const u32 addr =
            base + (nt / 4) * kDQBoxBytes + h * 8 * 128 + ((((nt % 4) * 2) ^ swizzle) << 4);
        asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr),
                     "f"(acc_dq[4 * nt + 2 * h]), "f"(acc_dq[4 * nt + 2 * h + 1])
                     : "memory");
      }
    fence_proxy_async();  // the generic-proxy stores, before the TMA unit reads them
    named_barrier_arrive(kBarrierDQFull + 4 * dq_writer_of(tile) + thread.cwg, kDQBarrierThreads);
    return;
  }
  float *const accum =
      p.dq_accum + (kVarlen ? seq.workspace_row(p, head, 0)
                            : (static_cast<i64>(batch) * p.heads_q + head) * seqlen_q) *
                       kHeadDimQK;
  const int row0 = m0 + (kDQSplitRows ? thread.cwg * 64 : 0) + thread.warp * 16 + thread.group;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + h * 8;
    if (row < seqlen_q) {
      float *const dst = accum + static_cast<i64>(row) * kHeadDimQK + col0 + thread.quad_lane * 2;
#pragma unroll
      for (int nt = 0; nt < kDQTiles; ++nt)
        if (kHeadDim == kHeadDimQK || col0 + nt * 8 < kHeadDimQK)
          red_add_v2(dst + nt * 8, acc_dq[4 * nt + 2 * h], acc_dq[4 * nt + 2 * h + 1]);
    }
  }
}

}  // namespace bwd_sm90
}  // namespace flashjit
