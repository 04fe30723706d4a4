// The sm90 forward's key tiles (fwd_sm90.cuh): which K/V tiles a work tile
// walks, for the producer and the consumers alike.
#pragma once

#include "fwd_sm90_config.cuh"
#include "common/block_map.cuh"
#include "common/fwd_params.cuh"
#include "common/fwd_scheduler.cuh"
#include "common/sequence.cuh"
#include "common/types.cuh"

namespace flashjit {
namespace fwd_sm90 {

// The K/V tiles any row of a work tile sees among its sequence's keys (this
// split's share of them). None for a tile past its sequence's queries
// (varlen: sequences shorter than the longest). With a block map the span
// counts its listed entries, not key tiles.
// Key tile t of a work tile is entry_base + t, or the map's entry there
// (its index, with kBlockMapFull where mask_mod shows all of it): one
// register across the tile either way, an int offset into the map rather
// than a pointer (at d = 64 with three consumer warpgroups a pointer
// spilled 144 bytes under ALiBi plus documents).
struct KeyTileWalk {
  const FwdParams &p;
  const Scheduler &sched;
  __device__ __forceinline__ TileSpan key_tiles_of(const WorkTile &tile,
                                                   const Sequence &seq) const {
    if (tile.q0 >= seq.seqlen_q) return TileSpan{0, 0};
    if constexpr (kBlockMap) {
      const TileSpan listed{0, p.block_map[block_map_row(p, tile.batch, tile.head,
                                                         tile.q0 / kQRowsPerTile)]};
      if constexpr (kSplitKv) return split_share(listed, tile.split, sched.splits);
      return listed;
    }
    return sched.key_tiles<Mask>(p, tile, seq.seqlen_k, seq.offset, kBlockN);
  }
  __device__ __forceinline__ int entry_base_of(const WorkTile &tile, TileSpan span) const {
    if constexpr (kBlockMap)
      return static_cast<int>(block_map_row(p, tile.batch, tile.head, tile.q0 / kQRowsPerTile)) +
             1 + span.first;
    return span.first;
  }
  __device__ __forceinline__ int key_tile_entry(int entry_base, int t) const {
    if constexpr (kBlockMap) return p.block_map[entry_base + t];
    return entry_base + t;
  }
};
__device__ __forceinline__ int key_tile_index(int entry) {
  return kBlockMap ? block_map_tile(entry) : entry;
}

}  // namespace fwd_sm90
}  // namespace flashjit
