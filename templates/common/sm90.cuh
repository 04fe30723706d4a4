// PTX wrappers for the Hopper (sm_90a) kernels: mbarriers, TMA tensor loads,
// warpgroup MMA bookkeeping and descriptors, register reallocation, named
// barriers. Everything takes shared-memory addresses as 32-bit values (the
// `smem_address` of ptx.cuh), as the instructions do.
//
// NVRTC compiles wgmma and setmaxnreg only for sm_90a. Its in-process
// assembler was seen to crash on a wgmma whose descriptors were compile-time
// constants, so descriptors are always built from a run-time shared address.
#pragma once

#include "common/ptx.cuh"
#include "common/types.cuh"

namespace flashjit {

using u64 = unsigned long long;

// The CUtensorMap the host encodes with cuTensorMapEncodeTiled: 128 opaque
// bytes, 64-byte aligned, passed as a __grid_constant__ kernel parameter so
// TMA reads it from parameter space (no header: cuda.h is host-only here).
struct alignas(64) TmaDescriptor {
  u64 opaque[16];
};

// ---- mbarrier ----------------------------------------------------------------

__device__ __forceinline__ void mbarrier_init(u32 bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// Makes initialised barriers visible to the async proxy (TMA) and to the
// other threads, before the first arrive or complete_tx.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// One arrival that also announces `bytes` of transactions (TMA) the phase
// must see before it completes.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(u32 bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbarrier_arrive(u32 bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// Blocks until the phase of parity `parity` has completed. try_wait suspends
// the thread for a system-dependent time before it returns false, so the loop
// does not spin hot.
__device__ __forceinline__ void mbarrier_wait(u32 bar, u32 parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// ---- TMA ---------------------------------------------------------------------

__device__ __forceinline__ void tma_prefetch_descriptor(const TmaDescriptor *desc) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<u64>(desc)) : "memory");
}

// Loads the box at coordinates (c0 innermost .. c3) of a 4-d tensor map into
// shared memory at `dst`, completing `bytes` of transactions on `bar`.
// Elements outside the tensor are written as zeros (and still counted).
__device__ __forceinline__ void tma_load_4d(u32 dst, const TmaDescriptor *desc, u32 bar, int c0,
                                            int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<u64>(desc)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}

__device__ __forceinline__ void tma_load_5d(u32 dst, const TmaDescriptor *desc, u32 bar, int c0,
                                            int c1, int c2, int c3, int c4) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5, %6}], [%7];\n" ::"r"(dst),
      "l"(reinterpret_cast<u64>(desc)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(bar)
      : "memory");
}

__device__ __forceinline__ void tma_load_3d(u32 dst, const TmaDescriptor *desc, u32 bar, int c0,
                                            int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<u64>(desc)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}

// Adds the fp32 box at `src` (laid out as the map's box, swizzled as the map
// says) into a 2-d tensor map's box at (c0 innermost, c1): one reduction
// the TMA unit performs in L2, so no thread issues per-element atomics.
// Elements outside the tensor are skipped. Completes in the thread's bulk
// async-group (tma_commit_group, tma_wait_group_read).
__device__ __forceinline__ void tma_reduce_add_2d(const TmaDescriptor *desc, u32 src, int c0,
                                                  int c1) {
  asm volatile(
      "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group"
      " [%0, {%1, %2}], [%3];\n" ::"l"(reinterpret_cast<u64>(desc)),
      "r"(c0), "r"(c1), "r"(src)
      : "memory");
}

__device__ __forceinline__ void tma_commit_group() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

// Waits until at most N of this thread's bulk groups still read their shared
// memory sources (the buffers of the others may be written again).
template <int N>
__device__ __forceinline__ void tma_wait_group_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}

// Waits until at most N of this thread's bulk groups are incomplete (their
// writes performed).
template <int N>
__device__ __forceinline__ void tma_wait_group() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}

// ---- warpgroup MMA -------------------------------------------------------------

// Orders this thread's register and shared-memory accesses before the next
// wgmma.mma_async that reads or writes them.
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

// Waits until at most kPending committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// Pins accumulator registers in place around asynchronous MMAs: the empty asm
// "reads and writes" each one, so the compiler neither moves nor reuses them
// between the issue and the wait.
template <int N>
__device__ __forceinline__ void wgmma_fence_operands(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int N>
__device__ __forceinline__ void wgmma_fence_operands(u32 (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(d[i])::"memory");
}

// Shared-memory matrix descriptor for a 128-byte-swizzled operand:
//   bits  0-13 start address >> 4     bits 16-29 leading byte offset >> 4
//   bits 32-45 stride byte offset >> 4 bits 49-51 base offset (0: the tile
//   is 1024-byte aligned)               bits 62-63 swizzle (1 = 128 B)
// K-major (rows of 64 elements = 128 B, 8-row atoms of 1024 B): SBO = 1024
// between 8-row groups, LBO unused (1). MN-major (the transposed V of P V):
// LBO = bytes between 64-element column blocks, SBO = 1024 between 8-row
// (k) groups. A k-step inside a 128-byte row moves the start address by its
// unswizzled byte offset: the hardware applies the swizzle to the address.
// The same over rows of kRowBytes (128, or 64: 8-row atoms of 512 bytes,
// swizzle 2).
template <int kRowBytes>
__device__ __forceinline__ u64 smem_descriptor_swizzled(u32 addr, u32 lbo_bytes, u32 sbo_bytes) {
  static_assert(kRowBytes == 128 || kRowBytes == 64, "128- or 64-byte swizzle rows");
  constexpr u64 kSwizzle = kRowBytes == 128 ? 1 : 2;
  return static_cast<u64>((addr & 0x3ffff) >> 4) | (static_cast<u64>(lbo_bytes >> 4) << 16) |
         (static_cast<u64>(sbo_bytes >> 4) << 32) | (kSwizzle << 62);
}
__device__ __forceinline__ u64 smem_descriptor_sw128(u32 addr, u32 lbo_bytes, u32 sbo_bytes) {
  return smem_descriptor_swizzled<128>(addr, lbo_bytes, sbo_bytes);
}

// ---- registers and barriers --------------------------------------------------

// Moves the warpgroup's per-thread register budget (all its warps execute it).
template <int kRegisters>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

// bar.sync on hardware barrier `id` (0 is __syncthreads) for `threads`
// threads (a multiple of 32); bar.arrive signals without waiting.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// One lane of the calling warp (the same one for every caller): for work a
// single thread issues, like TMA.
__device__ __forceinline__ bool elect_one() {
  u32 pred = 0;
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "elect.sync _|p, %1;\n"
      "selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(pred)
      : "r"(0xffffffffu));
  return pred != 0;
}

}  // namespace flashjit
