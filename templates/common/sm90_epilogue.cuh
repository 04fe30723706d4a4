// The sm90 forward's epilogue: a consumer warpgroup's 64 rows of O / rowsum,
// converted to 16 bits, straight from the accumulator fragments to global
// memory, and their log-sum-exps; or, where a row has more than one partial
// (split-KV), its partial O in fp32 and log-sum-exp to the workspace for
// the combine kernel (fwd_combine.cuh).
//
// Direct stores: a 4x4 transpose across each quad (xor shuffles) gives
// every lane 16 contiguous bytes of a row, so each store is 16 bytes. Against
// O staged through shared memory this measured 3-15% faster at short
// sequences on the H200 (d=128 causal 512: 321 -> 352 TFLOP/s; d=256 512:
// 461 -> 517), and against 4-byte stores straight from the fragments 1-10%.
// A row that sees no key writes O = 0 and LSE = +inf, as FlashAttention
// does (a partial: LSE = -inf, which weighs nothing in the merge).
//
// Rows: the fragment row of warp w, lane group g, half h is local row
// 16w + g + 8h of the warpgroup's 64; with packed GQA that is position
// local / kPack and head local % kPack of the tile's KV head, and rows past
// kLoadedRowsPerWg (a group that does not divide 64) are neither.
#pragma once

#include "common/fwd_params.cuh"
#include "common/fwd_scheduler.cuh"
#include "common/online_softmax.cuh"
#include "common/ptx.cuh"
#include "common/types.cuh"

namespace flashjit {

// kHeadDim is the tiled head dim of O's fragments; kStoredColumns the
// problem's (a multiple of 8, at most kHeadDim): the columns past it are
// zeros, never stored. kSinks: a learned sink per query head joins each
// row's softmax (finish_row; a split's partial leaves it to the
// combine). kColumnSplit 2: each of two warpgroups holds kHeadDim columns
// of the rows' O from its `col0` (store's), and the one holding column 0
// writes the LSE.
template <class Element, int kHeadDim, int kStoredColumns, int kPack, int kLoadedRowsPerWg,
          bool kSplitKv, bool kSinks = false, int kColumnSplit = 1>
struct Sm90Epilogue {
  using Ops = ElementOps<Element>;
  static constexpr int kOTiles = kHeadDim / 8;  // n8 column tiles of O
  static_assert(kStoredColumns % 8 == 0 && kStoredColumns <= kColumnSplit * kHeadDim,
                "stored columns: whole n8 tiles of O");

  // The work tile's rows of this warpgroup (from query position wg_m0): O
  // (acc_o, unnormalised), and the online softmax's statistics of the
  // thread's rows group and group + 8 of `warp` within the warpgroup;
  // `group` (lane / 4) is the fragment row and `quad_lane` (lane % 4) the
  // column pair, as the kernel holds them.
  template <class Sequence>
  __device__ __forceinline__ static void store(const FwdParams &p, const WorkTile &tile,
                                               const Sequence &seq, int wg_m0, int warp, int group,
                                               int quad_lane,
                                               const float (&acc_o)[kHeadDim / 2],
                                               const OnlineSoftmax<1> &stats, float scale_log2,
                                               int col0 = 0) {
    const bool partial = kSplitKv && p.num_splits > 1;
    // Every column the fragments hold is the problem's (no check per store).
    constexpr bool kWhole = kColumnSplit == 1 && kStoredColumns == kHeadDim;
    const bool odd = quad_lane & 1, high = quad_lane & 2;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      // The row's query position and head (packed rows: head fastest).
      const int local = warp * 16 + group + h * 8;
      const int row = wg_m0 + local / kPack;
      const int head = kPack > 1 ? tile.head * kPack + local % kPack : tile.head;
      // A split's partial is normalised by its own sum; the whole row's
      // output by its sum and the sink.
      const float sum = stats.total(h);
      const RowFinish finish =
          kSinks && !partial
              ? finish_row<kSinks>(stats.row_max[h], sum, scale_log2, p.sinks[head])
              : finish_row<false>(stats.row_max[h], sum, scale_log2, 0.f);
      const float inv = finish.inv;
      const RowFinish split = finish_partial(stats.row_max[h], sum, scale_log2);
      const bool stored =
          (kLoadedRowsPerWg == 64 || local < kLoadedRowsPerWg) && row < seq.seqlen_q;
      // The LSE's index of (sequence, head, row) (common/sequence.cuh).
      const i64 lse_row = seq.lse_row(p, head, row);
      if (kSplitKv && partial) {
        // [split][LSE row]: the split's slice of every row (dense [batch][head][row],
        // varlen [head][total_q]).
        const i64 slice = tile.split * Sequence::lse_rows(p);
        float *const o_row =
            p.o_partial + (slice + lse_row) * kStoredColumns + col0 + quad_lane * 2;
        if (stored) {
          constexpr int kTiles = kColumnSplit == 1 ? kStoredColumns / 8 : kOTiles;
#pragma unroll
          for (int nt = 0; nt < kTiles; ++nt)
            if (kColumnSplit == 1 || col0 + nt * 8 < kStoredColumns)
              *reinterpret_cast<F32x2 *>(o_row + nt * 8) =
                  F32x2{acc_o[4 * nt + 2 * h] * inv, acc_o[4 * nt + 2 * h + 1] * inv};
          if (quad_lane == 0 && col0 == 0) p.lse_partial[slice + lse_row] = split.lse;
        }
        continue;
      }
      u16 *const o_row = static_cast<u16 *>(p.o) + seq.outer * p.o_batch_stride +
                         (seq.q_row0 + row) * p.o_row_stride + head * p.o_head_stride +
                         col0 + quad_lane * 8;
#pragma unroll
      for (int b = 0; b < kOTiles / 4; ++b) {
        // Column tiles 4b..4b+3 of the row: lane q holds 4 bytes of each. A
        // 4x4 transpose across the quad (two xor shuffles per step) leaves
        // lane q the 16 contiguous bytes of tile 4b + q.
        u32 v[4];
#pragma unroll
        for (int i = 0; i < 4; ++i)
          v[i] = Ops::pack(acc_o[4 * (4 * b + i) + 2 * h] * inv,
                           acc_o[4 * (4 * b + i) + 2 * h + 1] * inv);
        u32 x = odd ? v[0] : v[1], y = odd ? v[2] : v[3];
        x = __shfl_xor_sync(0xffffffffu, x, 1);
        y = __shfl_xor_sync(0xffffffffu, y, 1);
        if (odd) v[0] = x, v[2] = y;
        else v[1] = x, v[3] = y;
        x = high ? v[0] : v[2];
        y = high ? v[1] : v[3];
        x = __shfl_xor_sync(0xffffffffu, x, 2);
        y = __shfl_xor_sync(0xffffffffu, y, 2);
        if (high) v[0] = x, v[1] = y;
        else v[2] = x, v[3] = y;
        // Lane q's 16 bytes are columns 32b + 8q..: whole, in or past the
        // problem's (a multiple of 8).
        const bool in_row = kWhole || col0 + b * 32 + quad_lane * 8 < kStoredColumns;
        if (stored && in_row)
          *reinterpret_cast<U32x4 *>(o_row + b * 32) = U32x4{v[0], v[1], v[2], v[3]};
      }
      if (p.lse && quad_lane == 0 && col0 == 0 && stored) p.lse[lse_row] = finish.lse;
    }
  }
};

}  // namespace flashjit
