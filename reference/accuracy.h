// The pass/fail criterion of the correctness tests, as FlashAttention's
// own tests apply it: a kernel passes when its max abs error against the
// exact reference is at most `factor` times that of the same reference
// computed in the kernel's precision, plus `atol`. Outputs are poisoned with
// NaN before the kernel runs, so a NaN in them means "never written".
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "llvm/ADT/ArrayRef.h"
#include "reference/cpu_attention_backward.h"

namespace flashjit {

// Max |a - b| over finite pairs; equal infinities count as 0 and any other
// non-finite mismatch as infinity.
double max_abs_error(llvm::ArrayRef<float> a, llvm::ArrayRef<float> b);
size_t count_nan(llvm::ArrayRef<float> values);

struct AccuracyReport {
  double max_err = 0;       // kernel vs exact reference
  double baseline_err = 0;  // element-precision reference vs exact reference
  double tolerance = 0;     // factor * baseline_err + atol
  size_t unwritten = 0;     // NaNs left in the output
  size_t elements = 0;
  // LSE (fp32 in the kernel): checked against the exact one with an absolute
  // tolerance; skipped when none is given.
  bool lse_checked = false;
  double lse_max_err = 0;
  size_t lse_unwritten = 0;
  double lse_tolerance = 0;
  bool passed = false;

  // "PASS max_err=1.95e-03 <= tol=3.92e-03 (baseline 1.95e-03), lse_err=..."
  std::string describe() const;
};

struct AccuracyCriterion {
  double factor = 2.0;  // 3.0 for gradients
  double atol = 1e-5;
  // The kernel's LSE is fp32 from the same inputs, so it is off from the
  // float64 one only by accumulation order and exp/log error.
  double lse_atol = 1e-3;
};

// `out`, `reference` and `lowprec_reference` hold the same elements (e.g.
// [b, sq, hq, dv]); `lse` and `reference_lse` may both be empty.
AccuracyReport check_forward_accuracy(llvm::ArrayRef<float> out, llvm::ArrayRef<float> reference,
                                      llvm::ArrayRef<float> lowprec_reference,
                                      llvm::ArrayRef<float> lse = {},
                                      llvm::ArrayRef<float> reference_lse = {},
                                      const AccuracyCriterion &criterion = {});

// The criterion for gradients: factor 3, the same atol.
inline constexpr AccuracyCriterion kGradientCriterion{3.0, 1e-5};

// One AccuracyReport per gradient tensor (no LSE).
struct GradientAccuracyReport {
  AccuracyReport dq, dk, dv;
  std::optional<AccuracyReport> dsinks;  // learned sinks' gradient, where checked
  bool passed() const { return dq.passed && dk.passed && dv.passed && (!dsinks || dsinks->passed); }
  // "PASS dq: PASS max_err=...; dk: PASS ...; dv: PASS ..."
  std::string describe() const;
};

// `kernel`, `exact` and `element` hold gradients of the same problem:
// the kernel's, cpu_attention_backward(exact) and
// cpu_attention_backward(element) (or the GPU reference's equivalents).
GradientAccuracyReport check_gradient_accuracy(const AttentionGradients &kernel,
                                               const AttentionGradients &exact,
                                               const AttentionGradients &element,
                                               const AccuracyCriterion &criterion =
                                                   kGradientCriterion);

}  // namespace flashjit
