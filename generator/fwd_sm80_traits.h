// Host-side twin of the sm80 forward kernel's traits (templates/fwd_sm80.cuh):
// the same derivations from the same primitive parameters, so the tuner can
// reject a config (and size its launch) before anything is compiled. A change
// to the kernel's shared-memory layout or register tiles must be mirrored here;
// tests/unit/fwd_sm80_traits_test.cpp checks the two agree on compiled cubins.
#pragma once

#include "llvm/Support/Error.h"

namespace flashjit {

struct FwdSm80Traits {
  int head_dim_qk = 0;
  int head_dim_v = 0;
  int block_m = 0;
  int block_n = 0;
  int warps = 0;
  int stages = 0;

  int threads() const { return 32 * warps; }
  int m_tiles_per_warp() const { return block_m / (16 * warps); }
  // Shared-memory rows are padded to whole 64-element (128-byte) swizzle
  // atoms, so every ldmatrix and cp.async of a row is bank-conflict free.
  int smem_dim_qk() const { return round_up(head_dim_qk, 64); }
  int smem_dim_v() const { return round_up(head_dim_v, 64); }
  int smem_bytes() const;
  // fp32 accumulator registers per thread: O and one S tile.
  int accumulator_registers() const;

  // Every reason the config cannot be compiled or launched, in one message.
  static llvm::Expected<FwdSm80Traits> make(int head_dim_qk, int head_dim_v, int block_m,
                                            int block_n, int warps, int stages,
                                            int max_smem_bytes);

  static int round_up(int x, int m) { return (x + m - 1) / m * m; }
  // Beyond this many fp32 accumulators per thread the kernel spills: S, O and
  // the ldmatrix fragments share the 255-register budget.
  static constexpr int kMaxAccumulatorRegisters = 192;
};

}  // namespace flashjit
