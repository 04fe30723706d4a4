// wgmma.mma_async m64nNk16 with fp32 accumulators, by name, for bf16 and
// fp16 and N = 16..256 in steps of 16, over the generated instructions
// (sm90_wgmma_instructions.cuh, tools/gen_sm90_wgmma.py; the accumulators'
// layout is described there):
//   ss:    A and B (N x K) in shared memory, both K-major.
//   ss_bt: A (M x K) K-major and B (K x N) MN-major.
//   ss_tt: A (M x K) and B (K x N) both MN-major.
//   rs:    A from registers (the m16n8k16 A fragment of the thread's warp
//          rows), B (N x K) K-major.
//   rs_bt: A from registers, B (K x N) MN-major.
// scale_d = 0 ignores the accumulator's old value (D = A*B).
// Callers fence the accumulator registers (wgmma_fence_operands) around the
// asynchronous instruction so the compiler does not move them.
#pragma once

#include "common/sm90_wgmma_instructions.cuh"

namespace flashjit {

// The named cases, once for every N.
template <typename T, int N>
struct Wgmma : WgmmaInstruction<T, N> {
  using Instruction = WgmmaInstruction<T, N>;
  static __device__ __forceinline__ void ss(float (&d)[N / 2], u64 desc_a, u64 desc_b,
                                            int scale_d) {
    Instruction::template ss_t<0, 0>(d, desc_a, desc_b, scale_d);
  }
  static __device__ __forceinline__ void ss_bt(float (&d)[N / 2], u64 desc_a, u64 desc_b,
                                               int scale_d) {
    Instruction::template ss_t<0, 1>(d, desc_a, desc_b, scale_d);
  }
  static __device__ __forceinline__ void ss_tt(float (&d)[N / 2], u64 desc_a, u64 desc_b,
                                               int scale_d) {
    Instruction::template ss_t<1, 1>(d, desc_a, desc_b, scale_d);
  }
  static __device__ __forceinline__ void rs(float (&d)[N / 2], const u32 (&a)[4], u64 desc_b,
                                            int scale_d) {
    Instruction::template rs_t<0>(d, a, desc_b, scale_d);
  }
  static __device__ __forceinline__ void rs_bt(float (&d)[N / 2], const u32 (&a)[4], u64 desc_b,
                                               int scale_d) {
    Instruction::template rs_t<1>(d, a, desc_b, scale_d);
  }
};

}  // namespace flashjit
