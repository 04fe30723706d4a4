#include "tuner/tuner.h"

#include "generator/heuristic.h"
#include "generator/kernel_spec.h"
#include "generator/modifier_source.h"
#include "reference/gpu_reference.h"
#include "runtime/kernel_source.h"
#include "runtime/modifier_facts.h"
#include "tuner/candidates.h"
#include "tuner/tune_class.h"

namespace flashjit {
namespace {

// `problem`: the class's (tuning_class_problem), which the lambdas keep a
// reference to, as they do to `modifiers` (compiled into every candidate).
PassSearch forward_search(const Problem &problem, const Modifiers &modifiers) {
  PassSearch s;
  s.pass = Pass::forward;
  s.modifiers = modifiers_of_pass(modifiers, Pass::forward);
  s.what = describe(problem);
  s.check_against = "the reference";
  const bool modified = !s.modifiers.empty();
  s.candidates = [&problem, modified](const TargetArch &arch, int max_smem) {
    return forward_candidates(problem, arch, max_smem, modified);
  };
  s.heuristic = [&problem, modified](const TargetArch &arch, int max_smem) {
    return default_forward_config(problem, arch, max_smem, {}, 0, modified);
  };
  s.spec = [&problem, &modifiers, modified](const KernelConfig &config, const TargetArch &arch,
                                            int max_smem) -> llvm::Expected<KernelSpec> {
    auto spec = make_forward_spec(problem, config, arch, max_smem, modified);
    if (spec) spec->modifiers = modifiers;
    return spec;
  };
  return s;
}

}  // namespace

llvm::Expected<TuneOutcome> tune_forward(const Problem &problem, TuningDb &db,
                                         const TuneOptions &options) {
  auto packed = packed_batch_to_tune(problem, options);
  if (!packed) return packed.takeError();
  if (llvm::Error e = validate_tuned_modifiers(problem, Pass::forward, options.modifiers)) return e;
  TuneOptions resolved = options;
  resolved.packed = *packed;
  // The modifiers as a call on the device compiles them (the class's hash).
  if (llvm::Error e = resolve_tuned_modifiers(resolved, Pass::forward, db)) return e;
  // Candidates and the heuristic as a call of this class chooses them; the
  // timing runs the real (packed) problem.
  const Problem class_problem = tuning_class_problem(problem, *packed);
  PassSearch search = forward_search(class_problem, resolved.modifiers.modifiers);
  if (*packed) search.what = describe_packed(problem, **packed);
  return tune_class(problem, search, db, resolved);
}

llvm::Expected<PrecompileOutcome> precompile_forward(const Problem &problem,
                                                     const TargetArch &arch, int max_smem_bytes,
                                                     TuningDb &db, int threads,
                                                     const std::string &worker_binary,
                                                     const Modifiers &modifiers) {
  if (llvm::Error e = validate_modifiers(modifiers)) return e;
  // As a call on `arch` compiles them, so its kernels are the ones stored.
  auto compiled = resolve_modifiers(modifiers, Pass::forward, arch, &db);
  if (!compiled) return compiled.takeError();
  auto outcome = precompile_class(problem, forward_search(problem, *compiled), arch, max_smem_bytes,
                                  db, threads, worker_binary);
  if (!outcome) return outcome.takeError();
  // The tuner checks its winner against the GPU reference: store that
  // kernel too (with the forward's part of the modifiers compiled in, as the
  // tuner's check runs it), so a tune on this target compiles nothing at all.
  store_reference(generate_reference_attention(modifiers_of_pass(*compiled, Pass::forward)),
                  "reference_attention", modifiers_of_pass(*compiled, Pass::forward), arch, db,
                  *outcome);
  return outcome;
}

}  // namespace flashjit
