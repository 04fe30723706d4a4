// 16-bit queries against an e4m3 KV cache (fwd_sm90.cuh, kQuantizeQ): the
// GEMMs read e4m3 on both sides, so the producer warpgroup's three spare
// warps (the ones that also transpose V) quantize each work tile's Q, as TMA
// landed it, in place into e4m3, one scale per row
// (amax / 448, 1 for a row of zeros), which the consumers multiply S's rows
// by. Decode reads the cache's bytes and little else, so the row's own
// scale costs nothing there and keeps Q's error at e4m3's half ulp.
//
// Layouts (bytes, 128-byte swizzle: 16-byte chunk c of row r at c ^ r % 8),
// both in the Q buffer, warpgroups kQBufferWarpgroupBytes apart:
//   16-bit   [64-column block][row < 64][128], TMA's Q;
//   e4m3     [128-column block][row < 64][128] over the first half of it: a
//            row's e4m3 line c is its own 16-bit line c, which the row's 16
//            lanes have all read before the shuffle their stores wait for,
//            and no other warp touches the row.
// Work. A warp takes two rows at a time, 16 lanes a row, each lane 8
// columns of each 128 (one 16-byte chunk of the staging row): the row's
// amax by a 16-lane shuffle reduction, then 8 bytes stored.
#pragma once

#include "fwd_sm90_config.cuh"
#include "fwd_sm90_v_transpose.cuh"
#include "common/ptx.cuh"
#include "common/types.cuh"

namespace flashjit {
namespace fwd_sm90 {

// Quantizes the Q buffer at `q` in place, the rows' scales into `scales`;
// `warp` is 0..2 of the quantizing warps.
template <class E = QElement>
__device__ __forceinline__ void quantize_q_tile(u32 q, u32 scales, int warp, int lane) {
  using QOps = ElementOps<E>;
  constexpr int kRows = kConsumerWarpgroups * 64;
  constexpr int kChunks = kHeadDim / 128;  // a lane's 8-column pieces of the row
  const int sub = lane % 16;
  for (int pair = warp; pair < kRows / 2; pair += kTransposeWarps) {
    const int row = 2 * pair + lane / 16;
    const int wg = row / 64, r = row % 64;
    float x[kChunks][8];
    float amax = 0.f;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      // Columns 128c + 8 sub .. + 7: 16-bit chunk 16c + sub of the row.
      const int chunk = 16 * c + sub;
      u32 w[4];
      ld_shared_u32x4(q + wg * kQBufferWarpgroupBytes +
                            (chunk / 8) * kQColBlockBytes + r * kRowBytes +
                            (((chunk % 8) ^ (r % 8)) * 16),
                        w);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        x[c][2 * i] = QOps::to_float(static_cast<u16>(w[i] & 0xffffu));
        x[c][2 * i + 1] = QOps::to_float(static_cast<u16>(w[i] >> 16));
        amax = fmaxf(amax, fmaxf(fabsf(x[c][2 * i]), fabsf(x[c][2 * i + 1])));
      }
    }
#pragma unroll
    for (int offset = 8; offset > 0; offset /= 2)
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
    // (A floor on the scale: 448 / amax of a bf16 row below ~1e-36 would be
    // infinite, and 0 * inf NaN.)
    const float scale = amax > 0.f ? fmaxf(amax * (1.f / 448.f), 0x1p-100f) : 1.f;
    const float inv = 1.f / scale;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      // Bytes 8 sub .. + 7 of the e4m3 row's column block c.
      const int byte = 8 * sub;
      const u32 lo = pack_e4m3x4(x[c][0] * inv, x[c][1] * inv, x[c][2] * inv, x[c][3] * inv);
      const u32 hi = pack_e4m3x4(x[c][4] * inv, x[c][5] * inv, x[c][6] * inv, x[c][7] * inv);
      st_shared_u32x2(q + wg * kQBufferWarpgroupBytes + c * kQColBlockBytes + r * kRowBytes +
                          (((byte / 16) ^ (r % 8)) * 16) + byte % 16,
                      lo, hi);
    }
    if (sub == 0) st_shared_f32(scales + 4 * row, scale);
  }
}

}  // namespace fwd_sm90
}  // namespace flashjit
