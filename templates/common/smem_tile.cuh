// Shared-memory tiles of 16-bit elements in rows of kDim elements (a multiple
// of 64), 128-byte swizzled: 16-byte chunk c of row r lives at chunk
// (c ^ (r % 8)) of its 64-element atom, so the 8 rows an ldmatrix or a
// cp.async phase touches land in 8 different bank groups.
#pragma once

#include "common/ptx.cuh"
#include "common/types.cuh"

namespace flashjit {

// Element offset of chunk `chunk` (8 elements) of row `row`.
template <int kDim>
__device__ __forceinline__ int swizzle(int row, int chunk) {
  static_assert(kDim % 64 == 0, "rows are whole 64-element swizzle atoms");
  return row * kDim + (chunk & ~7) * 8 + (((chunk & 7) ^ (row & 7)) << 3);
}

// C[kMT m16 tiles][kNT n8 tiles] += A * B for one warp, both operands in
// swizzled shared memory (byte addresses of the tiles' element 0):
//   A is [m][k] (kATrans false) or [k][m] (true) with rows of kALd elements;
//   B is [n][k] (kBTrans false) or [k][n] (true) with rows of kBLd elements.
// m0/n0/k0 are element offsets of this warp's block; kKSteps k16 steps.
template <typename Element, int kMT, int kNT, int kKSteps, bool kATrans, int kALd, bool kBTrans,
          int kBLd>
__device__ __forceinline__ void warp_gemm(float (&acc)[kMT][kNT][4], u32 a_tile, int m0, u32 b_tile,
                                          int n0, int k0, int lane) {
  static_assert(kNT % 2 == 0, "B fragments are loaded two n8 tiles at a time");
  // Addresses are recomputed at each call: hoisted out of the caller's loop
  // they would hold dozens of registers the accumulators need.
#pragma unroll 1
  for (int ks = 0; ks < kKSteps; ++ks) {
    lane = opaque(lane);
    const int k = k0 + ks * 16;
    u32 a[kMT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      const int m = m0 + mt * 16;
      if constexpr (!kATrans)
        ldmatrix_x4(a[mt], a_tile + 2 * swizzle<kALd>(m + lane % 16, k / 8 + lane / 16));
      else
        ldmatrix_x4_trans(a[mt], a_tile + 2 * swizzle<kALd>(k + (lane / 16) * 8 + lane % 8,
                                                            m / 8 + (lane / 8) % 2));
    }
#pragma unroll
    for (int np = 0; np < kNT / 2; ++np) {
      const int n = n0 + np * 16;
      u32 b[4];
      if constexpr (!kBTrans)
        ldmatrix_x4(b, b_tile + 2 * swizzle<kBLd>(n + (lane / 16) * 8 + lane % 8,
                                                  k / 8 + (lane / 8) % 2));
      else
        ldmatrix_x4_trans(b, b_tile + 2 * swizzle<kBLd>(k + lane % 16, n / 8 + lane / 16));
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        ElementOps<Element>::mma(acc[mt][2 * np], a[mt], b[0], b[1]);
        ElementOps<Element>::mma(acc[mt][2 * np + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

template <int kMT, int kNT>
__device__ __forceinline__ void zero(float (&acc)[kMT][kNT][4]) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.f;
}

// cp.async of rows [0, kRows) x chunks [0, kChunks); rows at or past
// rows_valid are zero-filled.
template <int kThreads, int kRows, int kDim, int kChunks>
__device__ __forceinline__ void load_tile_rows(u32 tile, const u16 *gmem, i64 row_stride,
                                          int rows_valid, int tid) {
  constexpr int kTotal = kRows * kChunks;
#pragma unroll
  for (int i = 0; i < (kTotal + kThreads - 1) / kThreads; ++i) {
    const int idx = tid + i * kThreads;
    if (kTotal % kThreads == 0 || idx < kTotal) {
      const int row = idx / kChunks;
      const int chunk = idx % kChunks;
      const bool valid = row < rows_valid;
      cp_async_16(tile + 2 * swizzle<kDim>(row, chunk),
                  valid ? gmem + row * row_stride + chunk * 8 : gmem, valid);
    }
  }
}

// cp.async of rows [0, kRows) x chunks [0, kChunks), each row from its own
// address (a gather): `row_source(row)` gives the row's first element, or
// null for a zero-filled row (`fallback` then stands in as an address that
// is never read). (load_tile_rows written as this gather cost the sm80
// kernels 70-220 instructions in ptxas's output: the null test and select
// per copy; it stays its own loop.)
template <int kThreads, int kRows, int kDim, int kChunks, class RowSource>
__device__ __forceinline__ void gather_tile_rows(u32 tile, const RowSource &row_source,
                                                 const u16 *fallback, int tid) {
  constexpr int kTotal = kRows * kChunks;
#pragma unroll
  for (int i = 0; i < (kTotal + kThreads - 1) / kThreads; ++i) {
    const int idx = tid + i * kThreads;
    if (kTotal % kThreads == 0 || idx < kTotal) {
      const int row = idx / kChunks;
      const int chunk = idx % kChunks;
      const u16 *src = row_source(row);
      cp_async_16(tile + 2 * swizzle<kDim>(row, chunk), src ? src + chunk * 8 : fallback,
                  src != nullptr);
    }
  }
}

// Zeroes chunks [kFirst, kEnd) of every row: head-dim padding the MMAs read.
template <int kThreads, int kRows, int kDim, int kFirst, int kEnd>
__device__ __forceinline__ void zero_chunks(u32 tile, int tid) {
  if constexpr (kEnd > kFirst) {
    constexpr int kPer = kEnd - kFirst;
    for (int idx = tid; idx < kRows * kPer; idx += kThreads)
      st_shared_zero_16(tile + 2 * swizzle<kDim>(idx / kPer, kFirst + idx % kPer));
  }
}

// Writes accumulator fragments (rows m0.., cols n0..) as 16-bit pairs into a
// swizzled tile, scaled by `scale`.
template <typename Element, int kMT, int kNT, int kLd>
__device__ __forceinline__ void store_fragments(u16 *tile, const float (&acc)[kMT][kNT][4],
                                                int m0, int n0, int lane, float scale) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = m0 + mt * 16 + lane / 4 + h * 8;
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        const int col = n0 + nt * 8 + (lane % 4) * 2;
        *reinterpret_cast<u32 *>(tile + swizzle<kLd>(row, col / 8) + col % 8) =
            ElementOps<Element>::pack(acc[mt][nt][h * 2] * scale, acc[mt][nt][h * 2 + 1] * scale);
      }
    }
}

// 16-byte coalesced copy of rows [0, rows_valid) x chunks [0, kChunks) of a
// swizzled tile to global memory.
template <int kThreads, int kRows, int kDim, int kChunks>
__device__ __forceinline__ void store_tile(u16 *gmem, i64 row_stride, const u16 *tile,
                                           int rows_valid, int tid) {
  constexpr int kTotal = kRows * kChunks;
#pragma unroll
  for (int i = 0; i < (kTotal + kThreads - 1) / kThreads; ++i) {
    const int idx = tid + i * kThreads;
    if (kTotal % kThreads == 0 || idx < kTotal) {
      const int row = idx / kChunks;
      const int chunk = idx % kChunks;
      if (row < rows_valid)
        *reinterpret_cast<U32x4 *>(gmem + row * row_stride + chunk * 8) =
            *reinterpret_cast<const U32x4 *>(tile + swizzle<kDim>(row, chunk));
    }
  }
}

}  // namespace flashjit
