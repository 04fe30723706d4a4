// The split-KV merge arithmetic (flash-decoding; FlashInfer's merge
// operator), shared by the combine kernel (fwd_combine.cuh) and the host
// tests that hold it against a float64 reference. Natural-log LSEs; a split
// that saw no key has LSE -inf and weighs nothing:
//   lse = m + log(sum_i exp(lse_i - m)),  m = max_i lse_i,
//   O   = sum_i exp(lse_i - lse) * O_i.
// Plain C++ with no includes; the device build marks the functions
// __host__ __device__.
#pragma once

#if defined(__CUDACC__)
#define FLASHJIT_MERGE_FN __host__ __device__ __forceinline__
#else
#define FLASHJIT_MERGE_FN inline
#endif

namespace flashjit {
namespace split_merge {

#if defined(__CUDACC__)
FLASHJIT_MERGE_FN float infinity() { return __int_as_float(0x7f800000); }
#else
FLASHJIT_MERGE_FN float infinity() { return __builtin_huge_valf(); }
#endif

// exp(x) through exp2, as every kernel computes it.
FLASHJIT_MERGE_FN float exp_of(float x) {
  constexpr float kLog2e = 1.4426950408889634f;
#if defined(__CUDACC__)
  return exp2f(x * kLog2e);
#else
  return __builtin_exp2f(x * kLog2e);
#endif
}

// Split i's term of the sum of exponentials against the running max `m`
// (0 for an empty split, or when every split is empty: m = -inf).
FLASHJIT_MERGE_FN float sum_term(float lse_i, float m) {
  return lse_i == -infinity() ? 0.f : exp_of(lse_i - m);
}

// The merged LSE from the max and the sum of sum_term over the splits:
// +inf (FlashAttention's value for a row that sees no key) when every split
// was empty.
FLASHJIT_MERGE_FN float merged_lse(float m, float sum) {
  if (m == -infinity()) return infinity();
#if defined(__CUDACC__)
  return m + __logf(sum);
#else
  return m + __builtin_logf(sum);
#endif
}

// A learned sink's logit (natural units; modifiers.cuh) joins the merged
// row's max `m` and sum of exponentials `sum` (the splits' partials leave it
// out, so that it counts once): both move to max(m, sink). merged_lse and
// weight then give the row's LSE and the splits' weights with the sink's
// share taken out of O; a row no split saw has LSE = sink.
FLASHJIT_MERGE_FN void add_sink(float &m, float &sum, float sink) {
  const float top = m > sink ? m : sink;
  sum = (m == -infinity() ? 0.f : sum * exp_of(m - top)) + exp_of(sink - top);
  m = top;
}

// Split i's weight in the merged O (0 for an empty split).
FLASHJIT_MERGE_FN float weight(float lse_i, float lse) {
  return lse_i == -infinity() ? 0.f : exp_of(lse_i - lse);
}

}  // namespace split_merge
}  // namespace flashjit

#undef FLASHJIT_MERGE_FN
