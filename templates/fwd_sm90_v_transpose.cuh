// The e4m3 forward's V^T (fwd_sm90.cuh): fp8 wgmma reads B K-major only, so
// O += P V needs V with the keys contiguous, while the caller's V (and
// TMA's tile of it) has the head dim contiguous. The producer warpgroup's
// three warps that issue no TMA write each V tile, as TMA landed it in the
// staging ring, into the V^T ring: the caller's V layout is the bf16 one.
//
// Layouts (bytes, 128-byte swizzle: 16-byte chunk c of row r at c ^ r % 8):
//   staging  [dim block of 128][key row < kBlockN][128], as K's;
//   V^T      [key block of 128][dim row < kHeadDimVTile][128], the B operand
//            of P V as K is of Q K^T (fwd_sm90_gemms.cuh).
// Keys are permuted within each 32: V^T's position 16h + 4q + i holds key
// 16h + 8(i / 2) + 2q + i % 2, which is where S's accumulators put them
// (column pair 2q of n8 tiles 2h and 2h + 1): P's k32 A fragment is then
// four of the thread's own accumulators per register (to_p), no shuffle.
//
// Work. A warp's step is one 16-dim chunk of one 128-key block: lane l
// writes the word of positions 4l..4l+3 of the block, so a store
// instruction covers all 32 banks of one V^T row (conflict-free); it reads
// those four keys' 16 bytes (LDS.128, one chunk of four rows), half the
// lanes in the other order of each key pair so that a quarter warp's eight
// rows differ mod 8 (conflict-free), and transposes the 4 x 16 bytes with
// byte permutes.
#pragma once

#include "fwd_sm90_config.cuh"
#include "common/ptx.cuh"
#include "common/types.cuh"

namespace flashjit {
namespace fwd_sm90 {

// The warps that transpose: the producer warpgroup's 1, 2 and 3.
constexpr int kTransposeWarps = 3;
constexpr int kTransposeSteps = (kHeadDimVTile / 16) * (kBlockN / 128);

// Writes the V tile at `staging` as V^T at `vt`; `warp` is 0..2 of the
// transposing warps.
__device__ __forceinline__ void transpose_v_tile(u32 staging, u32 vt, int warp, int lane) {
  const int q = lane % 4;
  const int half = (lane / 4) % 2;
  // Keys of the lane's word within its 128-key block, in V^T's order.
  const int key0 = 32 * (lane / 8) + 16 * half + 2 * q;
  // Odd lane groups read each key pair high first: a quarter warp's rows
  // then differ mod 8. The selectors put the bytes back in order.
  // __byte_perm's selector nibble i picks result byte i: 0-3 from the
  // first word, 4-7 from the second. In order [a.b0, b.b0, a.b1, b.b1],
  // swapped [b.b0, a.b0, b.b1, a.b1]; likewise bytes 2 and 3.
  const u32 lo_sel = half ? 0x1504u : 0x5140u;
  const u32 hi_sel = half ? 0x3726u : 0x7362u;
  const int first = half;  // which of the pair is read into x[0] (and x[2])
  for (int step = warp; step < kTransposeSteps; step += kTransposeWarps) {
    const int chunk = step % (kHeadDimVTile / 16);  // 16 dims
    const int key_block = step / (kHeadDimVTile / 16);
    const int dim_block = chunk / 8;  // 128-dim staging column block
    const int c = chunk % 8;          // 16-byte chunk within its row
    const u32 src = staging + dim_block * kKVColBlockBytes;
    u32 x[4][4];  // [key][word of 4 dims]
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      // x[0], x[1]: keys key0, key0 + 1 (swapped on odd groups); x[2], x[3]:
      // key0 + 8, key0 + 9 likewise.
      const int key = 128 * key_block + key0 + (k / 2) * 8 + ((k % 2) ^ first);
      ld_shared_u32x4(src + key * kRowBytes + ((c ^ (key % 8)) * 16), x[k]);
    }
    const u32 dst = vt + key_block * kLayout.vt_col_block_bytes();
    // Position 4 * lane of the block: 16-byte chunk lane / 4, word lane % 4.
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      // Dims 4m..4m+3 of the chunk: a 4 x 4 byte transpose.
      const u32 t0 = __byte_perm(x[0][m], x[1][m], lo_sel);
      const u32 t1 = __byte_perm(x[0][m], x[1][m], hi_sel);
      const u32 t2 = __byte_perm(x[2][m], x[3][m], lo_sel);
      const u32 t3 = __byte_perm(x[2][m], x[3][m], hi_sel);
      const u32 y[4] = {__byte_perm(t0, t2, 0x5410u), __byte_perm(t0, t2, 0x7632u),
                        __byte_perm(t1, t3, 0x5410u), __byte_perm(t1, t3, 0x7632u)};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int dim = 16 * chunk + 4 * m + j;
        st_shared_u32(dst + dim * kRowBytes + (((lane / 4) ^ (dim % 8)) * 16) + (lane % 4) * 4,
                      y[j]);
      }
    }
  }
}

}  // namespace fwd_sm90
}  // namespace flashjit
