// The forward's tile scheduler: which work tile a CTA takes next, and which
// key tiles that work tile covers.
//
// A work tile is (query block, head, batch, split). With packed GQA the head
// is a KV head and the tile's rows are its group's query heads at
// kQRowsPerTile consecutive positions; otherwise it is a query head. With
// split-KV the visible key tiles of a query block are cut into num_splits
// contiguous chunks, one per work tile, each of which writes a partial O and
// its log-sum-exp for the combine kernel (fwd_combine.cuh).
//
// Order: query blocks fastest (heaviest first under a causal mask), then
// splits, heads, batch, so the CTAs running at once share K/V heads in L2.
// Persistent CTAs take tiles in rounds: in round k, CTA c takes tile
// k * gridDim.x + (c + k) % gridDim.x, which walks each CTA through the range
// of tile costs (generator/fwd_sm90_traits.h, persistent_grid, says when the
// host launches one CTA per SM rather than one per work tile).
//
// A packed varlen batch (kVarlen) sized by its longest sequence has empty
// tiles: the query blocks past a shorter sequence's end. With one CTA per
// tile they cost a CTA start each and the hardware's block scheduler
// balances the rest. With persistent CTAs they would be dealt out unevenly
// (on the H200, 16 documents of 176..3216 tokens: the busiest SM ran 11% (full)
// and 24% (causal) longer than the average), so there the tiles are
// numbered without them: sequence by sequence, each with its own query
// blocks, the sequences in the order FwdParams::sequence_order gives
// (fwd_sequence_order.cuh: heaviest tiles first, so the last rounds deal the
// cheapest tiles) or else their own. Every thread that walks the tiles
// keeps a cursor (the position in that order holding its current tile and
// that sequence's first tile index); its tile indices only grow, so the
// cursor only moves forward, over all sequences once per CTA. Which tile a CTA takes next is static (the rotation above)
// or, when the host passes a zeroed counter (FwdParams::tile_counter; it
// does under a mask), taken from it: tile costs of a causal packed batch
// vary too much for any static deal (a simulation of 16 documents of
// 176..3216 tokens: the busiest CTA 1.21x the average with the rotation,
// 1.04x taking tiles as CTAs free up; on the H200 457 -> 528 TFLOP/s).
#pragma once

#include "common/mask.cuh"
#include "common/sequence.cuh"
#include "common/types.cuh"

namespace flashjit {

// Split `split` of `splits`' contiguous share of the key tiles `span`
// (possibly none: that split writes an empty partial). Both families cut
// the key range this way.
__device__ __forceinline__ TileSpan split_share(TileSpan span, int split, int splits) {
  const int per_split = (span.count + splits - 1) / splits;
  const int skip = split * per_split;
  const int left = span.count - skip;
  span.first += skip;
  span.count = left < 0 ? 0 : left < per_split ? left : per_split;
  return span;
}

struct WorkTile {
  int q0;     // first query position
  int head;   // query head, or KV head when GQA is packed
  int batch;
  int split;  // 0 without split-KV
};

template <int kQRowsPerTile, int kPack, bool kSplitKv, bool kVarlen>
struct FwdTileScheduler {
  int m_blocks, heads, splits, num_work;
  // The varlen cursor (compact numbering, persistent grids only): the
  // sequence at position `pos` of the order, `seq`, owns tiles
  // [seq_first, seq_first + seq_tiles) and has seq_blocks query blocks.
  bool compact = false;
  int pos = -1, seq = 0, seq_first = 0, seq_tiles = 0, seq_blocks = 0;

  template <class Params>
  __device__ __forceinline__ explicit FwdTileScheduler(const Params &p)
      : m_blocks((p.seqlen_q + kQRowsPerTile - 1) / kQRowsPerTile),
        heads(kPack > 1 ? p.heads_q / kPack : p.heads_q),
        splits(kSplitKv ? p.num_splits : 1) {
    num_work = m_blocks * splits * heads * p.batch;
    if constexpr (kVarlen) compact = static_cast<int>(gridDim.x) < num_work;
  }

  // The CTA's work tile of round j into `tile`; false when none is left.
  template <class Params>
  __device__ __forceinline__ bool next(const Params &p, int j, WorkTile &tile) {
    return at(p, work_index(j), tile);
  }

  // Work tile `w` into `tile`; false when there is none. A thread's calls
  // must come with growing `w` (the cursor only moves forward).
  template <class Params>
  __device__ __forceinline__ bool at(const Params &p, int w, WorkTile &tile) {
    if (w >= num_work) return false;
    if constexpr (kVarlen) {
      if (compact) {
        while (w >= seq_first + seq_tiles) {
          seq_first += seq_tiles;
          if (++pos >= p.batch) return false;
          seq = p.sequence_order != nullptr ? p.sequence_order[pos] : pos;
          seq_blocks = (packed_queries(p, seq).count + kQRowsPerTile - 1) / kQRowsPerTile;
          seq_tiles = seq_blocks * splits * heads;
        }
        const int local = w - seq_first;
        const int rest = local / seq_blocks;
        tile = WorkTile{(seq_blocks - 1 - local % seq_blocks) * kQRowsPerTile,
                        rest / splits % heads, seq, rest % splits};
        return true;
      }
    }
    tile = this->tile(w);
    return true;
  }

  // This CTA's work tile of round k (>= num_work: none left).
  __device__ __forceinline__ int work_index(int k) const {
    return k * static_cast<int>(gridDim.x) + (static_cast<int>(blockIdx.x) + k) % gridDim.x;
  }

  __device__ __forceinline__ WorkTile tile(int w) const {
    const int m_block = m_blocks - 1 - w % m_blocks;
    int rest = w / m_blocks;
    int split = 0;
    if constexpr (kSplitKv) {
      split = rest % splits;
      rest /= splits;
    }
    return WorkTile{m_block * kQRowsPerTile, rest % heads, rest / heads, split};
  }

  // The KV head whose K/V the tile reads. Packed, a tile's head is a
  // group of kPack query heads: the whole GQA group, or one of its parts
  // where the group is wider than a warpgroup's 64 rows (MLA's 128 query
  // heads on one KV head: two tiles of 64).
  template <class Params>
  __device__ __forceinline__ int kv_head(const Params &p, const WorkTile &t) const {
    return kPack > 1 ? t.head * kPack / p.heads_per_kv : t.head / p.heads_per_kv;
  }

  // The key tiles of `block` keys the work tile covers: every key tile one of
  // its queries sees among the sequence's `seqlen_k` keys (aligned by
  // `offset`), or this split's contiguous share of them (possibly none: that
  // split writes an empty partial).
  template <class Mask, class Params>
  __device__ __forceinline__ TileSpan key_tiles(const Params &p, const WorkTile &t, int seqlen_k,
                                                i64 offset, int block) const {
    const TileSpan span = visible_key_tiles<Mask>(p, seqlen_k, t.q0, kQRowsPerTile, offset, block);
    if constexpr (kSplitKv) return split_share(span, t.split, splits);
    return span;
  }
};

}  // namespace flashjit
