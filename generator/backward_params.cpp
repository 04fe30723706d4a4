#include "generator/backward_params.h"

#include <cstring>

#include "generator/bwd_sm90_traits.h"
#include "generator/forward_params.h"
#include "generator/kernel_spec.h"

namespace flashjit {

size_t backward_workspace_bytes(const Problem &p, int64_t total_q) {
  // One row per LSE row: [batch][head][query], or [head][token] (varlen).
  const size_t rows = static_cast<size_t>(forward_lse_rows(p, total_q));
  // The dQ accumulator first (16-byte aligned rows of head_dim_qk floats,
  // head_dim_qk a multiple of 8), then D, then the deterministic sm90
  // backward's dQ semaphores (an int per row; BwdParams::dq_semaphore), then
  // the sm90 kernel's work counter (BwdParams::work_counter).
  return rows * static_cast<size_t>(p.head_dim_qk) * 4 + rows * 4 + rows * 4 + 4;
}

BackwardArgs BackwardArgs::packed(const Problem &p, const void *q, const void *k, const void *v,
                                  const void *o, const void *dout, const float *lse, void *dq,
                                  void *dk, void *dv, void *workspace, size_t workspace_bytes) {
  auto strides = [](int64_t seqlen, int64_t heads, int64_t dim) {
    return TensorStrides{seqlen * heads * dim, heads * dim, dim};
  };
  BackwardArgs a;
  a.q = q;
  a.k = k;
  a.v = v;
  a.o = o;
  a.dout = dout;
  a.lse = lse;
  a.dq = dq;
  a.dk = dk;
  a.dv = dv;
  a.q_strides = a.dq_strides = strides(p.seqlen_q, p.heads_q, p.head_dim_qk);
  a.k_strides = a.dk_strides = strides(p.seqlen_k, p.heads_kv, p.head_dim_qk);
  a.v_strides = a.dv_strides = strides(p.seqlen_k, p.heads_kv, p.head_dim_v);
  a.o_strides = a.dout_strides = strides(p.seqlen_q, p.heads_q, p.head_dim_v);
  a.workspace = workspace;
  a.workspace_bytes = workspace_bytes;
  return a;
}

BwdParams make_backward_params(const Problem &problem, const BackwardArgs &args,
                               bool deterministic, int block_n) {
  // Mask bounds and scales exactly as the forward computed them.
  ForwardArgs f;
  const FwdParams fwd = make_forward_params(problem, f);
  BwdParams p{};
  p.q = args.q;
  p.k = args.k;
  p.v = args.v;
  p.o = args.o;
  p.dout = args.dout;
  p.lse = args.lse;
  p.dq = args.dq;
  p.dk = args.dk;
  p.dv = args.dv;
  const size_t rows = static_cast<size_t>(forward_lse_rows(problem, args.varlen.total_q));
  p.dq_accum = static_cast<float *>(args.workspace);
  p.dsum = p.dq_accum + rows * static_cast<size_t>(problem.head_dim_qk);
  p.dq_semaphore = reinterpret_cast<int *>(p.dsum + rows);
  p.work_counter = p.dq_semaphore + rows;
  set_strides(args.q_strides, p.q_batch_stride, p.q_row_stride, p.q_head_stride);
  set_strides(args.k_strides, p.k_batch_stride, p.k_row_stride, p.k_head_stride);
  set_strides(args.v_strides, p.v_batch_stride, p.v_row_stride, p.v_head_stride);
  set_strides(args.o_strides, p.o_batch_stride, p.o_row_stride, p.o_head_stride);
  set_strides(args.dout_strides, p.do_batch_stride, p.do_row_stride, p.do_head_stride);
  set_strides(args.dq_strides, p.dq_batch_stride, p.dq_row_stride, p.dq_head_stride);
  set_strides(args.dk_strides, p.dk_batch_stride, p.dk_row_stride, p.dk_head_stride);
  set_strides(args.dv_strides, p.dv_batch_stride, p.dv_row_stride, p.dv_head_stride);
  p.seqlen_q = fwd.seqlen_q;
  p.seqlen_k = fwd.seqlen_k;
  p.sinks = args.sinks;
  p.dsinks = args.dsinks;
  // The modifiers' aux values (checked against their struct by the launch).
  if (args.aux && args.aux_bytes > 0)
    std::memcpy(p.aux, args.aux, args.aux_bytes < sizeof(p.aux) ? args.aux_bytes : sizeof(p.aux));
  p.heads_q = fwd.heads_q;
  p.heads_per_kv = fwd.heads_per_kv;
  p.window_left = fwd.window_left;
  p.window_right = fwd.window_right;
  p.attention_chunk = fwd.attention_chunk;
  p.score_scale = fwd.score_scale;
  p.softmax_scale_log2 = fwd.softmax_scale_log2;
  p.softmax_scale = problem.effective_scale();
  p.batch = static_cast<int>(problem.batch);
  const BwdSm90Traits::DispatchOrder order = BwdSm90Traits::dispatch_order(
      problem, block_n, args.modifiers && !args.modifiers->mask_mod.empty(), deterministic);
  p.dispatch_section = order.section;
  p.shortest_first = order.shortest_first ? 1 : 0;
  p.work_items = static_cast<int>(BwdSm90Traits::work_items(problem, block_n));
  if (problem.varlen) {
    p.cu_seqlens_q = args.varlen.cu_seqlens_q;
    p.seqused_q = args.varlen.seqused_q;
    p.seqused_k = args.varlen.seqused_k;
    p.cu_seqlens_k = args.varlen.cu_seqlens_k;
    p.total_q = static_cast<int>(args.varlen.total_q);
    p.total_k = static_cast<int>(args.varlen.total_k);
  }
  return p;
}

}  // namespace flashjit
