// The mask bounds every kernel derives (templates/common/mask.cuh), compiled
// for the host and checked against brute-force visibility over many small
// problems: sequence lengths on both sides of each other, windows from
// unbounded to empty, chunks smaller and larger than a tile and not a
// multiple of it, tiles at every position including the tails.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>

#define __device__
#define __forceinline__ inline
#include "templates/common/mask.cuh"
#undef __forceinline__
#undef __device__

namespace flashjit {
namespace {

// The mask fields of FwdParams / BwdParams, as the host sets them: an
// unbounded side is 1 << 30 (generator/forward_params.cpp); no chunk is 0.
struct WindowParams {
  int window_left, window_right;
  int attention_chunk = 0;
};
constexpr int kUnbounded = 1 << 30;

struct Setup {
  int seqlen_q, seqlen_k;
  WindowParams p;
  long long offset() const { return static_cast<long long>(seqlen_k) - seqlen_q; }
  // Query row i sees key j (bottom-right aligned), key inside the sequence.
  bool visible(long long i, long long j) const {
    const long long pos = i + offset();
    return j >= 0 && j < seqlen_k && j >= pos - p.window_left && j <= pos + p.window_right &&
           (p.attention_chunk == 0 || floor_div(j) == floor_div(pos));
  }
  long long floor_div(long long x) const {
    const long long c = p.attention_chunk;
    return x >= 0 ? x / c : -((-x + c - 1) / c);
  }
  std::string describe() const {
    return "sq=" + std::to_string(seqlen_q) + " sk=" + std::to_string(seqlen_k) +
           " left=" + std::to_string(p.window_left) + " right=" + std::to_string(p.window_right) +
           " chunk=" + std::to_string(p.attention_chunk);
  }
};

std::vector<Setup> setups() {
  std::vector<Setup> out;
  for (int sq : {1, 7, 33, 70})
    for (int sk : {1, 9, 33, 64, 101})
      for (WindowParams w :
           {WindowParams{kUnbounded, kUnbounded}, WindowParams{kUnbounded, 0}, WindowParams{5, 0},
            WindowParams{0, 3}, WindowParams{20, 7}, WindowParams{0, 0}})
        out.push_back({sq, sk, w});
  return out;
}

// The first and last index b in [0, inner) with visible(a, b) for some a in
// [begin, begin + block); {-1, -1} when there is none.
template <class Visible>
std::pair<long long, long long> visible_range(long long begin, int block, long long inner,
                                              Visible visible) {
  long long lo = -1, hi = -1;
  for (long long a = begin; a < begin + block; ++a)
    for (long long b = 0; b < inner; ++b)
      if (visible(a, b)) {
        if (lo < 0 || b < lo) lo = b;
        hi = std::max(hi, b);
      }
  return {lo, hi};
}

// `span` is exactly the tiles of `block` from index range.first's to
// range.second's (none for an empty range).
void expect_tiles(const TileSpan &span, std::pair<long long, long long> range, int block,
                  const std::string &where) {
  const auto [lo, hi] = range;
  if (lo < 0) {
    EXPECT_EQ(span.count, 0) << where;
    return;
  }
  EXPECT_EQ(span.first, lo / block) << where;
  EXPECT_EQ(span.count, hi / block - lo / block + 1) << where;
}

// Each policy's bounds agree with brute force (a policy without a side
// ignores that side, so it is checked with that side unbounded).
template <class Mask>
void check_policy() {
  for (Setup base : setups())
    for (int chunk : {3, 8, 13, 40}) {
    Setup s = base;
    if (!Mask::kWindowLeft) s.p.window_left = kUnbounded;
    if (!Mask::kWindowRight) s.p.window_right = kUnbounded;
    s.p.attention_chunk = Mask::kChunked ? chunk : 0;
    if (!Mask::kChunked && chunk != 3) continue;  // one pass without a chunk
    SCOPED_TRACE(s.describe());
    const long long offset = s.offset();
    for (int block : {8, 16}) {
      // Key tiles seen by a query tile: from the first visible key's tile to
      // the last's (rows past seqlen_q count: the kernels walk whole tiles).
      for (int m0 = 0; m0 < s.seqlen_q; m0 += block)
        expect_tiles(visible_key_tiles<Mask>(s.p, s.seqlen_k, m0, block, offset, block),
                     visible_range(m0, block, s.seqlen_k,
                                   [&](long long i, long long j) { return s.visible(i, j); }),
                     block, "m0=" + std::to_string(m0));
      // Query tiles that see a key tile (queries inside seqlen_q).
      for (int n0 = 0; n0 < s.seqlen_k; n0 += block)
        expect_tiles(visible_query_tiles<Mask>(s.p, s.seqlen_q, n0, block, offset, block),
                     visible_range(n0, block, s.seqlen_q,
                                   [&](long long j, long long i) { return s.visible(i, j); }),
                     block, "n0=" + std::to_string(n0));
      // Per tile: cut exactly when an entry is hidden; each row's visible
      // keys and each key's visible queries as tile-local ranges.
      for (int m0 = 0; m0 < s.seqlen_q + block; m0 += block)
        for (int n0 = 0; n0 < s.seqlen_k + block; n0 += block) {
          bool hidden = false;
          for (long long i = m0; i < m0 + block; ++i)
            for (long long j = n0; j < n0 + block; ++j) hidden |= !s.visible(i, j);
          EXPECT_EQ((tile_is_cut<Mask>(s.p, s.seqlen_k, m0, block, n0, block, offset)), hidden)
              << "m0=" << m0 << " n0=" << n0;
          for (int r = 0; r < block; ++r) {
            int lo = 0, hi = 0;
            visible_keys_in_tile<Mask>(s.p, s.seqlen_k, m0 + r, n0, block, offset, lo, hi);
            for (int c = 0; c < block; ++c)
              EXPECT_EQ(c >= lo && c <= hi, s.visible(m0 + r, n0 + c))
                  << "row " << m0 + r << " key " << n0 + c;
            visible_queries_in_tile<Mask>(s.p, s.seqlen_k, n0 + r, m0, block, offset, lo, hi);
            for (int q = 0; q < block; ++q)
              EXPECT_EQ(q >= lo && q <= hi, s.visible(m0 + q, n0 + r))
                  << "key " << n0 + r << " row " << m0 + q;
          }
        }
    }
    }
}

TEST(MaskBounds, NoMaskMatchesBruteForce) { check_policy<NoMask>(); }
TEST(MaskBounds, CausalMaskMatchesBruteForce) { check_policy<CausalMask>(); }
TEST(MaskBounds, WindowMaskMatchesBruteForce) { check_policy<WindowMask>(); }
TEST(MaskBounds, ChunkedMaskMatchesBruteForce) { check_policy<ChunkedMask<NoMask>>(); }
TEST(MaskBounds, ChunkedCausalMaskMatchesBruteForce) { check_policy<ChunkedMask<CausalMask>>(); }
TEST(MaskBounds, ChunkedWindowMaskMatchesBruteForce) { check_policy<ChunkedMask<WindowMask>>(); }

}  // namespace
}  // namespace flashjit
