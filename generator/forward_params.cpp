#include "generator/forward_params.h"

#include <cstring>

#include "generator/kernel_spec.h"

namespace flashjit {

namespace {
// Beyond any seqlen (int32): keeps `row + offset + bound` from overflowing.
constexpr int kUnbounded = 1 << 30;
constexpr float kLog2e = 1.4426950408889634f;

int window_bound(int64_t bound) { return bound < 0 ? kUnbounded : static_cast<int>(bound); }
}  // namespace

FwdParams make_forward_params(const Problem &problem, const ForwardArgs &args) {
  FwdParams p{};
  p.q = args.q;
  p.k = args.k;
  p.v = args.v;
  p.o = args.o;
  p.lse = args.lse;
  set_strides(args.q_strides, p.q_batch_stride, p.q_row_stride, p.q_head_stride);
  set_strides(args.k_strides, p.k_batch_stride, p.k_row_stride, p.k_head_stride);
  set_strides(args.v_strides, p.v_batch_stride, p.v_row_stride, p.v_head_stride);
  set_strides(args.o_strides, p.o_batch_stride, p.o_row_stride, p.o_head_stride);
  p.seqlen_q = static_cast<int>(problem.seqlen_q);
  p.seqlen_k = static_cast<int>(problem.seqlen_k);
  p.heads_q = static_cast<int>(problem.heads_q);
  p.heads_per_kv = static_cast<int>(problem.heads_q / problem.heads_kv);
  p.batch = static_cast<int>(problem.batch);
  switch (normalized_mask(problem)) {
    case MaskKind::none: p.window_left = p.window_right = kUnbounded; break;
    case MaskKind::causal: p.window_left = kUnbounded; p.window_right = 0; break;
    case MaskKind::window:
      p.window_left = window_bound(problem.window_left);
      p.window_right = window_bound(problem.window_right);
      break;
  }
  p.attention_chunk = problem.attention_chunk;
  p.num_splits = 1;  // the launch sets the split-KV workspace and count
  p.sinks = args.sinks;
  p.q_descale = args.descale.q;
  p.k_descale = args.descale.k;
  p.v_descale = args.descale.v;
  p.descale_batch_stride = args.descale.batch_stride;
  p.descale_head_stride = args.descale.head_stride;
  // The modifiers' aux values (checked against their struct by the launch).
  if (args.aux && args.aux_bytes > 0)
    std::memcpy(p.aux, args.aux, args.aux_bytes < sizeof(p.aux) ? args.aux_bytes : sizeof(p.aux));
  if (problem.seqused_k) {
    p.seqused_k = args.cache.cache_seqlens;
    p.seqlen_new = static_cast<int>(args.cache.k_new ? args.cache.seqlen_new : 0);
    p.cache_batch_idx = args.cache.cache_batch_idx;
    p.cache_batches = static_cast<int>(args.cache.cache_batches);
    p.cache_leftpad = args.cache.cache_leftpad;
    if (args.cache.cu_seqlens_k_new) {
      p.cu_seqlens_k_new = args.cache.cu_seqlens_k_new;
      p.total_new = static_cast<int>(args.cache.seqlen_new);
    }
  }
  if (problem.page_size > 0) {
    p.page_table = args.cache.page_table;
    p.page_table_stride = args.cache.page_table_stride;
    p.num_pages = static_cast<int>(args.cache.num_pages);
  }
  if (problem.varlen) {
    p.cu_seqlens_q = args.varlen.cu_seqlens_q;
    p.seqused_q = args.varlen.seqused_q;
    p.cu_seqlens_k = args.varlen.cu_seqlens_k;
    p.total_q = static_cast<int>(args.varlen.total_q);
    p.total_k = static_cast<int>(args.varlen.total_k);
  }
  float scale = problem.effective_scale();
  if (problem.softcap != 0.f) {
    // softcap * tanh(scale * s / softcap): the kernel applies score_scale
    // before tanh and folds softcap into the base-2 softmax scale.
    p.score_scale = scale / problem.softcap;
    p.softmax_scale_log2 = problem.softcap * kLog2e;
  } else {
    p.score_scale = 1.f;
    p.softmax_scale_log2 = scale * kLog2e;
  }
  return p;
}

KvAppendParams make_kv_append_params(const Problem &problem, const ForwardArgs &args) {
  const KvCacheArgs &c = args.cache;
  KvAppendParams p{};
  p.k_new = c.k_new;
  p.v_new = c.v_new;
  p.k_cache = const_cast<void *>(args.k);  // the cache is the forward's K/V input
  p.v_cache = const_cast<void *>(args.v);
  set_strides(c.k_new_strides, p.k_new_batch_stride, p.k_new_row_stride, p.k_new_head_stride);
  set_strides(c.v_new_strides, p.v_new_batch_stride, p.v_new_row_stride, p.v_new_head_stride);
  set_strides(args.k_strides, p.k_batch_stride, p.k_row_stride, p.k_head_stride);
  set_strides(args.v_strides, p.v_batch_stride, p.v_row_stride, p.v_head_stride);
  p.seqused_k = c.cache_seqlens;
  p.page_table = c.page_table;
  p.page_table_stride = c.page_table_stride;
  p.num_pages = static_cast<int>(c.num_pages);
  p.seqlen_new = static_cast<int>(c.seqlen_new);
  p.seqlen_k = static_cast<int>(problem.seqlen_k);
  p.heads_kv = static_cast<int>(problem.heads_kv);
  p.batch = static_cast<int>(problem.batch);
  p.cache_batch_idx = c.cache_batch_idx;
  p.cache_batches = static_cast<int>(c.cache_batches);
  if (c.cu_seqlens_k_new) {
    // Packed new keys are one block of rows: a sequence's are found by its
    // offsets, never by a batch stride (a one-entry tensor's is arbitrary).
    p.k_new_batch_stride = p.v_new_batch_stride = 0;
    p.cu_seqlens_k_new = c.cu_seqlens_k_new;
    p.cu_seqlens_k = args.varlen.cu_seqlens_k;
    p.total_new = static_cast<int>(c.seqlen_new);
    p.total_k = static_cast<int>(args.varlen.total_k);
  }
  p.k_scale = args.descale.k;
  p.v_scale = args.descale.v;
  p.scale_batch_stride = args.descale.batch_stride;
  p.scale_head_stride = args.descale.head_stride;
  return p;
}

}  // namespace flashjit
