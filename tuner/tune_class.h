// The pipeline that tune_forward (tuner.h) and tune_backward
// (tune_backward.h) share: a pass's candidates -> their cubins (in a pool
// of worker processes, or on threads of this one) -> loaded and pruned by
// compiled attributes -> successive halving on the GPU -> the fastest that
// passes its pass's accuracy check -> stored. Where the candidates run
// (CandidateRunner: a measuring worker, or this process) and what they are
// (PassSearch) are the only differences between the passes.
#pragma once

#include <functional>
#include <string>

#include "cache/tuning_db.h"
#include "flashjit/problem.h"
#include "generator/kernel_spec.h"
#include "generator/source.h"
#include "generator/target_arch.h"
#include "tuner/candidates.h"
#include "tuner/tuner.h"
#include "llvm/Support/Error.h"

namespace flashjit {

// What differs between tuning one pass and another.
struct PassSearch {
  Pass pass = Pass::forward;
  bool deterministic = false;  // the backward's dQ mode (its own class)
  std::string what;            // the class in messages: "<problem>", "the <problem> backward"
  std::string check_against;   // what the winner is checked against, for progress lines
  double flops_factor = 1;     // a call's FLOPs over the forward's
  // The modifiers the candidates compile (the pass's part of the caller's:
  // modifiers_of_pass); their hash is part of the stored class.
  Modifiers modifiers;
  // The search space (the heuristic's config first), the heuristic's config
  // and a config's spec, for `arch` with `max_smem_bytes`.
  std::function<CandidateSet(const TargetArch &, int)> candidates;
  std::function<KernelConfig(const TargetArch &, int)> heuristic;
  std::function<llvm::Expected<KernelSpec>(const KernelConfig &, const TargetArch &, int)> spec;
};

// `search` is the class's (built from tuning_class_problem); `problem` is
// what the candidates are timed on (with options.packed for varlen, as
// resolved by packed_batch_to_tune).
llvm::Expected<TuneOutcome> tune_class(const Problem &problem, const PassSearch &search,
                                       TuningDb &db, const TuneOptions &options);

// The packed batch a tune of `problem` times: options.packed validated for
// a varlen problem (every sequence the longest when unset), none for a dense
// one (an error when lengths were given for it).
llvm::Expected<std::optional<PackedBatch>> packed_batch_to_tune(const Problem &problem,
                                                                const TuneOptions &options);

// The problem the search space, the heuristic and the stored key are built
// from, as a call's choice sees it: class_view(problem, total_q) of a packed
// batch, `problem` itself otherwise.
Problem tuning_class_problem(const Problem &problem, const std::optional<PackedBatch> &packed);

// A tune's modifiers checked before anything runs: valid snippets (a
// backward's score_mod with its score_mod_grad, given or in its own
// source: check_score_mod_grad), a dense problem, and the
// scalar aux values (every scalar field exactly once, of its type), named
// in errors as `given_as`.
llvm::Error validate_tuned_modifiers(const Problem &problem, Pass pass,
                                     const TunedModifiers &modifiers,
                                     llvm::StringRef given_as = "aux value");

// `options.modifiers` as a call on options.device compiles them
// (resolve_modifiers: whether one block map serves every batch and head),
// so the tune's candidates and stored class are that call's.
llvm::Error resolve_tuned_modifiers(TuneOptions &options, Pass pass, TuningDb &db);

// Stores the cubin of a GPU reference program (`source`, compiled with
// `modifiers`) for `arch` under the id the tuner's check loads it by,
// "<name>_<arch>[_mod<hash>]", counted in `outcome`.
void store_reference(const GeneratedSource &source, const std::string &name,
                     const Modifiers &modifiers, const TargetArch &arch, TuningDb &db,
                     PrecompileOutcome &outcome);

// The compile half without a GPU: the candidates (the heuristic's config
// first, so a fleet that never tunes still starts with its default
// compiled) compiled for `arch` into `db`'s cubin store, in worker processes
// when `worker_binary` (resolved as TuneOptions::worker_binary) names one.
// No candidate at all is an error naming why the first was pruned.
llvm::Expected<PrecompileOutcome> precompile_class(const Problem &problem, const PassSearch &search,
                                                   const TargetArch &arch, int max_smem_bytes,
                                                   TuningDb &db, int threads,
                                                   const std::string &worker_binary);

}  // namespace flashjit
