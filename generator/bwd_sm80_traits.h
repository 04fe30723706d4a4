// Host twin of templates/bwd_sm80.cuh's derived constants: a config the
// kernel's static_asserts would reject is rejected here first, with why. Its
// warp tilings, shared memory and accumulator registers are BwdSm80Layout's
// (templates/common/bwd_sm80_layout.cuh), the arithmetic the kernels compile.
#pragma once

#include "llvm/Support/Error.h"
#include "templates/common/bwd_sm80_layout.cuh"

namespace flashjit {

struct BwdSm80Traits {
  int head_dim_qk = 0;
  int head_dim_v = 0;
  int block_m = 0;  // query rows per tile of the inner loop
  int block_n = 0;  // keys per CTA
  int warps = 0;
  int stages = 2;  // Q/dO buffers: 2 overlaps the next tile's loads
  bool deterministic = false;

  // The layout arithmetic, compiled from the header the kernels use.
  BwdSm80Layout layout() const {
    return {head_dim_qk, head_dim_v, block_m, block_n, warps, stages};
  }
  int threads() const { return layout().threads(); }
  // K, V; `stages` of Q and dO; P^T and dS^T; LSE and D.
  int smem_bytes() const { return layout().smem_bytes(); }
  // The deterministic dQ kernel (templates/bwd_dq_sm80.cuh): one warp per 16
  // query rows, key tiles of BwdSm80Layout::kDqBlockN in `stages` buffers.
  int dq_threads() const { return layout().dq_threads(); }
  int dq_smem_bytes() const { return layout().dq_smem_bytes(); }
  // fp32 per thread at the peak.
  int accumulator_registers() const { return layout().accumulator_registers(); }

  static llvm::Expected<BwdSm80Traits> make(int head_dim_qk, int head_dim_v, int block_m,
                                            int block_n, int warps, int stages,
                                            int max_smem_bytes, bool deterministic = false);
  static constexpr int kMaxAccumulatorRegisters = 200;
  // The widest head dim (MLA's 576 latent + rope columns): past 256, 32 keys
  // a CTA over 8 warps keep dK and dV at 128 registers (dQ in column chunks).
  static constexpr int kMaxHeadDim = 576;
};

}  // namespace flashjit
