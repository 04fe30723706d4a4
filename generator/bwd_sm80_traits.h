// Host twin of templates/bwd_sm80.cuh's derived constants: warp tilings of
// the three GEMM phases, shared memory, accumulator registers. A config the
// kernel's static_asserts would reject is rejected here first, with why.
#pragma once

#include "llvm/Support/Error.h"

namespace flashjit {

struct BwdSm80Traits {
  int head_dim_qk = 0;
  int head_dim_v = 0;
  int block_m = 0;  // query rows per tile of the inner loop
  int block_n = 0;  // keys per CTA
  int warps = 0;
  int stages = 2;  // Q/dO buffers: 2 overlaps the next tile's loads
  bool deterministic = false;

  int threads() const { return 32 * warps; }
  int dim_qk() const { return round_up(head_dim_qk, 32); }  // MMA extents
  int dim_v() const { return round_up(head_dim_v, 32); }
  // (a) S^T and dP^T: warps over (keys, queries).
  int warps_s_n() const { return block_m >= 64 && warps >= 8 ? 2 : 1; }
  int warps_s_m() const { return warps / warps_s_n(); }
  // (b) dK, dV: warps over (keys, head dim).
  int warps_kv_m() const { return warps < block_n / 16 ? warps : block_n / 16; }
  int warps_kv_n() const { return warps / warps_kv_m(); }
  // (c) dQ: warps over (queries, head dim).
  int warps_q_m() const { return warps < block_m / 16 ? warps : block_m / 16; }
  int warps_q_n() const { return warps / warps_q_m(); }
  int smem_bytes() const;
  // The deterministic dQ kernel (templates/bwd_dq_sm80.cuh): one warp per 16
  // query rows, key tiles of 64 in `stages` buffers.
  static constexpr int kDqBlockN = 64;
  int dq_threads() const { return 32 * (block_m / 16); }
  int dq_smem_bytes() const;
  int accumulator_registers() const;  // fp32 per thread at the peak

  static llvm::Expected<BwdSm80Traits> make(int head_dim_qk, int head_dim_v, int block_m,
                                            int block_n, int warps, int stages,
                                            int max_smem_bytes, bool deterministic = false);
  static int round_up(int x, int m) { return (x + m - 1) / m * m; }
  static constexpr int kMaxAccumulatorRegisters = 200;
};

}  // namespace flashjit
