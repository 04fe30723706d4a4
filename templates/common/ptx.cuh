// Thin wrappers over the PTX every kernel uses: shared-memory addresses,
// cp.async, ldmatrix, quad reductions and the special-function unit.
#pragma once

#include "common/types.cuh"

namespace flashjit {

__device__ __forceinline__ u32 smem_address(const void *ptr) {
  u32 addr;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(addr) : "l"(ptr));
  return addr;
}

// 16-byte global -> shared copy, bypassing L1. With `valid` false nothing is
// read and the destination is zero-filled: tails past seqlen load zeros.
__device__ __forceinline__ void cp_async_16(u32 smem_addr, const void *gmem, bool valid) {
  int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr), "l"(gmem),
               "r"(src_bytes)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], u32 smem_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(u32 (&r)[4], u32 smem_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr));
}

// The transpose of ldmatrix_x4: four 8x8 16-bit matrices from the mma
// fragment layout (thread t: row t/4, columns 2(t%4), +1) to shared memory,
// lane l giving the address of matrix l/8's row l%8.
__device__ __forceinline__ void stmatrix_x4(u32 smem_addr, const u32 (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n"
               ::"r"(smem_addr), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

// One 32-bit word of shared memory, ordered by the barriers around it (the
// "memory" clobber keeps the compiler from moving it across them).
__device__ __forceinline__ void st_shared_s32(u32 smem_addr, int value) {
  asm volatile("st.shared.s32 [%0], %1;\n" ::"r"(smem_addr), "r"(value) : "memory");
}
__device__ __forceinline__ int ld_shared_s32(u32 smem_addr) {
  int value;
  asm volatile("ld.shared.s32 %0, [%1];\n" : "=r"(value) : "r"(smem_addr) : "memory");
  return value;
}

// Two consecutive floats of shared memory in one 8-byte load. No "memory"
// clobber: ordered by being volatile, as the barriers are, and free to be
// scheduled among the arithmetic around it.
__device__ __forceinline__ void ld_shared_f32x2(u32 smem_addr, float (&v)[2]) {
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v[0]), "=f"(v[1]) : "r"(smem_addr));
}

// Plain shared-memory words for the sm90 forward's spare producer warps
// (V's transpose, Q's quantization), ordered by the mbarriers around them.
__device__ __forceinline__ void ld_shared_u32x4(u32 addr, u32 (&v)[4]) {
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
               : "r"(addr));
}
__device__ __forceinline__ void st_shared_u32(u32 addr, u32 v) {
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v));
}
__device__ __forceinline__ void st_shared_u32x2(u32 addr, u32 lo, u32 hi) {
  asm volatile("st.shared.v2.b32 [%0], {%1, %2};" ::"r"(addr), "r"(lo), "r"(hi));
}
__device__ __forceinline__ void st_shared_f32(u32 addr, float v) {
  asm volatile("st.shared.f32 [%0], %1;" ::"r"(addr), "f"(v));
}
__device__ __forceinline__ float ld_shared_f32(u32 addr) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(addr));
  return v;
}

__device__ __forceinline__ void st_shared_zero_16(u32 smem_addr) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(smem_addr), "r"(0));
}

// Hides a value from loop-invariant code motion, so per-thread offsets are
// recomputed where they are used (per-thread offsets, per-row mask bounds on
// the rare cut tiles) instead of held in registers across a loop whose
// accumulators need them.
__device__ __forceinline__ i64 opaque(i64 x) {
  asm volatile("" : "+l"(x));
  return x;
}
__device__ __forceinline__ int opaque(int x) {
  asm volatile("" : "+r"(x));
  return x;
}

// Max and sum over the four lanes that hold one row of an MMA fragment.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Programmatic dependent launch (sm_90 on; no-ops before). A grid lets the
// next one on its stream be scheduled once each of its CTAs has called
// launch_dependents (or exited); the next one's wait returns when this grid
// has completed and its memory is visible.
__device__ __forceinline__ void grid_dependents_launch() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void grid_dependency_wait() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

}  // namespace flashjit
