#include "reference/fp8_check.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "reference/cpu_attention.h"
#include "reference/gpu_reference.h"

namespace flashjit {

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
  return check_fp8_forward_accuracy(from_storage(out_element(p), o_bits), exact->out, v_max_abs,
                                    lse_host, exact->lse);
}

}  // namespace flashjit
