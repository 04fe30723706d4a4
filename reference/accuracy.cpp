#include "reference/accuracy.h"

#include <cassert>
#include <cmath>
#include <limits>

#include "llvm/Support/FormatVariadic.h"

namespace flashjit {

namespace {

double pair_error(float a, float b) {
  if (std::isfinite(a) && std::isfinite(b)) return std::fabs(double(a) - double(b));
  if (std::isinf(a) && a == b) return 0;  // a fully masked row's LSE: +inf on both sides
  return std::numeric_limits<double>::infinity();
}

}  // namespace

double max_abs_error(llvm::ArrayRef<float> a, llvm::ArrayRef<float> b) {
  assert(a.size() == b.size());
  double err = 0;
  for (size_t i = 0; i < a.size(); ++i) err = std::max(err, pair_error(a[i], b[i]));
  return err;
}

size_t count_nan(llvm::ArrayRef<float> values) {
  size_t n = 0;
  for (float x : values) n += std::isnan(x) ? 1 : 0;
  return n;
}

// The LSE's part of a forward report (none where `lse` is empty): every row
// written and within `atol` of the exact one.
static void check_lse(AccuracyReport &r, llvm::ArrayRef<float> lse,
                      llvm::ArrayRef<float> reference_lse, double atol) {
  if (lse.empty()) return;
  r.lse_checked = true;
  r.lse_unwritten = count_nan(lse);
  r.lse_max_err = max_abs_error(lse, reference_lse);
  r.lse_tolerance = atol;
  r.passed = r.passed && r.lse_unwritten == 0 && r.lse_max_err <= r.lse_tolerance;
}

AccuracyReport check_forward_accuracy(llvm::ArrayRef<float> out, llvm::ArrayRef<float> reference,
                                      llvm::ArrayRef<float> lowprec_reference,
                                      llvm::ArrayRef<float> lse,
                                      llvm::ArrayRef<float> reference_lse,
                                      const AccuracyCriterion &criterion) {
  assert(out.size() == reference.size() && out.size() == lowprec_reference.size());
  assert(lse.size() == reference_lse.size());
  AccuracyReport r;
  r.elements = out.size();
  r.unwritten = count_nan(out);
  r.max_err = max_abs_error(out, reference);
  r.baseline_err = max_abs_error(lowprec_reference, reference);
  r.tolerance = criterion.factor * r.baseline_err + criterion.atol;
  r.passed = r.unwritten == 0 && r.max_err <= r.tolerance;
  check_lse(r, lse, reference_lse, criterion.lse_atol);
  return r;
}

double rms_error(llvm::ArrayRef<float> out, llvm::ArrayRef<float> reference) {
  assert(out.size() == reference.size());
  if (out.empty()) return 0;
  double sum = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const double e = pair_error(out[i], reference[i]);
    sum += e * e;
  }
  return std::sqrt(sum / double(out.size()));
}

AccuracyReport check_fp8_forward_accuracy(llvm::ArrayRef<float> out,
                                          llvm::ArrayRef<float> reference, double v_max_abs,
                                          llvm::ArrayRef<float> lse,
                                          llvm::ArrayRef<float> reference_lse,
                                          const Fp8AccuracyCriterion &criterion) {
  assert(lse.size() == reference_lse.size());
  double out_max_abs = 0;
  for (float x : reference)
    if (std::isfinite(x)) out_max_abs = std::max(out_max_abs, std::fabs(double(x)));
  AccuracyReport r;
  r.elements = out.size();
  r.unwritten = count_nan(out);
  r.max_err = max_abs_error(out, reference);
  r.tolerance =
      criterion.p_relative * v_max_abs + criterion.out_relative * out_max_abs + criterion.atol;
  r.rmse_checked = true;
  r.rmse = rms_error(out, reference);
  r.rmse_bound = criterion.rmse;
  r.passed = r.unwritten == 0 && r.max_err <= r.tolerance && r.rmse <= r.rmse_bound;
  check_lse(r, lse, reference_lse,
            criterion.lse_atol + criterion.lse_score_relative * criterion.score_bound);
  return r;
}

std::string AccuracyReport::describe() const {
  std::string s =
      rmse_checked
          ? llvm::formatv("{0} rmse={1:e2} {2} {3:e2}, max_err={4:e2} {5} {6:e2} (fp8)",
                          passed ? "PASS" : "FAIL", rmse, rmse <= rmse_bound ? "<=" : ">",
                          rmse_bound, max_err, max_err <= tolerance ? "<=" : ">", tolerance)
                .str()
          : llvm::formatv("{0} max_err={1:e2} {2} tol={3:e2} (baseline {4:e2})",
                          passed ? "PASS" : "FAIL", max_err, max_err <= tolerance ? "<=" : ">",
                          tolerance, baseline_err)
                .str();
  if (unwritten)
    s += llvm::formatv(", {0} of {1} outputs unwritten (NaN)", unwritten, elements).str();
  if (lse_checked) {
    s += llvm::formatv(", lse_err={0:e2} {1} {2:e2}", lse_max_err,
                       lse_max_err <= lse_tolerance ? "<=" : ">", lse_tolerance)
             .str();
    if (lse_unwritten) s += llvm::formatv(", {0} LSE unwritten (NaN)", lse_unwritten).str();
  }
  return s;
}

GradientAccuracyReport check_gradient_accuracy(const AttentionGradients &kernel,
                                               const AttentionGradients &exact,
                                               const AttentionGradients &element,
                                               const AccuracyCriterion &criterion) {
  GradientAccuracyReport r;
  r.dq = check_forward_accuracy(kernel.dq, exact.dq, element.dq, {}, {}, criterion);
  r.dk = check_forward_accuracy(kernel.dk, exact.dk, element.dk, {}, {}, criterion);
  r.dv = check_forward_accuracy(kernel.dv, exact.dv, element.dv, {}, {}, criterion);
  return r;
}

std::string GradientAccuracyReport::describe() const {
  std::string text = llvm::formatv("{0} dq: {1}; dk: {2}; dv: {3}", passed() ? "PASS" : "FAIL",
                                   dq.describe(), dk.describe(), dv.describe())
                         .str();
  if (dsinks) text += "; dsinks: " + dsinks->describe();
  return text;
}

}  // namespace flashjit
