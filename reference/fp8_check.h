// The fp8 criterion of a finished forward (reference/accuracy.h's
// check_fp8_forward_accuracy) as `run --check` and the tuner's winner check
// apply it: the output and LSE downloaded, against the exact GPU reference of
// the de-quantized inputs (the same e4m3 bytes times the same descales).
#pragma once

#include <cuda.h>

#include "flashjit/forward.h"
#include "cache/tuning_db.h"
#include "reference/accuracy.h"
#include "reference/forward_inputs.h"
#include "runtime/device_buffer.h"
#include "llvm/Support/Error.h"

namespace flashjit {

// `o` (out_element) and `lse` hold the forward's results on `args`, which
// reads `inputs`' device copies with their descales.
llvm::Expected<AccuracyReport> check_fp8_forward_outputs(const Problem &problem,
                                                         const ForwardArgs &args,
                                                         const ForwardHostInputs &inputs,
                                                         const DeviceBuffer &o,
                                                         const DeviceBuffer &lse,
                                                         CUstream stream = nullptr,
                                                         TuningDb *store = nullptr);

}  // namespace flashjit
