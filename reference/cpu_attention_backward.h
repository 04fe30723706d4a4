// The gradients of attention on the CPU in float64, for small shapes: the
// ground truth the backward kernels are checked against. Same
// conventions as cpu_attention: packed [batch, seqlen, heads, dim] float
// arrays that already hold element-type values, the mask of key_visible(),
// scores = softcap * tanh(scale * q.k / softcap) when softcap > 0.
#pragma once

#include <vector>

#include "flashjit/problem.h"
#include "llvm/ADT/ArrayRef.h"
#include "reference/cpu_attention.h"

namespace flashjit {

struct AttentionGradients {
  std::vector<float> dq;  // [batch, seqlen_q, heads_q, head_dim_qk]
  std::vector<float> dk;  // [batch, seqlen_k, heads_kv, head_dim_qk]
  std::vector<float> dv;  // [batch, seqlen_k, heads_kv, head_dim_v]
  // With learned sinks: d L / d sink_h = -sum over the head's rows of
  // P_sink * D (the sink's probability exp(sink_h - LSE) times rowsum(dO ∘
  // O): its dP is 0, having no value). [heads_q]; empty without sinks.
  std::vector<float> dsinks;
};

// The gradients of L = sum(O ∘ dout) with respect to q, k and v, O being
// cpu_attention(problem, q, k, v). Per query head and row, everything
// recomputed from q and k as FlashAttention's backward does:
//   S = scale·QKᵀ (or softcap·tanh(scale·QKᵀ/softcap)), masked;
//   P = softmax(S) (a row that sees no key: P = 0, so its dq is 0 and it
//       adds nothing to dk, dv);
//   O = P V, D = rowsum(dO ∘ O) (= rowsum(P ∘ dP));
//   dV = Pᵀ dO, dP = dO Vᵀ, dS = P ∘ (dP − D), times (1 − tanh²) with softcap;
//   dQ = scale·dS K, dK = scale·dSᵀ Q.
// With GQA / MQA, dk and dv of a KV head are the sums over the query heads
// that share it. `dout` is packed like O: [batch, seqlen_q, heads_q, head_dim_v].
//
// ReferencePrecision::element emulates what a kernel in problem.dtype rounds
// (the baseline of the gradient criterion (reference/accuracy.h), factor 3):
//   - O is the element-precision forward's output (P rounded before P·V,
//     O rounded), so D = rowsum(dO ∘ O_element);
//   - P is rounded to the element type before dV = Pᵀ dO (dS = P∘(dP − D)
//     uses the unrounded P, as the kernel keeps it in fp32 registers);
//   - dS (softcap derivative applied, scale not) is rounded before dQ = dS K
//     and dK = dSᵀ Q, the scale applied to the fp32-style accumulator;
//   - dq, dk and dv are rounded to the element type.
// Every sum is float64 in both modes; the exact mode rounds only the final
// float64 → float conversion.
// `sinks` (empty: none, else heads_q logits) as ReferenceModifiers::sinks:
// they join each row's softmax denominator, which every P above is then
// normalised by.
AttentionGradients cpu_attention_backward(
    const Problem &problem, llvm::ArrayRef<float> q, llvm::ArrayRef<float> k,
    llvm::ArrayRef<float> v, llvm::ArrayRef<float> dout,
    ReferencePrecision precision = ReferencePrecision::exact,
    llvm::ArrayRef<float> sinks = {});

}  // namespace flashjit
