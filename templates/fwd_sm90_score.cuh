// The sm90 forward's walk of the score policy (common/score_policy.cuh)
// over a consumer warpgroup's S tile before the softmax, for the thread at
// fragment rows 16 warp + group (+ 8), column pair quad_lane: a caller's
// score_mod and mask_mod, and the built-in mask where an edge cuts the
// tile, or mask_mod's row runs. The policy says what each score becomes;
// this file says which scores, with the sm90 fragments' shortcuts (a
// score_mod's slope form, packed heads, bounds per thread).
#pragma once

#include "fwd_sm90_config.cuh"
#include "common/fwd_params.cuh"
#include "common/block_map.cuh"
#include "common/fwd_scheduler.cuh"
#include "common/ptx.cuh"
#include "common/score_policy.cuh"
#include "common/sequence.cuh"
#include "common/types.cuh"

namespace flashjit {
namespace fwd_sm90 {

// The caller's modifiers (Score::modify, Score::shown) on the S tile of work tile
// `tile`: score_mod on every score whose query and key the sequence holds
// (in the softmax's natural units: S times `unit`; its result stays in
// them, see scale_log2), mask_mod hiding the
// keys it refuses. Rows and columns past the sequence are left to the
// built-in mask and the epilogue, so a snippet never sees such an index.
// `shown`: the block map says mask_mod shows the whole tile. A tile that
// the sequence holds whole (every tile but the last of each side) runs
// the snippets with no bounds arithmetic at all; an edge tile runs
// score_mod at positions clamped into the sequence (its loads come once
// per tile, not once per element under a branch) and mask_mod under the
// bounds test.
__device__ __forceinline__ void apply_modifiers(float (&acc_s)[kSRegisters], const FwdParams &p,
                                                const WorkTile &tile, const Sequence &seq,
                                                int wg_m0, int n0, bool shown, int warp,
                                                int group, int quad_lane) {
  const float kNegInf = __int_as_float(0xff800000);
  const float unit = Score::natural_unit(p);
  // Copies of the loop, with and without mask_mod, and with and without
  // the bounds, so that none carries another's live values (one loop
  // testing `shown` per element spilled 144 bytes at d = 64 under ALiBi
  // plus documents).
  auto apply = [&](auto with_mask, auto at_edge) {
    constexpr bool kEdge = decltype(at_edge)::value;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int local = warp * 16 + group + h * 8;
    const int q = wg_m0 + local / kPack;  // packed rows: head fastest
    const int head = kPack > 1 ? tile.head * kPack + local % kPack : tile.head;
    const int q_at = kEdge ? min(q, seq.seqlen_q - 1) : q;
#pragma unroll
    for (int nt = 0; nt < kSTiles; ++nt)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int k = n0 + nt * 8 + 2 * quad_lane + c;
        float &s = acc_s[4 * nt + 2 * h + c];
        // Outside the sequence the clamped score is as good as any: a key
        // past seqlen_k is masked below (the key tail cuts its tile), a
        // query past seqlen_q is never written. No select per element.
        if constexpr (Modifiers::kScore && !Modifiers::kScoreSlope)
          s = Score::modify(s * unit, tile.batch, head, q_at,
                            kEdge ? min(k, seq.seqlen_k - 1) : k, p.aux);
        if constexpr (decltype(with_mask)::value)
          if ((!kEdge || (q < seq.seqlen_q && k < seq.seqlen_k)) &&
              !Score::shown(tile.batch, head, q, k, p.aux))
            s = kNegInf;
      }
  }
  };
  // A score_mod that is score + slope(b, h) * (k - q) (kScoreSlope): two
  // FMAs a score at most, the column offset an immediate, where the
  // snippet's call costs an integer add, a conversion, a multiply and an
  // add (ALiBi ran at 0.89x the plain forward so). Unpacked, the bias is
  // taken against the warpgroup's first row, slope * (k - wg_m0): the
  // row's own part, slope * (q - wg_m0), is the same for all its keys, so
  // the softmax does not see it and write_o takes it off the row max (the
  // LSE's units), and one bias per column serves the thread's two rows.
  // Relative to a row of the tile, not position 0, its size stays that of
  // slope * (k - q) (fp32 precision at long lengths). Keys past the
  // sequence get a bias like any other; the mask below removes them.
  if constexpr (Modifiers::kScoreSlope) {
    if constexpr (kPack == 1) {
      const float slope = Modifiers::score_slope(tile.batch, tile.head, p.aux);
      const float base = slope * static_cast<float>(n0 + 2 * quad_lane - wg_m0);
#pragma unroll
      for (int nt = 0; nt < kSTiles; ++nt)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const float bias = fmaf(slope, static_cast<float>(nt * 8 + c), base);
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            float &s = acc_s[4 * nt + 2 * h + c];
            s = fmaf(s, unit, bias);
          }
        }
    } else {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int local = warp * 16 + group + h * 8;
        const int q = wg_m0 + local / kPack;
        const float slope =
            Modifiers::score_slope(tile.batch, tile.head * kPack + local % kPack, p.aux);
        const float base = slope * static_cast<float>(n0 + 2 * quad_lane - q);
#pragma unroll
        for (int nt = 0; nt < kSTiles; ++nt)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            float &s = acc_s[4 * nt + 2 * h + c];
            s = fmaf(s, unit, fmaf(slope, static_cast<float>(nt * 8 + c), base));
          }
      }
    }
    if (!Modifiers::kMask || shown) return;
  }
  // The warpgroup's last row is local row 63.
  const bool inside = wg_m0 + 63 / kPack < seq.seqlen_q && n0 + kBlockN <= seq.seqlen_k;
  auto for_bounds = [&](auto with_mask) {
    if (inside)
      apply(with_mask, BoolConstant<false>{});
    else
      apply(with_mask, BoolConstant<true>{});
  };
  if (!Modifiers::kMask || shown)
    for_bounds(BoolConstant<false>{});
  else
    for_bounds(BoolConstant<Modifiers::kMask>{});
}

// The row runs of the key tile at `entry` for the thread's two rows, where
// the map has them (kBlockMapRuns): loaded before the S they mask is
// waited for, so the global load's latency hides under the GEMMs. A
// packed tile's rows past its last whole group of heads read the last
// position's (they are never stored).
__device__ __forceinline__ RowRuns row_runs_of(const FwdParams &p, const WorkTile &tile,
                                               int wg_m0, int entry, int warp, int group) {
  RowRuns runs{{0u, 0u}};
  if constexpr (kRowRuns) {
    if (entry & kBlockMapRuns) {
      const i64 row = block_map_row_index(p, tile.batch, tile.head, tile.q0 / kQRowsPerTile);
      const int slot = (entry >> kBlockMapSlotShift) & (kBlockMapRunSlots - 1);
      const unsigned *at = p.block_runs +
                           (row * kBlockMapRunSlots + slot) * kQRowsPerTile + (wg_m0 - tile.q0);
#pragma unroll
      for (int h = 0; h < 2; ++h)
        runs.row[h] = at[min((warp * 16 + group + 8 * h) / kPack, kQRowsPerWg - 1)];
    }
  }
  return runs;
}

// The built-in mask on a consumer warpgroup's S tile of keys [n0, n0 +
// kBlockN) that an edge or the seqlen_k tail cuts (or mask_mod's run tile,
// `runs_tile`: its bounds narrowed to the rows' runs): hidden scores -inf.
__device__ __forceinline__ void mask_cut_tile(float (&acc_s)[kSRegisters], const FwdParams &p,
                                              int seqlen_k, i64 offset, int wg_m0, int n0,
                                              bool runs_tile, const RowRuns &runs) {
  const float kNegInf = __int_as_float(0xff800000);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int lane_t = opaque(static_cast<int>(threadIdx.x));
    // The row's query position (packed rows: head fastest).
    const i64 row = wg_m0 + (((lane_t / 32) % 4) * 16 + (lane_t % 32) / 4 + h * 8) / kPack;
    int lo_local, hi_local;  // visible keys of this row, tile-local
    Score::visible_keys(p, seqlen_k, row, n0, kBlockN, offset, lo_local, hi_local);
    if (runs_tile) {
      lo_local = max(lo_local, static_cast<int>(runs.row[h] & 0xffffu));
      hi_local = min(hi_local, static_cast<int>(runs.row[h] >> 16) - 1);
    }
    // The bounds relative to the thread's first column, so each element
    // compares a constant: one compare and one select per element. Without
    // a left bound (none built in, no runs) lo_local <= 0 (first visible
    // key 0, n0 >= 0): only hi.
    const int hi_t = hi_local - (lane_t % 4) * 2;
    const int lo_t = lo_local - (lane_t % 4) * 2;
#pragma unroll
    for (int nt = 0; nt < kSTiles; ++nt)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int col = nt * 8 + c;
        bool masked = col > hi_t;
        if constexpr (Score::Mask::kHasLeft || kRowRuns) masked = masked || col < lo_t;
        if (masked) acc_s[4 * nt + 2 * h + c] = kNegInf;
      }
  }
}

}  // namespace fwd_sm90
}  // namespace flashjit
