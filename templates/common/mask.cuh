// Mask policies, bottom-right aligned as FlashAttention >= 2.1: query row i
// (of seqlen_q) sees key j (of seqlen_k) when
//   i + (seqlen_k - seqlen_q) - window_left <= j <= i + (seqlen_k - seqlen_q) + window_right
// and, under chunked attention (Llama 4's, FlashAttention-3's attention_chunk
// C), when j lies in the chunk of C positions that holds i + (seqlen_k -
// seqlen_q): floor(j / C) == floor((i + seqlen_k - seqlen_q) / C).
// The policy says which sides can cut a tile, so the unmasked kernel carries
// no bound arithmetic at all; the bounds themselves are run-time parameters.
// kHasLeft / kHasRight: some bound (the window's or the chunk's) can hide
// keys left / right of a row's; kWindowLeft / kWindowRight: the window's
// bounds apply; kChunked: the chunk's.
#pragma once

namespace flashjit {

struct NoMask {
  static constexpr bool kWindowLeft = false, kWindowRight = false, kChunked = false;
  static constexpr bool kHasLeft = false, kHasRight = false;
};

// window(-1, 0): the run-time right bound is 0.
struct CausalMask {
  static constexpr bool kWindowLeft = false, kWindowRight = true, kChunked = false;
  static constexpr bool kHasLeft = false, kHasRight = true;
};

// Sliding window; an unbounded side arrives as a bound no sequence reaches.
struct WindowMask {
  static constexpr bool kWindowLeft = true, kWindowRight = true, kChunked = false;
  static constexpr bool kHasLeft = true, kHasRight = true;
};

// A mask above within chunks of p.attention_chunk positions: a chunk's
// bounds cut on both sides.
template <class Base>
struct ChunkedMask {
  static constexpr bool kWindowLeft = Base::kWindowLeft, kWindowRight = Base::kWindowRight;
  static constexpr bool kChunked = true;
  static constexpr bool kHasLeft = true, kHasRight = true;
};

// ---- the bounds every kernel derives from the mask -------------------------
// Plain integer arithmetic, nothing device-specific: the unit tests compile
// these for the host and check them against brute-force visibility
// (tests/unit/mask_bounds_test.cpp).

using i64 = long long;  // as in common/types.cuh
// `offset` is seqlen_k - seqlen_q (bottom-right alignment); `p` is FwdParams
// or BwdParams (window_left, window_right); the sequence lengths come from
// the caller, which holds them already.

// The first position of the chunk of `chunk` positions that holds `pos`
// (floor division: a row's position is negative where seqlen_q > seqlen_k).
// 32-bit: positions are within a sequence's int lengths.
// The division is redone where it is used (the empty asm makes the length
// opaque, so it is not hoisted out of the key loop): held across it, each
// row's bound cost registers the unchunked kernel has, and spills.
__device__ __forceinline__ i64 chunk_start(i64 pos, int chunk) {
#if defined(__CUDA_ARCH__)
  asm volatile("" : "+r"(chunk));
#endif
  const int at = static_cast<int>(pos);
  const int q = at / chunk;
  return static_cast<i64>(q - (at % chunk < 0 ? 1 : 0)) * chunk;
}

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
  if constexpr (Mask::kWindowRight) {
    const i64 last = m0 + rows - 1 + offset + p.window_right + 1;
    end = last < end ? last : end;
  }
  if constexpr (Mask::kWindowLeft) {
    const i64 first = m0 + offset - p.window_left;
    begin = first > 0 ? first : 0;
  }
  if constexpr (Mask::kChunked) {
    const i64 first = chunk_start(m0 + offset, p.attention_chunk);
    const i64 last = chunk_start(m0 + rows - 1 + offset, p.attention_chunk) + p.attention_chunk;
    begin = first > begin ? first : begin;
    end = last < end ? last : end;
  }
  return tile_span(begin, end, block);
}

// The query tiles of `block` rows any of keys [n0, n0 + cols) is seen by.
template <class Mask, class Params>
__device__ __forceinline__ TileSpan visible_query_tiles(const Params &p, int seqlen_q, int n0,
                                                        int cols, i64 offset, int block) {
  i64 begin = 0, end = seqlen_q;
  if constexpr (Mask::kWindowRight) {
    const i64 first = n0 - offset - p.window_right;
    begin = first > 0 ? first : 0;
  }
  if constexpr (Mask::kWindowLeft) {
    const i64 last = n0 + cols - 1 - offset + p.window_left + 1;
    end = last < end ? last : end;
  }
  if constexpr (Mask::kChunked) {
    // Rows whose position shares a chunk with one of the keys.
    const i64 first = chunk_start(n0, p.attention_chunk) - offset;
    const i64 last = chunk_start(n0 + cols - 1, p.attention_chunk) + p.attention_chunk - offset;
    begin = first > begin ? first : begin;
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
  if constexpr (Mask::kWindowRight) cut |= n0 + cols - 1 > m0 + offset + p.window_right;
  if constexpr (Mask::kWindowLeft) cut |= n0 < m0 + rows - 1 + offset - p.window_left;
  if constexpr (Mask::kChunked) {
    // Whole only when every row's position and every key lie in the first
    // row's chunk [first, first + chunk): one division.
    const i64 first = chunk_start(m0 + offset, p.attention_chunk);
    const i64 end = first + p.attention_chunk;
    cut |= m0 + rows - 1 + offset >= end || n0 < first || n0 + cols - 1 >= end;
  }
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
  if constexpr (Mask::kWindowRight) {
    const i64 r = row + offset + p.window_right;
    last = r < last ? r : last;
  }
  i64 first = 0;
  if constexpr (Mask::kWindowLeft) {
    const i64 l = row + offset - p.window_left;
    first = l > first ? l : first;
  }
  if constexpr (Mask::kChunked) {
    const i64 chunk = chunk_start(row + offset, p.attention_chunk);
    first = chunk > first ? chunk : first;
    last = chunk + p.attention_chunk - 1 < last ? chunk + p.attention_chunk - 1 : last;
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
  if constexpr (Mask::kWindowRight) {
    const i64 l = key - offset - p.window_right - m0;  // q >= key - offset - right
    first = l > first ? l : first;
  }
  if constexpr (Mask::kWindowLeft) {
    const i64 r = key - offset + p.window_left - m0;  // q <= key - offset + left
    last = r < last ? r : last;
  }
  if constexpr (Mask::kChunked) {
    // Rows whose position lies in the key's chunk.
    const i64 chunk = chunk_start(key, p.attention_chunk);
    const i64 l = chunk - offset - m0, r = chunk + p.attention_chunk - 1 - offset - m0;
    first = l > first ? l : first;
    last = r < last ? r : last;
  }
  lo = clamp_to_tile(first, n);
  hi = clamp_to_tile(last, n);
}

}  // namespace flashjit
