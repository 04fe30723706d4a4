// The forward kernel's parameter block: one struct passed by value, shared
// byte-for-byte by the host (runtime/) and the device (fwd_*.cuh). Only
// fixed-width builtin types, so it compiles in both worlds without headers.
#pragma once

namespace flashjit {

struct FwdParams {
  // The forward reads a KV cache's fields (common/sequence.cuh).
  static constexpr bool kKvCache = true;
  const void *q;
  const void *k;
  const void *v;
  void *o;
  float *lse;  // [batch, heads_q, seqlen_q]; may be null

  // Element strides of [batch, seqlen, heads, dim] tensors.
  long long q_batch_stride, q_row_stride, q_head_stride;
  long long k_batch_stride, k_row_stride, k_head_stride;
  long long v_batch_stride, v_row_stride, v_head_stride;
  long long o_batch_stride, o_row_stride, o_head_stride;

  int seqlen_q;
  int seqlen_k;
  int heads_q;
  int heads_per_kv;  // heads_q / heads_kv
  int batch;

  // Window bounds in keys, bottom-right aligned; a huge value when unbounded.
  int window_left;
  int window_right;

  // Scores are scaled by `score_scale` before the optional softcap tanh; the
  // softmax then runs in base 2 with `softmax_scale_log2`.
  float score_scale;
  float softmax_scale_log2;

  // Split-KV (kernels compiled with kSplitKv): the key range of each query
  // block is cut into num_splits shares whose partial O (fp32, normalised by
  // its own row sum) and log-sum-exp go to the workspace, laid out
  // [split][batch][heads_q][seqlen_q] (x head_dim_v for O), for
  // flashjit_fwd_combine to merge. num_splits == 1 writes O and lse directly.
  float *o_partial;
  float *lse_partial;
  int num_splits;

  // A KV cache (kernels compiled with kSeqUsedK and/or kPageSize > 0;
  // common/sequence.cuh). seqused_k: [batch] int32, each sequence's
  // keys before this step's seqlen_new appended ones; its key count is
  // min(seqused_k[b] + seqlen_new, seqlen_k). Paged: K and V are
  // [num_pages][page_size][heads_kv][dim] (the k/v batch strides step over
  // pages) and row b of page_table (page_table_stride int32 apart) holds the
  // pages of sequence b's keys in order. A packed batch (kVarlen) over a
  // cache: seqused_k[b] is sequence b's key count (seqlen_new is 0).
  const int *seqused_k;
  const int *page_table;
  long long page_table_stride;
  int num_pages;
  int seqlen_new;

  // A packed batch (kernels compiled with kVarlen; common/sequence.cuh):
  // Q/O [total_q][heads_q][dim], K/V [total_k][heads_kv][dim] (the batch
  // strides unused), sequence b owning rows cu_seqlens_q[b] ..
  // cu_seqlens_q[b + 1] of Q (int32 [batch + 1]; likewise of K); seqlen_q
  // and seqlen_k are the longest sequence's lengths; the LSE is
  // [heads_q][total_q].
  const int *cu_seqlens_q;
  const int *cu_seqlens_k;
  int total_q;
  int total_k;
  // A packed batch on persistent CTAs (sm90): zero at launch, counts the work
  // tiles taken past each CTA's first (common/fwd_scheduler.cuh); null: the
  // static rotation.
  int *tile_counter;
  // The same CTAs' order of the sequences (fwd_sequence_order.cuh writes it
  // before each call: a permutation of [0, batch)); null: the batch's own.
  int *sequence_order;

  // The block map of a caller's mask_mod (sm90 kernels with
  // Modifiers::kMask; fwd_block_map.cuh builds it before each call): per
  // (batch, head, query block of the kernel's work tiles) a row of
  // block_map_row_stride ints, the count of key tiles that mask_mod and the
  // built-in mask leave any key of, then their indices in order, each with
  // kBlockMapFull set where mask_mod shows every key of the tile. Strides in
  // rows, 0 where the map is shared (Modifiers::kMaskQkOnly).
  // block_kinds: the classification pass's [row][key tile] bytes.
  int *block_map;
  unsigned char *block_kinds;
  long long block_map_batch_stride, block_map_head_stride;
  int block_map_row_stride;  // 1 + key tiles
  // The row runs of partial tiles (kBlockMapRuns; null where the kernel
  // reads none): per map row, kBlockMapRunSlots positions in its list (-1:
  // no such partial tile), and per (map row, slot) one word per query row
  // of the work tile, the run's first key | (last key + 1) << 16, tile-local
  // (0: none).
  int *block_run_positions;
  unsigned *block_runs;

  // Learned attention sinks (Modifiers::kSinks): one fp32 logit per query
  // head, natural units.
  const float *sinks;

  // The extra inputs of a caller's modifiers (common/modifiers.cuh), laid
  // out as the snippet's struct Aux (generator/modifier_source.h: at most
  // 64 bytes, C layout).
  unsigned long long aux[8];

  // e4m3 tensors' fp32 dequantization factors (real = stored * factor), per
  // (batch, KV head) with these element strides (both 0: one per tensor);
  // null where the tensor is 16-bit (flashjit::Fp8Descales).
  const float *q_descale;
  const float *k_descale;
  const float *v_descale;
  long long descale_batch_stride, descale_head_stride;
  // Chunked attention (kernels compiled with a ChunkedMask,
  // common/mask.cuh): the chunk's length in positions.
  int attention_chunk;
  // A contiguous KV cache's per-sequence placement (kSeqUsedK, kPageSize 0;
  // common/sequence.cuh), both optional (null: sequence b is batch entry b,
  // its keys from row 0). cache_batch_idx: [batch] int32, the K/V batch
  // entry of sequence b (of cache_batches; flash_attn_with_kvcache's
  // cache_batch_idx). cache_leftpad: [batch] int32, the row its keys start
  // at (cache_leftpad).
  const int *cache_batch_idx;
  const int *cache_leftpad;
  int cache_batches;
  // A packed batch's optional [batch] int32 query counts (seqused_q):
  // sequence b's first seqused_q[b] queries only (common/sequence.cuh).
  const int *seqused_q;
  // A packed batch appending its new keys (FlashAttention-3's
  // cu_seqlens_k_new; null: none): sequence b's key count is seqused_k[b]
  // plus its cu_seqlens_k_new[b + 1] - cu_seqlens_k_new[b] new keys.
  const int *cu_seqlens_k_new;
  int total_new;
  // (Last: the other kernels' parameter offsets stay as they were.)
};

// The append kernel's block (kv_append.cuh): this step's keys and values,
// [batch][seqlen_new][heads_kv][dim], copied into the cache at each
// sequence's seqused_k before the forward kernel reads it.
struct KvAppendParams {
  const void *k_new;
  const void *v_new;
  void *k_cache;
  void *v_cache;
  long long k_new_batch_stride, k_new_row_stride, k_new_head_stride;
  long long v_new_batch_stride, v_new_row_stride, v_new_head_stride;
  // Of the cache: per sequence, or per page when paged.
  long long k_batch_stride, k_row_stride, k_head_stride;
  long long v_batch_stride, v_row_stride, v_head_stride;
  const int *seqused_k;
  const int *page_table;
  long long page_table_stride;
  int num_pages;
  int seqlen_new;
  int seqlen_k;  // the cache's capacity per sequence (keys)
  int heads_kv;
  int batch;
  // As FwdParams' (null: sequence b appends into batch entry b); an entry
  // outside [0, cache_batches) appends nothing.
  const int *cache_batch_idx;
  int cache_batches;
  // A packed batch's new keys (null: [batch][seqlen_new] ones): k_new/v_new
  // rows [0, total_new), sequence b's from cu_seqlens_k_new[b] to [b + 1];
  // a contiguous cache is then packed too, sequence b's keys from row
  // cu_seqlens_k[b] of its total_k (FwdParams').
  const int *cu_seqlens_k_new;
  const int *cu_seqlens_k;
  int total_new;
  int total_k;
  // An e4m3 cache under 16-bit new keys: their quantization's factors
  // (stored = value / scale), FwdParams' k/v descales and strides.
  const float *k_scale;
  const float *v_scale;
  long long scale_batch_stride, scale_head_stride;
};

}  // namespace flashjit
