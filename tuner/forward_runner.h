// The forward's in-process runner: each candidate one kernel, timed by
// ForwardBench on input sets rotated past L2, checked against the GPU
// reference (tuner/forward_bench.h).
#pragma once

#include <memory>

#include "tuner/candidate_runner.h"

namespace flashjit {

// Sets up the bench in `scope`'s context (current in this thread).
// `store` (optional) holds the GPU reference's cubin; `modifier_inputs`
// (allocated in that context, or null) go with every run and the check.
llvm::Expected<std::unique_ptr<InProcessRunner>> make_forward_runner(
    ScopedDeviceContext scope, const Problem &problem, const std::optional<PackedBatch> &packed,
    const DeviceInfo &device, TuningDb *store, std::unique_ptr<ModifierInputs> modifier_inputs);

}  // namespace flashjit
