// The backward pass: gradients of exact attention with respect to q, k and v,
// recomputing the probabilities from the forward's log-sum-exp (no P is ever
// stored), as FlashAttention does.
#pragma once

#include <cstddef>

#include "flashjit/forward.h"

namespace flashjit {

// Device pointers, [batch, seqlen, heads, dim] with explicit element strides
// (dim contiguous). `o` and `lse` are the forward's outputs for the same
// inputs; `lse` is required ([batch, heads_q, seqlen_q] fp32, contiguous;
// [heads_q, total_q] for a packed varlen batch, whose tensors are
// [total, heads, dim] as the forward's: `varlen` as ForwardArgs::varlen).
// dk and dv have the KV heads' shape: under GQA the gradients of the query
// heads sharing a KV head are summed there.
struct BackwardArgs {
  const void *q = nullptr;
  const void *k = nullptr;
  const void *v = nullptr;
  const void *o = nullptr;
  const void *dout = nullptr;
  const float *lse = nullptr;
  void *dq = nullptr;
  void *dk = nullptr;
  void *dv = nullptr;
  TensorStrides q_strides, k_strides, v_strides, o_strides, dout_strides;
  TensorStrides dq_strides, dk_strides, dv_strides;
  // Scratch device memory of at least backward_workspace_bytes(problem),
  // 16-byte aligned: the fp32 dQ accumulator and rowsum(dO * O).
  void *workspace = nullptr;
  size_t workspace_bytes = 0;
  // Read only when the problem is a packed batch (varlen).
  VarlenArgs varlen;
  // The forward's modifiers and aux values (ForwardArgs::modifiers): the
  // backward recomputes the probabilities with them. A score_mod needs its
  // score_mod_grad: given here, or defined in the score_mod snippet.
  const Modifiers *modifiers = nullptr;
  const void *aux = nullptr;
  size_t aux_bytes = 0;
  // With modifiers->sinks: the forward's sinks (heads_q fp32 logits) and
  // where their gradient goes (heads_q fp32, written whole: no zeroing
  // needed); else both null.
  const float *sinks = nullptr;
  float *dsinks = nullptr;
  // The forward's block mask (ForwardArgs::block_mask), or null.
  const BlockMask *block_mask = nullptr;

  static BackwardArgs packed(const Problem &problem, const void *q, const void *k, const void *v,
                             const void *o, const void *dout, const float *lse, void *dq,
                             void *dk, void *dv, void *workspace, size_t workspace_bytes);
};

// O(seqlen): batch * heads_q * seqlen_q * (head_dim_qk + 2) * 4 + 4 bytes;
// for a packed varlen batch heads_q * total_q * (head_dim_qk + 2) * 4 + 4
// (`total_q`: its tokens, read only for varlen).
size_t backward_workspace_bytes(const Problem &problem, int64_t total_q = 0);

// Enqueues the backward pass (three kernels) on `stream`. The first call of
// a problem class compiles its kernels; `options.config` overrides the
// backward heuristic.
Status backward(const Problem &problem, const BackwardArgs &args, CUstream_st *stream = nullptr,
                const ForwardOptions &options = {});

}  // namespace flashjit
