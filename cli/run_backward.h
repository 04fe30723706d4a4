// `flashjit run --pass bwd`: the backward on the GPU with random inputs (O and
// LSE from the forward the library picks, as in training), timed as a
// training step pays for it (preprocess + main + dQ kernels), and with
// --check its gradients against float64 CPU gradients on a small problem of
// the same class; with a caller's modifiers against the GPU reference
// backward compiled with them (check_modified_backward).
#pragma once

#include "cli/cli_common.h"
#include "cli/commands.h"
#include "runtime/device.h"
#include "tuner/modifier_inputs.h"

namespace flashjit::cli {

// `modifiers` (or null): the caller's modifiers and their inputs, uploaded.
int run_backward(const RunCommand &command, const CommonOptions &common,
                 const ResolvedKernel &kernel, const DeviceInfo &device,
                 const ModifierInputs *modifiers = nullptr);

}  // namespace flashjit::cli
