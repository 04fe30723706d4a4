// Host-side twin of the sm80 forward kernel's traits (templates/fwd_sm80.cuh):
// which configs it serves, from the same primitive parameters, so the tuner
// can reject a config (and size its launch) before anything is compiled. Its
// shared memory and register tiles are FwdSm80Layout's
// (templates/common/fwd_sm80_layout.cuh), the arithmetic the kernel compiles.
#pragma once

#include "llvm/Support/Error.h"
#include "templates/common/fwd_sm80_layout.cuh"

namespace flashjit {

struct FwdSm80Traits {
  int head_dim_qk = 0;
  int head_dim_v = 0;
  int block_m = 0;
  int block_n = 0;
  int warps = 0;
  int stages = 0;

  // The layout arithmetic, compiled from the header the kernel uses.
  FwdSm80Layout layout() const {
    return {head_dim_qk, head_dim_v, block_m, block_n, warps, stages};
  }
  int threads() const { return layout().threads(); }
  // The Q tile and `stages` (K, V) tile pairs, rows padded to whole swizzle
  // atoms.
  int smem_bytes() const { return layout().smem_bytes(); }
  // fp32 accumulator registers per thread: O and one S tile.
  int accumulator_registers() const { return layout().accumulator_registers(); }

  // Every reason the config cannot be compiled or launched, in one message.
  static llvm::Expected<FwdSm80Traits> make(int head_dim_qk, int head_dim_v, int block_m,
                                            int block_n, int warps, int stages,
                                            int max_smem_bytes);
  // Beyond this many fp32 accumulators per thread the kernel spills: S, O and
  // the ldmatrix fragments share the 255-register budget.
  static constexpr int kMaxAccumulatorRegisters = 192;
};

}  // namespace flashjit
