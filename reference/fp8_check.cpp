#include "reference/fp8_check.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "reference/cpu_attention.h"
#include "reference/gpu_reference.h"

namespace flashjit {

namespace {

// The largest 2-norm of `values`' rows of `width` elements.
double max_row_norm(llvm::ArrayRef<float> values, int width) {
  double largest = 0;
  for (size_t row = 0; row + size_t(width) <= values.size(); row += size_t(width)) {
    double sum = 0;
    for (int i = 0; i < width; ++i) sum += double(values[row + i]) * values[row + i];
    largest = std::max(largest, sum);
  }
  return std::sqrt(largest);
}

}  // namespace

llvm::Expected<AccuracyReport> check_fp8_forward_outputs(const Problem &p,
                                                         const ForwardArgs &args,
                                                         const ForwardHostInputs &inputs,
                                                         const DeviceBuffer &o,
                                                         const DeviceBuffer &lse,
                                                         CUstream stream, TuningDb *store) {
  std::vector<uint16_t> o_bits(o_elements(p));
  std::vector<float> lse_host(lse_elements(p));
  if (auto error = o.download(o_bits.data(), o_bits.size() * sizeof(uint16_t)))
    return error;
  if (auto error = lse.download(lse_host.data(), lse_host.size() * sizeof(float)))
    return error;
  auto exact = gpu_reference_attention(p, args, ReferencePrecision::exact, stream, store);
  if (!exact) return exact.takeError();
  double v_max_abs = 0;
  for (float x : inputs.v.values) v_max_abs = std::max(v_max_abs, double(std::fabs(x)));
  Fp8AccuracyCriterion criterion;
  criterion.score_bound = p.effective_scale() * max_row_norm(inputs.q.values, p.head_dim_qk) *
                          max_row_norm(inputs.k.values, p.head_dim_qk);
  // 16-bit Q over an e4m3 cache: the kernel quantizes Q per row itself.
  if (p.dtype != DType::e4m3 && kv_element(p) == DType::e4m3)
    criterion.lse_score_relative = 1.0 / 256;
  return check_fp8_forward_accuracy(from_storage(out_element(p), o_bits), exact->out, v_max_abs,
                                    lse_host, exact->lse, criterion);
}

}  // namespace flashjit
