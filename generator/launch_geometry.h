// Grid, block and dynamic shared memory of a launch, derived by the kernel's
// traits: the launcher never recomputes them.
#pragma once

namespace flashjit {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

struct LaunchGeometry {
  Dim3 grid;
  Dim3 block;
  int dynamic_smem_bytes = 0;
};

// How a forward call splits its keys (split-KV): at most `splits` partials
// per work tile (1: none, O is written directly); with share_ctas > 0 the
// key tiles of all work tiles are cut into share_ctas equal shares, one per
// CTA (balanced, common/fwd_scheduler.cuh), else each work tile into
// `splits` equal splits. share_rows: a work tile's LSE rows (balanced only).
struct KeySplit {
  int splits = 1;
  int share_ctas = 0;
  int share_rows = 0;
};

}  // namespace flashjit
