// Tuning one problem class on one GPU: candidates -> parallel NVRTC compile
// (into the cubin store) -> pruning by compiled attributes -> successive
// halving on the GPU with inputs rotated past L2 -> the winner checked
// against the reference -> stored. Failures of single candidates are
// recorded, never fatal.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "cache/tuning_db.h"
#include "flashjit/problem.h"
#include "generator/target_arch.h"
#include "llvm/Support/Error.h"

namespace flashjit {

struct CandidateOutcome {
  KernelConfig config;
  std::string id;
  double median_ms = 0;  // infinity when it failed
  std::string failure;   // why it failed or was pruned
  int registers = 0;
  int spill_bytes = 0;
  int occupancy = 0;
  double compile_ms = 0;
};

struct TuneOutcome {
  Problem problem;
  TuningRecord record;  // what was stored
  std::vector<CandidateOutcome> candidates;
  double wall_s = 0;
  int device = 0;
};

struct TuneOptions {
  int device = 0;            // CUDA ordinal
  double budget_s = 60;      // soft limit on the measuring phase
  int compile_threads = 0;   // 0: hardware concurrency
  bool check_winner = true;  // against the GPU reference
  // Progress lines ("compiled 12/20", "round 2: 6 left"), for the CLI.
  std::function<void(const std::string &)> progress;
};

llvm::Expected<TuneOutcome> tune_forward(const Problem &problem, TuningDb &db,
                                         const TuneOptions &options = {});

// Without a GPU: compiles the heuristic config and every candidate of
// `problem` for `arch` into the cubin store. Returns the number compiled
// (cubins already stored are not compiled again).
struct PrecompileOutcome {
  int compiled = 0;
  int already_stored = 0;
  int failed = 0;
  std::vector<std::string> failures;
};
llvm::Expected<PrecompileOutcome> precompile_forward(const Problem &problem,
                                                     const TargetArch &arch, int max_smem_bytes,
                                                     TuningDb &db, int threads = 0);

}  // namespace flashjit
