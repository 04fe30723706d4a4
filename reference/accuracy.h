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
  // The fp8 criterion's (check_fp8_forward_accuracy): the output's RMSE
  // against the exact reference and its bound; max_err's bound is
  // `tolerance` then, and there is no baseline.
  bool rmse_checked = false;
  double rmse = 0;
  double rmse_bound = 0;
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

// The criterion of an fp8 (e4m3) forward, against the float64 (or fp32 GPU)
// reference computed from the de-quantized inputs, so that only the
// kernel's own arithmetic is measured, not the inputs' quantization.
struct Fp8AccuracyCriterion {
  // FlashAttention-3 (Shah et al., "FlashAttention-3: Fast and Accurate
  // Attention with Asynchrony and Low-precision", 2024), Table 3: the RMSE
  // of its fp8 (e4m3) forward against an fp64 reference is 9.1e-3 on
  // N(0, 1) inputs with 0.1% of the entries drawn from N(0, 10^2) (a
  // baseline fp8 attention: 2.4e-2). flashjit asks no more error than that.
  double rmse = 9.1e-3;
  // The max-abs bound: max_err <= p_relative * max|V| + out_relative *
  // max|O_ref| + atol. O is a weighted mean of V's rows whose weights P are
  // normalised by an fp32 row sum the kernel keeps unrounded; rounding P to
  // e4m3 for P·V moves each weight by at most half an ulp of its 3-bit
  // mantissa, 2^-4 of itself, so the mean moves by at most 2^-4 * max|V|.
  // The output's rounding to bf16 adds half an ulp, 2^-8 of |O| (fp16's
  // 2^-11 is below it). Weights that fall below e4m3's normal range even
  // after the kernel's power-of-two scale on P (FlashAttention-3's 2^8:
  // below 2^-14 of the row max) are outside this bound; each moves by at
  // most 2^-18, which matters only when tens of thousands of keys sit there.
  double p_relative = 1.0 / 16;
  double out_relative = 1.0 / 256;
  double atol = 1e-5;
  // The LSE: |lse - exact| <= lse_atol + lse_score_relative * score_bound.
  // lse_atol is the 16-bit kernels' (fp32 statistics). The rest is the
  // scores': an fp8 wgmma accumulates Q K^T with fewer mantissa bits than
  // fp32 (DeepSeek-V3's report, section 3.3.2: about 14 on the H800), and
  // softcap's tanh.approx is good to 2^-11 of its value, so a score's error
  // grows with sum |q_i k_i| <= |q| |k| (Cauchy-Schwarz), not with the
  // score itself. score_bound is scale * max |q| * max |k| over rows of the
  // de-quantized inputs (the caller's; 0 leaves lse_atol alone). Measured
  // (H100, 2026-12-07): 1.04e-3 at d=256 causal on N(0, 1) inputs, where
  // the bound is about 2e-2; 2.2e-2 with FlashAttention-3's outliers,
  // where it is about 0.2. A Q the kernel quantizes per row itself (an
  // e4m3 cache under 16-bit q) moves each score by up to 2^-4 of its
  // terms, so the caller asks lse_score_relative 2^-8 there (8.8e-3
  // measured against about 8e-2).
  double lse_atol = 1e-3;
  double lse_score_relative = 1.0 / 1024;
  double score_bound = 0;
};

// `out` (the kernel's output, widened), `reference` (exact, from the
// de-quantized inputs) and `v_max_abs` (max |V| of the de-quantized V);
// `lse` and `reference_lse` may both be empty.
AccuracyReport check_fp8_forward_accuracy(llvm::ArrayRef<float> out,
                                          llvm::ArrayRef<float> reference, double v_max_abs,
                                          llvm::ArrayRef<float> lse = {},
                                          llvm::ArrayRef<float> reference_lse = {},
                                          const Fp8AccuracyCriterion &criterion = {});

// Root mean square of out - reference over finite pairs; a non-finite
// mismatch (equal infinities aside) makes it infinite.
double rms_error(llvm::ArrayRef<float> out, llvm::ArrayRef<float> reference);

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
