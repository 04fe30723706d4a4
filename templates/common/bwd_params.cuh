// The backward kernels' parameter block, shared byte-for-byte by the host
// (runtime/) and the device (bwd_sm80.cuh). Fixed-width builtin types only.
#pragma once

namespace flashjit {

struct BwdParams {
  static constexpr bool kKvCache = false;  // as FwdParams (no cache fields here)
  const void *q;
  const void *k;
  const void *v;
  const void *o;
  const void *dout;
  const float *lse;  // the forward's [batch, heads_q, seqlen_q], natural log
  void *dq;
  void *dk;
  void *dv;
  // Workspace: fp32 dQ accumulator [batch, heads_q, seqlen_q, head_dim_qk]
  // and D = rowsum(dO * O) [batch, heads_q, seqlen_q] (varlen: heads_q *
  // total_q rows, each sequence's a block: SequenceInfo::workspace_row).
  float *dq_accum;
  float *dsum;
  // The deterministic sm90 backward's dQ order: per accumulator row (a query
  // tile's first row), how many key blocks have added their dQ to its tile
  // (zeroed by the preprocess kernel). After D in the workspace.
  int *dq_semaphore;
  // Learned attention sinks (Modifiers::kSinks): the forward's logits and
  // their gradient, fp32 [heads_q] (written by flashjit_bwd_sink_grad).
  const float *sinks;
  float *dsinks;

  // Element strides of [batch, seqlen, heads, dim] tensors.
  long long q_batch_stride, q_row_stride, q_head_stride;
  long long k_batch_stride, k_row_stride, k_head_stride;
  long long v_batch_stride, v_row_stride, v_head_stride;
  long long o_batch_stride, o_row_stride, o_head_stride;
  long long do_batch_stride, do_row_stride, do_head_stride;
  long long dq_batch_stride, dq_row_stride, dq_head_stride;
  long long dk_batch_stride, dk_row_stride, dk_head_stride;
  long long dv_batch_stride, dv_row_stride, dv_head_stride;

  int seqlen_q;
  int seqlen_k;
  int heads_q;
  int heads_per_kv;
  int window_left;   // as FwdParams: a huge value when unbounded
  int window_right;

  float score_scale;         // as FwdParams
  float softmax_scale_log2;  // as FwdParams
  float softmax_scale;       // d(score)/d(q.k) outside the softcap: scales dQ, dK

  // A packed varlen batch (kernels compiled with kVarlen), as FwdParams:
  // Q/O/dO/dQ [total_q][heads_q][dim], K/V/dK/dV [total_k][heads_kv][dim],
  // sequence b owning rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1]; the LSE
  // has [heads_q][total_q] rows, D and the dQ accumulator as many
  // (common/sequence.cuh).
  int batch;
  const int *cu_seqlens_q;
  const int *cu_seqlens_k;
  int total_q;
  int total_k;

  // The sm90 kernel's dispatch order (BwdSm90Traits::dispatch_order): its
  // one-dimensional grid runs in sections of this many (KV head, batch)
  // pairs, key blocks outer within a section, so that under a mask the
  // heaviest CTAs (the first key blocks) of a section start first (unless
  // shortest_first, below); 1 is each pair's key blocks in turn.
  int dispatch_section;
  // The sm90 kernel's work: work_items CTA-sized items (key block, KV head,
  // batch) in the order above, run by a grid of at most that many CTAs.
  // Each CTA takes item blockIdx.x first, then gridDim.x plus the count it
  // fetches from work_counter (zeroed by the preprocess kernel), until the
  // items run out: the hardware's dispatch order, in CTAs that stay
  // resident, so that one item's epilogue overlaps the next one's loads.
  int work_items;
  int *work_counter;

  // The block map of a caller's mask_mod (the sm90 kernel with
  // Modifiers::kMask; bwd_block_map.cuh builds it before each call), laid
  // out as FwdParams::block_map with key blocks as the rows: per (batch, KV
  // head, key block of kBlockN) the query tiles of kBlockM rows that any of
  // its keys is seen by from any query head of the group, each flagged
  // (kBlockMapFull) where mask_mod shows all of the tile to every head.
  // block_kinds: the classification's [row][query tile] bytes.
  int *block_map;
  unsigned char *block_kinds;
  long long block_map_batch_stride, block_map_head_stride;
  int block_map_row_stride;  // 1 + query tiles

  // The sm90 kernel's dispatch order again, read by its deterministic
  // kernel only: a section's key blocks last first (under a causal mask
  // the shortest first), each walking its query tiles first first, and a
  // tile's dQ taking its key blocks' adds last first; 0: first first,
  // tiles last first, adds first first. (Here, in the padding before aux,
  // so that no other field moves: the kernels that never read it keep
  // their machine code.)
  int shortest_first;

  // The caller's modifiers' extra inputs, as FwdParams::aux.
  unsigned long long aux[8];

  int attention_chunk;  // as FwdParams (last, as there)
  const int *seqused_q;  // as FwdParams (null: every query of cu_seqlens_q)
  // A packed batch's key counts (kernels compiled with kSeqUsedK): sequence
  // b's first seqused_k[b] keys, cut at its cu_seqlens_k length.
  const int *seqused_k;
};

}  // namespace flashjit
