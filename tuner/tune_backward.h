// Tuning the backward as its own problem class: tune_forward's pipeline
// (tuner/tune_class.h, in worker processes as the forward's when
// TuneOptions::worker_binary names one) over the backward's search space
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
// candidate compiled for `arch` into the cubin store. `worker_binary` as
// TuneOptions::worker_binary: compiles in worker processes, so that a
// compiler crash fails one candidate. `modifiers` as precompile_forward's
// (a score_mod needs its score_mod_grad here).
llvm::Expected<PrecompileOutcome> precompile_backward(const Problem &problem, bool deterministic,
                                                      const TargetArch &arch, int max_smem_bytes,
                                                      TuningDb &db, int threads = 0,
                                                      const std::string &worker_binary = {},
                                                      const Modifiers &modifiers = {});

}  // namespace flashjit
