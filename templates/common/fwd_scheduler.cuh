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
#pragma once

#include "common/mask.cuh"
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

template <int kQRowsPerTile, int kPack, bool kSplitKv>
struct FwdTileScheduler {
  int m_blocks, heads, splits, num_work;

  template <class Params>
  __device__ __forceinline__ explicit FwdTileScheduler(const Params &p)
      : m_blocks((p.seqlen_q + kQRowsPerTile - 1) / kQRowsPerTile),
        heads(kPack > 1 ? p.heads_q / kPack : p.heads_q),
        splits(kSplitKv ? p.num_splits : 1) {
    num_work = m_blocks * splits * heads * p.batch;
  }

  // This CTA's work tile of round k (>= num_work: none left).
  __device__ __forceinline__ int work_index(int k) const {
    return k * static_cast<int>(gridDim.x) + (static_cast<int>(blockIdx.x) + k) % gridDim.x;
  }
  __device__ __forceinline__ bool valid(int w) const { return w < num_work; }

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

  // The KV head whose K/V the tile reads.
  template <class Params>
  __device__ __forceinline__ int kv_head(const Params &p, const WorkTile &t) const {
    return kPack > 1 ? t.head : t.head / p.heads_per_kv;
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
