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

}  // namespace flashjit
