// Tuning one problem class on one GPU: candidates -> parallel NVRTC compile
// (into the cubin store) -> pruning by compiled attributes -> successive
// halving on the GPU with inputs rotated past L2 -> the winner checked
// against the reference -> stored. Failures of single candidates are
// recorded, never fatal.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cache/tuning_db.h"
#include "flashjit/modifiers.h"
#include "flashjit/problem.h"
#include "generator/target_arch.h"
#include "reference/packed_batch.h"
#include "tuner/modifier_inputs.h"
#include "llvm/Support/Error.h"

namespace flashjit {

struct CandidateOutcome {
  KernelConfig config;
  std::string id;
  double median_ms = 0;  // infinity when it failed or was not measured
  double min_ms = 0, max_ms = 0;
  int repeats = 0;       // of the last round it was timed in
  int rounds = 0;        // rounds of successive halving it was timed in
  bool winner = false;
  std::string failure;   // why it failed or was pruned
  std::string cubin_key;
  bool cubin_from_store = false;  // not compiled by this tune
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
  double compile_s = 0;  // candidates: store lookups and NVRTC, in parallel
  double measure_s = 0;  // successive halving and the heuristic's timing
  int device = 0;
  int input_sets = 0;    // rotated so each run reads from HBM, not L2
  // Measuring worker processes started: 1, plus one per candidate that
  // killed its worker (GPU fault, hang); 0 when measured in this process.
  int measuring_workers = 0;
  // What the caller should know that is not a field: budget cuts, a winner
  // that failed the accuracy check and was replaced.
  std::vector<std::string> notes;
};

struct TuneOptions {
  int device = 0;            // CUDA ordinal
  double budget_s = 60;      // soft limit on the whole tune (compiles included)
  int initial_repeats = 5;   // successive halving: first round
  int final_repeats = 40;    // and the finalists (and the heuristic)
  int compile_threads = 0;   // 0: hardware concurrency
  bool check_winner = true;  // against the GPU reference
  // Fault isolation: the `flashjit` binary whose hidden worker mode compiles
  // and measures the candidates (tuner/worker_process.h), so that a compiler
  // crash, a GPU fault or a hang fails one candidate, not the tune. Empty:
  // $FLASHJIT_WORKER, else everything runs in this process (for library
  // users without the binary; a GPU fault then ends the tune). The CLI
  // passes itself. Workers need a database file (their cubins travel
  // through its store).
  std::string worker_binary;
  double candidate_timeout_s = 60;  // a warm-up or timing in a worker: a hang is killed after this
  double compile_timeout_s = 600;   // one candidate's compile in a worker
  // A varlen problem's packed batch: the sequences' lengths its candidates
  // are timed on (and, made small, its winner is checked on). Unset for a
  // varlen problem: every sequence the longest (equal_lengths). The tuning
  // is stored under the class a call of this batch looks up:
  // class_view(problem, total_q), bucketed by the longest lengths and the
  // total. Lengths for a dense problem are an error.
  std::optional<PackedBatch> packed;
  // A caller's modifiers (dense problems): compiled into every candidate and
  // the reference the winner is checked against, and part of the class the
  // tuning is stored under (the one a call with them looks up). They run on
  // the inputs `flashjit run` gives them (tuner/modifier_inputs.h): each
  // scalar aux field the value of its "NAME=VALUE" in `aux_values` (a
  // prefix length or a window decides how much work a mask leaves: the
  // caller's own values belong here), each pointer field generated values.
  TunedModifiers modifiers;
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
// `worker_binary` as TuneOptions::worker_binary: compiles in worker
// processes, so that a compiler crash fails one candidate. `modifiers`: a
// caller's snippets, compiled into every candidate (and the reference the
// tuner checks against), stored under the ids a call with them looks up.
llvm::Expected<PrecompileOutcome> precompile_forward(const Problem &problem,
                                                     const TargetArch &arch, int max_smem_bytes,
                                                     TuningDb &db, int threads = 0,
                                                     const std::string &worker_binary = {},
                                                     const Modifiers &modifiers = {});

}  // namespace flashjit
