// The backward's in-process runner: each candidate the whole backward
// program (BackwardKernels: preprocess, main kernel, dQ conversion or the
// deterministic dQ kernel, either family), timed as one call by
// BackwardBench and checked against float64 CPU gradients on a small
// problem of the class (tuner/backward_bench.h).
#pragma once

#include <memory>

#include "tuner/candidate_runner.h"

namespace flashjit {

// Sets up the bench in `scope`'s context (current in this thread);
// `store` and `modifier_inputs` as make_forward_runner's.
llvm::Expected<std::unique_ptr<InProcessRunner>> make_backward_runner(
    ScopedDeviceContext scope, const Problem &problem, const std::optional<PackedBatch> &packed,
    const DeviceInfo &device, TuningDb *store, std::unique_ptr<ModifierInputs> modifier_inputs);

}  // namespace flashjit
