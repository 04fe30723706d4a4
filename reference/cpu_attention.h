// Exact attention on the CPU in float64, for small shapes: the ground truth
// the GPU reference and the kernels are checked against. Tensors are packed
// [batch, seqlen, heads, dim] float arrays that already hold element-type
// values (see the rounding helpers), so the reference and the kernel see the
// very same inputs.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "flashjit/problem.h"
#include "llvm/ADT/ArrayRef.h"

namespace flashjit {

// Round-to-nearest-even conversions between float and the 16-bit storage of
// bf16 / fp16 (NaN stays NaN; fp16 overflows to infinity).
uint16_t float_to_bf16_bits(float value);
float bf16_bits_to_float(uint16_t bits);
uint16_t float_to_fp16_bits(float value);
float fp16_bits_to_float(uint16_t bits);

// e4m3 (reference/fp8.h) in the low byte.
uint16_t float_to_bits(DType dtype, float value);
float bits_to_float(DType dtype, uint16_t bits);
// `value` rounded to the nearest value `dtype` can hold.
float round_to(DType dtype, float value);

std::vector<uint16_t> to_storage(DType dtype, llvm::ArrayRef<float> values);
std::vector<float> from_storage(DType dtype, llvm::ArrayRef<uint16_t> bits);
// Rounds every element in place.
void round_all(DType dtype, std::vector<float> &values);
// `n` Normal(0, 1) values rounded to `dtype`, from `seed`: never zeros,
// which would hide unwritten outputs and wrong indexing.
std::vector<float> random_values(DType dtype, size_t n, uint64_t seed);

// Whether query row `i` sees key `j`: the mask of Problem, bottom-right aligned.
bool key_visible(const Problem &problem, int64_t i, int64_t j);

enum class ReferencePrecision {
  // Everything in float64.
  exact,
  // As a kernel in the element type computes it: P = exp(s - rowmax) rounded
  // to the element type before P·V, the output rounded. Its error against
  // `exact` sets the tolerance (reference/accuracy.h).
  element,
};

struct AttentionOutputs {
  std::vector<float> out;  // [batch, seqlen_q, heads_q, head_dim_v]
  std::vector<float> lse;  // [batch, heads_q, seqlen_q], natural log
};

// The reference's twin of a caller's modifiers (include/flashjit/modifiers.h),
// as C++ over the same logical indices (batch, query head, query and key
// positions): `score` maps each scaled (and softcapped) score, `visible`
// hides keys on top of the problem's mask. Empty: none.
struct ReferenceModifiers {
  std::function<double(double score, int64_t b, int64_t h, int64_t q, int64_t k)> score;
  std::function<bool(int64_t b, int64_t h, int64_t q, int64_t k)> visible;
  // Learned attention sinks (GPT-OSS): one logit per query head, in the
  // scaled scores' units, that joins every row's softmax denominator with
  // no value: O = sum_j exp(s_j) v_j / (exp(sink_h) + sum_j exp(s_j)), the
  // LSE log(exp(sink_h) + sum_j exp(s_j)). Empty: none; else heads_q
  // logits.
  std::vector<float> sinks;
};

// A row that sees no key gets O = 0 and LSE = +infinity, as FlashAttention
// writes it (with sinks: O = 0 and LSE = the head's sink). `q`, `k` and `v` must be packed and sized for `problem`.
AttentionOutputs cpu_attention(const Problem &problem, llvm::ArrayRef<float> q,
                               llvm::ArrayRef<float> k, llvm::ArrayRef<float> v,
                               ReferencePrecision precision = ReferencePrecision::exact,
                               const ReferenceModifiers &modifiers = {});

// Element counts of the packed tensors of `problem`.
size_t q_elements(const Problem &problem);
size_t k_elements(const Problem &problem);
size_t v_elements(const Problem &problem);
size_t o_elements(const Problem &problem);
size_t lse_elements(const Problem &problem);

}  // namespace flashjit
