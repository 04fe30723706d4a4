// KV-cache append: writes this step's keys and values ([batch][seqlen_new]
// [heads_kv][dim]) into the cache at each sequence's positions
// seqused_k[b] .. seqused_k[b] + seqlen_new - 1, through the page table when
// the cache is paged (cfg::kPageSize > 0) or into batch entry
// cache_batch_idx[b] when given, before the forward kernel reads
// the cache on the same stream (flash_attn_with_kvcache's k/v arguments).
//
// A packed batch (cu_seqlens_k_new, FlashAttention-3's) appends rows
// cu_seqlens_k_new[b] .. [b + 1] of its packed new keys for sequence b, into
// its pages or, contiguous, at row cu_seqlens_k[b] + position of the packed
// cache.
//
// Tiling. One CTA per (new row, sequence), or per packed new row; its
// threads walk the row's heads_kv x dim 16-byte vectors of K, then of V.
// The traffic is the new rows alone (a decode step appends one per
// sequence), so a plain copy suffices.
//
// Bounds. The positions come from device data the host cannot check: a
// negative count, a position at or past the cache's capacity (seqlen_k), or
// a page index (cache_batch_idx entry) outside [0, num_pages)
// ([0, cache_batches)) writes nothing, so no content makes the kernel write
// outside the cache.
#pragma once

#include "common/fwd_params.cuh"
#include "common/ptx.cuh"
#include "common/types.cuh"

namespace flashjit {
namespace kv_append {

constexpr int kThreads = 128;
// Bytes of a cache element (2, or 1 for e4m3) and of a new key's (Q's type:
// 16-bit new keys into an e4m3 cache are quantized with its scale), and the
// elements of a 16-byte vector of the new keys.
constexpr int kBytes = static_cast<int>(sizeof(cfg::Element));
constexpr int kNewBytes = static_cast<int>(sizeof(cfg::QElement));
constexpr bool kQuantizes = kNewBytes != kBytes;
constexpr int kVectorElements = 16 / kNewBytes;
static_assert(cfg::kHeadDimQK % kVectorElements == 0 && cfg::kHeadDimV % kVectorElements == 0,
              "rows of whole 16-byte vectors");

// Copies one [heads_kv][dim] row in 16-byte vectors, or quantizes it
// (8 16-bit values -> 8 e4m3 bytes) with each head's scale (`scale` and
// `scale_head_stride`).
template <int kDim, class E = cfg::QElement>
__device__ __forceinline__ void copy_row(const unsigned char *src, long long src_head_stride,
                                         unsigned char *dst, long long dst_head_stride,
                                         int heads, const float *scale,
                                         long long scale_head_stride) {
  constexpr int kVectors = kDim / kVectorElements;
  for (int i = threadIdx.x; i < heads * kVectors; i += kThreads) {
    const int head = i / kVectors, vec = i % kVectors;
    const U32x4 value = *reinterpret_cast<const U32x4 *>(
        src + kNewBytes * (head * src_head_stride + kVectorElements * vec));
    unsigned char *out = dst + kBytes * (head * dst_head_stride + kVectorElements * vec);
    if constexpr (kQuantizes) {
      using NewOps = ElementOps<E>;
      const float s = scale[head * scale_head_stride];
      const u32 w[4] = {value.x, value.y, value.z, value.w};
      float x[8];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        x[2 * j] = __fdiv_rn(NewOps::to_float(static_cast<u16>(w[j] & 0xffffu)), s);
        x[2 * j + 1] = __fdiv_rn(NewOps::to_float(static_cast<u16>(w[j] >> 16)), s);
      }
      *reinterpret_cast<U32x2 *>(out) = U32x2{pack_e4m3x4(x[0], x[1], x[2], x[3]),
                                               pack_e4m3x4(x[4], x[5], x[6], x[7])};
    } else {
      *reinterpret_cast<U32x4 *>(out) = value;
    }
  }
}

}  // namespace kv_append
}  // namespace flashjit

extern "C" __global__ void __launch_bounds__(flashjit::kv_append::kThreads)
    flashjit_kv_append(const flashjit::KvAppendParams p) {
  using namespace flashjit;
  // A programmatic dependent of the grid before (which may still read the
  // cache) and the forward's primary: the forward may be scheduled now and
  // waits for this grid's completion before it reads the cache.
  grid_dependents_launch();
  grid_dependency_wait();
  int row = blockIdx.x;    // of the new keys
  int batch = blockIdx.y;
  long long src_row = row;  // within the sequence's new keys, or packed
  if constexpr (cfg::kVarlen) {
    // Packed new keys (the host passes cu_seqlens_k_new with them): one CTA
    // per row, its sequence the last whose first row it has reached (a
    // binary search; device offsets need not be sorted, so the owner is
    // checked after).
    int lo = 0, hi = p.batch - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (p.cu_seqlens_k_new[mid] <= row) lo = mid; else hi = mid - 1;
    }
    batch = lo;
    const int n0 = p.cu_seqlens_k_new[batch];
    const int n1 = p.cu_seqlens_k_new[batch + 1];
    if (n0 < 0 || row < n0 || row >= n1 || n1 > p.total_new) return;
    row -= n0;
  }
  const int first = p.seqused_k[batch];
  const long long pos = static_cast<long long>(first) + row;
  if (first < 0 || pos >= p.seqlen_k) return;
  long long outer = batch;  // the cache's batch, or the page
  long long cache_row = pos;
  if (cfg::kVarlen && cfg::kPageSize == 0) {  // a packed contiguous cache
    const long long k0 = p.cu_seqlens_k[batch];
    if (k0 < 0 || k0 + pos >= p.total_k) return;
    outer = 0;
    cache_row = k0 + pos;
  }
  if (!cfg::kVarlen && cfg::kPageSize == 0 && p.cache_batch_idx) {  // a pool entry
    outer = p.cache_batch_idx[batch];
    if (outer < 0 || outer >= p.cache_batches) return;
  }
  if constexpr (cfg::kPageSize > 0) {
    const int page = p.page_table[batch * p.page_table_stride + pos / cfg::kPageSize];
    if (page < 0 || page >= p.num_pages) return;
    outer = page;
    cache_row = pos % cfg::kPageSize;
  }
  const auto *k_src =
      static_cast<const unsigned char *>(p.k_new) +
      kv_append::kNewBytes * (batch * p.k_new_batch_stride + src_row * p.k_new_row_stride);
  const auto *v_src =
      static_cast<const unsigned char *>(p.v_new) +
      kv_append::kNewBytes * (batch * p.v_new_batch_stride + src_row * p.v_new_row_stride);
  auto *k_dst = static_cast<unsigned char *>(p.k_cache) +
                kv_append::kBytes * (outer * p.k_batch_stride + cache_row * p.k_row_stride);
  auto *v_dst = static_cast<unsigned char *>(p.v_cache) +
                kv_append::kBytes * (outer * p.v_batch_stride + cache_row * p.v_row_stride);
  // The sequence's scales (an e4m3 cache under 16-bit new keys).
  const long long at = batch * p.scale_batch_stride;
  kv_append::copy_row<cfg::kHeadDimQK>(k_src, p.k_new_head_stride, k_dst, p.k_head_stride,
                                       p.heads_kv, p.k_scale + (kv_append::kQuantizes ? at : 0),
                                       p.scale_head_stride);
  kv_append::copy_row<cfg::kHeadDimV>(v_src, p.v_new_head_stride, v_dst, p.v_head_stride,
                                      p.heads_kv, p.v_scale + (kv_append::kQuantizes ? at : 0),
                                      p.scale_head_stride);
}
