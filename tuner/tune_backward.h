// Tuning the backward as its own problem class: the same pipeline as
// tune_forward (tuner.h) over the backward's search space
// (backward_candidates), each candidate the whole backward program timed as
// one call (BackwardBench), the winner checked against float64 CPU gradients
// on a small problem of the class, stored under class_pass(backward,
// deterministic).
#pragma once

#include "cache/tuning_db.h"
#include "flashjit/problem.h"
#include "generator/target_arch.h"
#include "tuner/tuner.h"
#include "llvm/Support/Error.h"

namespace flashjit {

// `deterministic`: tune the deterministic mode's class (a caller's choice,
// never the tuner's); otherwise the default mode with dQ atomics.
llvm::Expected<TuneOutcome> tune_backward(const Problem &problem, bool deterministic,
                                          TuningDb &db, const TuneOptions &options = {});

// Without a GPU: the backward programs of the heuristic config and every
// candidate compiled for `arch` into the cubin store.
llvm::Expected<PrecompileOutcome> precompile_backward(const Problem &problem, bool deterministic,
                                                      const TargetArch &arch, int max_smem_bytes,
                                                      TuningDb &db, int threads = 0);

}  // namespace flashjit
