// The forward kernel's parameter block: one struct passed by value, shared
// byte-for-byte by the host (runtime/) and the device (fwd_*.cuh). Only
// fixed-width builtin types, so it compiles in both worlds without headers.
#pragma once

namespace flashjit {

struct FwdParams {
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
};

}  // namespace flashjit
