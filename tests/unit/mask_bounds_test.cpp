// The mask bounds every kernel derives (templates/common/mask.cuh), compiled
// for the host and checked against brute-force visibility over many small
// problems: sequence lengths on both sides of each other, windows from
// unbounded to empty, tiles at every position including the tails.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#define __device__
#define __forceinline__ inline
#include "templates/common/mask.cuh"
#undef __forceinline__
#undef __device__

namespace flashjit {
namespace {

// The window fields of FwdParams / BwdParams, as the host sets them: an
// unbounded side is 1 << 30 (generator/forward_params.cpp).
struct WindowParams {
  int window_left, window_right;
};
constexpr int kUnbounded = 1 << 30;

struct Setup {
  int seqlen_q, seqlen_k;
  WindowParams p;
  long long offset() const { return static_cast<long long>(seqlen_k) - seqlen_q; }
  // Query row i sees key j (bottom-right aligned), key inside the sequence.
  bool visible(long long i, long long j) const {
    return j >= 0 && j < seqlen_k && j >= i + offset() - p.window_left &&
           j <= i + offset() + p.window_right;
  }
  std::string describe() const {
    return "sq=" + std::to_string(seqlen_q) + " sk=" + std::to_string(seqlen_k) +
           " left=" + std::to_string(p.window_left) + " right=" + std::to_string(p.window_right);
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

// Each policy's bounds agree with brute force (a policy without a side
// ignores that side, so it is checked with that side unbounded).
template <class Mask>
void check_policy() {
  for (Setup s : setups()) {
    if (!Mask::kHasLeft) s.p.window_left = kUnbounded;
    if (!Mask::kHasRight) s.p.window_right = kUnbounded;
    SCOPED_TRACE(s.describe());
    const long long offset = s.offset();
    for (int block : {8, 16}) {
      // Key tiles seen by a query tile: from the first visible key's tile to
      // the last's (rows past seqlen_q count: the kernels walk whole tiles).
      for (int m0 = 0; m0 < s.seqlen_q; m0 += block) {
        long long lo = -1, hi = -1;
        for (long long i = m0; i < m0 + block; ++i)
          for (long long j = 0; j < s.seqlen_k; ++j)
            if (s.visible(i, j)) {
              if (lo < 0) lo = j;
              lo = std::min(lo, j);
              hi = std::max(hi, j);
            }
        const TileSpan span = visible_key_tiles<Mask>(s.p, s.seqlen_k, m0, block, offset, block);
        if (lo < 0) {
          EXPECT_EQ(span.count, 0) << "m0=" << m0;
        } else {
          EXPECT_EQ(span.first, lo / block) << "m0=" << m0;
          EXPECT_EQ(span.count, hi / block - lo / block + 1) << "m0=" << m0;
        }
      }
      // Query tiles that see a key tile (queries inside seqlen_q).
      for (int n0 = 0; n0 < s.seqlen_k; n0 += block) {
        long long lo = -1, hi = -1;
        for (long long j = n0; j < n0 + block; ++j)
          for (long long i = 0; i < s.seqlen_q; ++i)
            if (s.visible(i, j)) {
              if (lo < 0) lo = i;
              lo = std::min(lo, i);
              hi = std::max(hi, i);
            }
        const TileSpan span = visible_query_tiles<Mask>(s.p, s.seqlen_q, n0, block, offset, block);
        if (lo < 0) {
          EXPECT_EQ(span.count, 0) << "n0=" << n0;
        } else {
          EXPECT_EQ(span.first, lo / block) << "n0=" << n0;
          EXPECT_EQ(span.count, hi / block - lo / block + 1) << "n0=" << n0;
        }
      }
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

}  // namespace
}  // namespace flashjit
