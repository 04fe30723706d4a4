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

}  // namespace flashjit
