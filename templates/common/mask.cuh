// Mask policies, bottom-right aligned as FlashAttention >= 2.1: query row i
// (of seqlen_q) sees key j (of seqlen_k) when
//   i + (seqlen_k - seqlen_q) - window_left <= j <= i + (seqlen_k - seqlen_q) + window_right.
// The policy says which sides can cut a tile, so the unmasked kernel carries
// no bound arithmetic at all; the bounds themselves are run-time parameters.
#pragma once

namespace flashjit {

struct NoMask {
  static constexpr bool kHasLeft = false;
  static constexpr bool kHasRight = false;
};

// window(-1, 0): the run-time right bound is 0.
struct CausalMask {
  static constexpr bool kHasLeft = false;
  static constexpr bool kHasRight = true;
};

// Sliding window; an unbounded side arrives as a bound no sequence reaches.
struct WindowMask {
  static constexpr bool kHasLeft = true;
  static constexpr bool kHasRight = true;
};

// ---- the bounds every kernel derives from the mask -------------------------
// Plain integer arithmetic, nothing device-specific: the unit tests compile
// these for the host and check them against brute-force visibility
// (tests/unit/mask_bounds_test.cpp).

using i64 = long long;  // as in common/types.cuh
// `offset` is seqlen_k - seqlen_q (bottom-right alignment); `p` is FwdParams
// or BwdParams (window_left, window_right); the sequence lengths come from
// the caller, which holds them already.

// Whole tiles of `block` covering [begin, end): the first one and how many.
struct TileSpan {
  int first, count;
};
__device__ __forceinline__ TileSpan tile_span(i64 begin, i64 end, int block) {
  const int first = static_cast<int>(begin / block);
  return {first, end > begin ? static_cast<int>((end + block - 1) / block) - first : 0};
}

// The key tiles of `block` keys that any of queries [m0, m0 + rows) sees.
template <class Mask, class Params>
__device__ __forceinline__ TileSpan visible_key_tiles(const Params &p, int seqlen_k, int m0,
                                                      int rows, i64 offset, int block) {
  i64 begin = 0, end = seqlen_k;
  if constexpr (Mask::kHasRight) {
    const i64 last = m0 + rows - 1 + offset + p.window_right + 1;
    end = last < end ? last : end;
  }
  if constexpr (Mask::kHasLeft) {
    const i64 first = m0 + offset - p.window_left;
    begin = first > 0 ? first : 0;
  }
  return tile_span(begin, end, block);
}

// The query tiles of `block` rows any of keys [n0, n0 + cols) is seen by.
template <class Mask, class Params>
__device__ __forceinline__ TileSpan visible_query_tiles(const Params &p, int seqlen_q, int n0,
                                                        int cols, i64 offset, int block) {
  i64 begin = 0, end = seqlen_q;
  if constexpr (Mask::kHasRight) {
    const i64 first = n0 - offset - p.window_right;
    begin = first > 0 ? first : 0;
  }
  if constexpr (Mask::kHasLeft) {
    const i64 last = n0 + cols - 1 - offset + p.window_left + 1;
    end = last < end ? last : end;
  }
  return tile_span(begin, end, block);
}

// Whether the mask or the key tail hides any entry of queries
// [m0, m0 + rows) x keys [n0, n0 + cols): only such tiles are masked
// element-wise.
template <class Mask, class Params>
__device__ __forceinline__ bool tile_is_cut(const Params &p, int seqlen_k, int m0, int rows,
                                            int n0, int cols, i64 offset) {
  bool cut = n0 + cols > seqlen_k;
  if constexpr (Mask::kHasRight) cut |= n0 + cols - 1 > m0 + offset + p.window_right;
  if constexpr (Mask::kHasLeft) cut |= n0 < m0 + rows - 1 + offset - p.window_left;
  return cut;
}

// A tile-local bound clamped to [-1, n] before narrowing to int.
__device__ __forceinline__ int clamp_to_tile(i64 v, int n) {
  return static_cast<int>(v < -1 ? -1 : v > n ? n : v);
}

// The keys query `row` sees, [lo, hi] (inclusive, within the sequence),
// relative to key n0 and clamped to [-1, n].
template <class Mask, class Params>
__device__ __forceinline__ void visible_keys_in_tile(const Params &p, int seqlen_k, i64 row,
                                                     int n0, int n, i64 offset, int &lo, int &hi) {
  i64 last = seqlen_k - 1;
  if constexpr (Mask::kHasRight) {
    const i64 r = row + offset + p.window_right;
    last = r < last ? r : last;
  }
  i64 first = 0;
  if constexpr (Mask::kHasLeft) {
    const i64 l = row + offset - p.window_left;
    first = l > first ? l : first;
  }
  hi = clamp_to_tile(last - n0, n);
  lo = clamp_to_tile(first - n0, n);
}

// The queries that see key `key`, [lo, hi] (inclusive), relative to query
// m0 and clamped to [-1, n]; none (lo = n) for a key past seqlen_k.
template <class Mask, class Params>
__device__ __forceinline__ void visible_queries_in_tile(const Params &p, int seqlen_k, int key,
                                                        int m0, int n, i64 offset, int &lo,
                                                        int &hi) {
  i64 first = key < seqlen_k ? -1 : n;
  i64 last = n;
  if constexpr (Mask::kHasRight) {
    const i64 l = key - offset - p.window_right - m0;  // q >= key - offset - right
    first = l > first ? l : first;
  }
  if constexpr (Mask::kHasLeft) {
    const i64 r = key - offset + p.window_left - m0;  // q <= key - offset + left
    last = r < last ? r : last;
  }
  lo = clamp_to_tile(first, n);
  hi = clamp_to_tile(last, n);
}

}  // namespace flashjit
