// Balanced split-KV's shares (common/fwd_scheduler.cuh says why): the key
// tiles of `work` work tiles of `per_tile` key tiles each, laid end to end
// (work tile w holds [w * per_tile, (w + 1) * per_tile)), cut into `ctas`
// equal shares, share c being [begin(c), begin(c + 1)). Plain constexpr C++
// with no CUDA and no includes: the kernels (the forward's scheduler, the
// combine) and the host (generator/kernel_spec.cpp, which sizes the
// workspace by max_cuts) compile the same code.
#pragma once

namespace flashjit {

struct KeyShares {
  long long total;  // key tiles of all work tiles
  int ctas, per_tile;

  constexpr long long begin(int c) const { return c * total / ctas; }
  // The share holding key tile x: the largest c with begin(c) <= x, that is
  // c * total < (x + 1) * ctas.
  constexpr int share_of(long long x) const {
    return static_cast<int>(((x + 1) * ctas + total - 1) / total - 1);
  }
  // The shares work tile w is cut among (1: one share holds it whole).
  constexpr int cuts(int w) const {
    return share_of((w + 1) * static_cast<long long>(per_tile) - 1) -
           share_of(w * static_cast<long long>(per_tile)) + 1;
  }
  // A bound on cuts(w) over every w: shares hold at least total / ctas key
  // tiles, so a work tile's per_tile - 1 steps cross at most
  // ceil((per_tile - 1) / (total / ctas)) boundaries. Needs total >= ctas.
  constexpr int max_cuts() const {
    const long long least = total / ctas;
    const long long bound = (per_tile - 1 + least - 1) / least + 1;
    return static_cast<int>(bound < ctas ? bound : ctas);
  }
};

// The part of work tile `tile` in a share: key tiles [first, last) of it;
// `split` numbers the tile's partials from its first share's; `partial`:
// other shares hold the rest.
struct ShareSegment {
  int tile, first, last, split;
  bool partial;
};

// Share c walked segment by segment (the forward's scheduler walks one per
// CTA). The 64-bit divisions run once, in the constructor; segments take int
// arithmetic relative to the share's first work tile (the producer warp, at
// 56 registers, spilled with divisions per segment).
struct ShareWalk {
  int per_tile = 0;
  int tile0 = 0;   // the work tile the share starts in
  int first0 = 0;  // its first key tile there
  int length = 0;  // key tiles in the share
  int split0 = 0;  // the partial its first segment writes

  constexpr ShareWalk() = default;
  constexpr ShareWalk(const KeyShares &s, int c) : per_tile(s.per_tile) {
    const long long lo = s.begin(c);
    tile0 = static_cast<int>(lo / s.per_tile);
    const long long tile_lo = static_cast<long long>(tile0) * s.per_tile;
    first0 = static_cast<int>(lo - tile_lo);
    length = static_cast<int>(s.begin(c + 1) - lo);
    split0 = c - s.share_of(tile_lo);
  }
  // Segment j into `out`; false past the share's end (or `num_work`).
  constexpr bool segment(int j, int num_work, ShareSegment &out) const {
    const int first = j == 0 ? first0 : 0;
    const int end = first0 + length - j * per_tile;  // relative to the j-th tile's start
    const int last = end < per_tile ? end : per_tile;
    if (tile0 + j >= num_work || first >= last) return false;
    // Later segments start their tile, whose first share this one is.
    out = ShareSegment{tile0 + j, first, last, j == 0 ? split0 : 0, last - first < per_tile};
    return true;
  }
};

}  // namespace flashjit
