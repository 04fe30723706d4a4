// The sequence-info part of the forward and backward kernels: how many
// queries and keys a sequence has, and where its rows lie in Q/O (dQ, dO),
// K/V (dK, dV), the LSE and the per-row workspaces (the forward's split
// partials, the backward's D and dQ accumulator). Over either parameter
// block (FwdParams, BwdParams: both carry the fields it reads); the KV cache
// is the forward's alone.
//
// Dense (kVarlen false, kSeqUsedK false, kPageSize 0): every sequence has
// seqlen_q queries and seqlen_k keys at [batch][row] of the tensors, and its
// LSE rows are [batch][head][row].
// kVarlen: the batch is packed (flash_attn_varlen_func): Q/O are
// [total_q][heads][dim], K/V [total_k][heads_kv][dim], and sequence b owns
// rows cu_seqlens_q[b] .. cu_seqlens_q[b+1] of Q (likewise of K); its LSE
// rows are [head][total_q] (FlashAttention's varlen layout). The offsets are
// device data: each is clamped to [0, total] and each length to the
// problem's maximum (seqlen_q, seqlen_k), so no content makes a tile reach
// outside the tensors; a sequence longer than the maximum is cut there.
// kVarlen and kSeqUsedK over contiguous K/V (both passes): sequence b's
// first seqused_k[b] keys (plus any appended ones) of its cu_seqlens_k rows;
// the sm90 kernels read whole tiles there, so the rows past the count must
// hold finite values (a P of 0 times a NaN in V is NaN).
// kSeqUsedK: sequence b has min(seqused_k[b] + seqlen_new, seqlen_k) keys
// (a KV cache's cache_seqlens plus this step's appended keys; clamped, so
// no device value can make a tile reach past the cache), and masks align
// bottom-right against that count.
// A contiguous cache (kSeqUsedK, kPageSize 0, not kVarlen) may place
// sequence b elsewhere: at K/V batch entry cache_batch_idx[b] (an entry
// outside [0, cache_batches) gives it no keys) and from row cache_leftpad[b]
// (clamped to [0, its end]); its keys are then rows cache_leftpad[b] ..
// min(seqused_k[b] + seqlen_new, seqlen_k) - 1 (flash_attn_with_kvcache's cache_batch_idx
// and cache_leftpad), still aligned bottom-right at their end.
// kPageSize > 0: K/V are [num_pages][kPageSize][heads_kv][dim] and key n of
// sequence b is row n % kPageSize of page page_table[b][n / kPageSize].
// A K/V tile of kBlockN keys is then read as kBoxesPerTile TMA boxes of
// kBoxRows rows, the largest run that never crosses a page (gcd of the page
// size and the tile). A box past the sequence's keys, or whose page index
// lies outside [0, num_pages), is given the page num_pages: TMA fills a box
// outside the tensor with zeros, so no table content can make the kernel
// read outside the cache. Rows of a sequence's last page past its key count
// are read (the mask hides their scores, and their V rows meet P = 0): the
// cache must hold finite values there, as a zero-initialised cache does.
// kVarlen with a KV cache (the serving call: flash_attn_varlen_func with
// seqused_k and block_table): the queries are packed as above; sequence b
// has seqused_k[b] keys (kSeqUsedK; plus its packed new keys when the call
// appends some) or, without it, cu_seqlens_k[b + 1] - cu_seqlens_k[b];
// contiguous K/V start at row cu_seqlens_k[b] (the count then clamped to
// the sequence's own rows, up to cu_seqlens_k[b + 1]), paged K/V at the
// sequence's page-table row. Every count is clamped to
// [0, seqlen_k] as above.
#pragma once

#include "common/fwd_sm90_layout.cuh"
#include "common/types.cuh"

namespace flashjit {

// Sequence b's first query row and query count in a packed batch, clamped as
// described above (the scheduler counts a sequence's work tiles with it, so
// its count and SequenceInfo's always agree); with seqused_q, only its first
// seqused_q[b] queries (FlashAttention-3's seqused_q: the main kernels
// neither read nor write the rows past them, in either pass; the split-KV
// combine writes unspecified values there).
struct PackedQueries {
  int row0, count;
};
template <class Params>
__device__ __forceinline__ PackedQueries packed_queries(const Params &p, int b) {
  auto clamp = [](int x, int lo, int hi) { return x < lo ? lo : x > hi ? hi : x; };
  const int q0 = clamp(p.cu_seqlens_q[b], 0, p.total_q);
  const int q1 = clamp(p.cu_seqlens_q[b + 1], q0, p.total_q);
  int count = q1 - q0 < p.seqlen_q ? q1 - q0 : p.seqlen_q;
  if (p.seqused_q) count = clamp(p.seqused_q[b], 0, count);
  return {q0, count};
}

template <bool kVarlen, bool kSeqUsedK, int kPageSize, int kBlockN>
struct SequenceInfo {
  static constexpr bool kPaged = kPageSize > 0;
  // Pages that are not whole 16-row runs are gathered row by row (the sm80
  // family only: TMA boxes need them).
  static constexpr bool kGathered = kPaged && kPageSize % 16 != 0;
  static constexpr int kBoxRows = kGathered ? 1 : kv_box_rows(kPageSize, kBlockN);
  static constexpr int kBoxesPerTile = kBlockN / kBoxRows;
  static_assert(kPageSize >= 0 && kPageSize <= 512, "page size: 0 (contiguous) or 1 to 512 rows");

  int seqlen_q;   // this sequence's queries
  int seqlen_k;   // this sequence's keys
  i64 offset;     // bottom-right alignment: query row i lines up with key i + offset
  i64 q_row0;     // its first row of Q and O (varlen), else 0
  i64 k_row0;     // its first row of K and V (varlen), else 0
  int batch;      // its index among the sequences
  int outer;      // the batch index of Q/O (and K/V): 0 when packed (varlen)
  int kv_outer;   // the batch index of K/V: outer, or the cache's entry

  template <class Params>
  __device__ __forceinline__ SequenceInfo(const Params &p, int b) : batch(b) {
    auto clamp = [](int x, int lo, int hi) { return x < lo ? lo : x > hi ? hi : x; };
    if constexpr (kVarlen) {
      const PackedQueries queries = packed_queries(p, b);
      q_row0 = queries.row0;
      seqlen_q = queries.count;
      outer = 0;
      int count;
      // Keys appended this call (cu_seqlens_k_new) count as cached ones.
      int appended = 0;
      if constexpr (kSeqUsedK && Params::kKvCache) {
        // As many as the append kernel writes: none where it writes none
        // (offsets outside the new keys, a negative count).
        if (p.cu_seqlens_k_new) {
          const int n0 = p.cu_seqlens_k_new[b], n1 = p.cu_seqlens_k_new[b + 1];
          if (n0 >= 0 && n1 <= p.total_new && p.seqused_k[b] >= 0) appended = n1 > n0 ? n1 - n0 : 0;
        }
      }
      if constexpr (kPaged) {  // the keys are the sequence's pages
        k_row0 = 0;
        if constexpr (kSeqUsedK)
          count = clamp(p.seqused_k[b], 0, p.seqlen_k) + appended;
        else
          count = p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
        count = clamp(count, 0, p.seqlen_k);
      } else {
        const int k0 = clamp(p.cu_seqlens_k[b], 0, p.total_k);
        k_row0 = k0;
        // With key counts, both passes stop at the sequence's own rows
        // (cu_seqlens_k[b + 1]): the backward writes its dK and dV rows, and
        // no two sequences may share any; the forward so computes the
        // function the backward differentiates.
        const int own = clamp(p.cu_seqlens_k[b + 1], k0, p.total_k) - k0;
        if constexpr (kSeqUsedK && Params::kKvCache)
          count = clamp(clamp(p.seqused_k[b], 0, own) + appended, 0, own);
        else if constexpr (kSeqUsedK)
          count = clamp(p.seqused_k[b], 0, own);
        else
          count = own;
      }
      seqlen_k = count < p.seqlen_k ? count : p.seqlen_k;
      kv_outer = 0;
    } else {
      q_row0 = k_row0 = 0;
      seqlen_q = p.seqlen_q;
      outer = kv_outer = b;
      if constexpr (kSeqUsedK) {
        const int end = clamp(p.seqused_k[b] + p.seqlen_new, 0, p.seqlen_k);
        if constexpr (!kPaged) {
          int start = 0;
          if (p.cache_leftpad) start = clamp(p.cache_leftpad[b], 0, end);
          k_row0 = start;
          seqlen_k = end - start;
          if (p.cache_batch_idx) {
            kv_outer = p.cache_batch_idx[b];
            if (kv_outer < 0 || kv_outer >= p.cache_batches) kv_outer = 0, seqlen_k = 0;
          }
        } else {
          seqlen_k = end;
        }
      } else {
        seqlen_k = p.seqlen_k;
      }
    }
    offset = static_cast<i64>(seqlen_k) - seqlen_q;
  }

  // Rows of the LSE (and of each split's slice of the workspace): one per
  // (sequence, head, query).
  template <class Params>
  __device__ __forceinline__ static i64 lse_rows(const Params &p) {
    if constexpr (kVarlen) return static_cast<i64>(p.heads_q) * p.total_q;
    return static_cast<i64>(p.batch) * p.heads_q * p.seqlen_q;
  }
  // The LSE row of query `row` (of this sequence) at `head`.
  template <class Params>
  __device__ __forceinline__ i64 lse_row(const Params &p, int head, int row) const {
    if constexpr (kVarlen) return static_cast<i64>(head) * p.total_q + q_row0 + row;
    return (static_cast<i64>(batch) * p.heads_q + head) * p.seqlen_q + row;
  }
  // The row of query `row` at `head` in the backward's workspaces (D and the
  // dQ accumulator; as many rows as the LSE's). Dense: the LSE's. Packed:
  // the sequence's rows are one block, head-major within, so a sequence's
  // head is contiguous as in a dense batch, and equal lengths lay the
  // workspaces out as the dense kernel does. The LSE's [head][total_q]
  // instead puts a sequence's heads total_q rows apart: with the
  // accumulator's atomics in that layout the backward over 4 x 8192 packed
  // took 10% more cycles than the dense one (ncu, H200; same instructions
  // and DRAM bytes).
  template <class Params>
  __device__ __forceinline__ i64 workspace_row(const Params &p, int head, int row) const {
    if constexpr (kVarlen)
      return q_row0 * p.heads_q + static_cast<i64>(head) * seqlen_q + row;
    return lse_row(p, head, row);
  }

  // The page of box `box` of the key tile at n0 (paged only), as read by
  // lane `box` of the producer warp; num_pages where nothing may be read.
  template <class Params>
  __device__ __forceinline__ int box_page(const Params &p, int n0, int box) const {
    const int n = n0 + box * kBoxRows;
    if (box >= kBoxesPerTile || n >= seqlen_k) return p.num_pages;
    const int page = p.page_table[batch * p.page_table_stride + n / kPageSize];
    return page >= 0 && page < p.num_pages ? page : p.num_pages;
  }

  // The row coordinate of box `box` of the key tile at n0: the row within
  // the page (paged), or within the K/V tensor's batch entry.
  __device__ __forceinline__ i64 box_row(int n0, int box) const {
    if constexpr (kPaged)
      return (n0 + box * kBoxRows) % kPageSize;
    else
      return k_row0 + n0;
  }
};

}  // namespace flashjit
