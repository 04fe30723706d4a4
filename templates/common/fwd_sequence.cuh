// The forward's sequence-info part for keys: how many keys a sequence has
// and where a run of its key rows lies in the K/V tensors.
//
// Dense (kSeqUsedK false, kPageSize 0): every sequence has seqlen_k keys at
// [batch][row] of K/V: what every kernel did before KV caches.
// kSeqUsedK: sequence b has min(seqused_k[b] + seqlen_new, seqlen_k) keys
// (a KV cache's cache_seqlens plus this step's appended keys; clamped, so
// no device value can make a tile reach past the cache), and masks align
// bottom-right against that count.
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
#pragma once

#include "common/fwd_params.cuh"
#include "common/fwd_sm90_layout.cuh"
#include "common/types.cuh"

namespace flashjit {

template <bool kSeqUsedK, int kPageSize, int kBlockN>
struct FwdKeySequence {
  static constexpr bool kPaged = kPageSize > 0;
  static constexpr int kBoxRows = kv_box_rows(kPageSize, kBlockN);
  static constexpr int kBoxesPerTile = kBlockN / kBoxRows;
  static_assert(!kPaged || kPageSize % 16 == 0, "page size: a multiple of 16 rows");
  static_assert(kBoxesPerTile <= 32, "one lane of the producer warp per box");

  int seqlen_k;  // this sequence's keys
  i64 offset;    // bottom-right alignment: query row i lines up with key i + offset

  __device__ __forceinline__ FwdKeySequence(const FwdParams &p, int batch) {
    if constexpr (kSeqUsedK) {
      const int used = p.seqused_k[batch] + p.seqlen_new;
      seqlen_k = used < 0 ? 0 : used < p.seqlen_k ? used : p.seqlen_k;
    } else {
      seqlen_k = p.seqlen_k;
    }
    offset = static_cast<i64>(seqlen_k) - p.seqlen_q;
  }

  // The page of box `box` of the key tile at n0 (paged only), as read by
  // lane `box` of the producer warp; num_pages where nothing may be read.
  __device__ __forceinline__ int box_page(const FwdParams &p, int batch, int n0, int box) const {
    const int n = n0 + box * kBoxRows;
    if (box >= kBoxesPerTile || n >= seqlen_k) return p.num_pages;
    const int page = p.page_table[batch * p.page_table_stride + n / kPageSize];
    return page >= 0 && page < p.num_pages ? page : p.num_pages;
  }

  // The TMA coordinates (row, outermost index) of box `box` of the key tile
  // at n0: the row within the sequence and its batch, or the row within the
  // page and the page (`page`, from box_page).
  __device__ __forceinline__ int box_row(int n0, int box) const {
    if constexpr (kPaged)
      return (n0 + box * kBoxRows) % kPageSize;
    else
      return n0;
  }
};

}  // namespace flashjit
