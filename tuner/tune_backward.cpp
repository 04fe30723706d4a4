#include "tuner/tune_backward.h"

#include "generator/backward_spec.h"
#include "generator/modifier_source.h"
#include "reference/gpu_reference.h"
#include "reference/gpu_reference_backward.h"
#include "runtime/modifier_facts.h"
#include "tuner/backward_candidates.h"
#include "tuner/tune_class.h"

namespace flashjit {
namespace {

// FlashAttention's convention: the backward does 2.5x the forward's FLOPs.
constexpr double kBackwardFlopsFactor = 2.5;

// `problem` and `modifiers` are kept by reference, as forward_search's.
PassSearch backward_search(const Problem &problem, bool deterministic,
                           const Modifiers &modifiers) {
  PassSearch s;
  s.pass = Pass::backward;
  s.deterministic = deterministic;
  s.what = "the " + describe(problem) + (deterministic ? " backward (deterministic)" : " backward");
  s.modifiers = modifiers_of_pass(modifiers, Pass::backward);
  // The CPU cannot run a caller's snippets: the GPU's fp32 references can.
  s.check_against = modifiers.empty() ? "the float64 reference gradients"
                                      : "the GPU reference gradients";
  s.flops_factor = kBackwardFlopsFactor;
  s.candidates = [&problem, &modifiers, deterministic](const TargetArch &arch, int max_smem) {
    return backward_candidates(problem, arch, max_smem, deterministic, !modifiers.empty());
  };
  s.heuristic = [&problem, &modifiers, deterministic](const TargetArch &arch, int max_smem) {
    KernelConfig mode;
    mode.deterministic = deterministic;
    return default_backward_config(problem, arch, max_smem, mode, !modifiers.empty());
  };
  s.spec = [&problem, &modifiers](const KernelConfig &config, const TargetArch &arch,
                                  int max_smem) -> llvm::Expected<KernelSpec> {
    auto spec = make_backward_spec(problem, config, arch, max_smem);
    if (spec) spec->modifiers = modifiers;
    return spec;
  };
  return s;
}

}  // namespace

llvm::Expected<TuneOutcome> tune_backward(const Problem &problem, bool deterministic,
                                          TuningDb &db, const TuneOptions &options) {
  auto packed = packed_batch_to_tune(problem, options);
  if (!packed) return packed.takeError();
  if (llvm::Error e = validate_tuned_modifiers(problem, Pass::backward, options.modifiers))
    return e;
  TuneOptions resolved = options;
  resolved.packed = *packed;
  // The modifiers as a call on the device compiles them (the class's hash).
  if (llvm::Error e = resolve_tuned_modifiers(resolved, Pass::backward, db)) return e;
  // Candidates and the heuristic as a call of this class chooses them
  // (launch_backward: class_view); the timing runs the real packed problem.
  const Problem class_problem = tuning_class_problem(problem, *packed);
  PassSearch search = backward_search(class_problem, deterministic, resolved.modifiers.modifiers);
  if (*packed)
    search.what = "the " + describe_packed(problem, **packed) +
                  (deterministic ? " backward (deterministic)" : " backward");
  return tune_class(problem, search, db, resolved);
}

// The winner's check runs on the CPU reference: unlike the forward's, a
// backward tune needs no other kernel than its candidates'; with modifiers
// it runs on the GPU references (forward and backward), stored here too.
llvm::Expected<PrecompileOutcome> precompile_backward(const Problem &problem, bool deterministic,
                                                      const TargetArch &arch, int max_smem_bytes,
                                                      TuningDb &db, int threads,
                                                      const std::string &worker_binary,
                                                      const Modifiers &modifiers) {
  if (llvm::Error e = validate_modifiers(modifiers)) return e;
  // As a call on `arch` compiles them (its derivative checked), so its
  // kernels are the ones stored.
  auto resolved = resolve_modifiers(modifiers, Pass::backward, arch, &db);
  if (!resolved) return resolved.takeError();
  auto outcome = precompile_class(problem, backward_search(problem, deterministic, *resolved), arch,
                                  max_smem_bytes, db, threads, worker_binary);
  if (!outcome || modifiers.empty()) return outcome;
  const Modifiers compiled = modifiers_of_pass(*resolved, Pass::backward);
  store_reference(generate_reference_attention(compiled), "reference_attention", compiled, arch,
                  db, *outcome);
  store_reference(generate_reference_attention_backward(compiled), "reference_attention_backward",
                  compiled, arch, db, *outcome);
  return outcome;
}

}  // namespace flashjit
