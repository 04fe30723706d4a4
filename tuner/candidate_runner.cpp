#include "tuner/candidate_runner.h"

#include "tuner/backward_runner.h"
#include "tuner/forward_runner.h"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit {

llvm::Expected<std::unique_ptr<InProcessRunner>> InProcessRunner::make(
    Pass pass, const Problem &problem, const std::optional<PackedBatch> &packed, int device,
    TuningDb *store, const TunedModifiers &modifiers) {
  // The context first: the bench's buffers are allocated in it.
  auto scope = ScopedDeviceContext::make(device);
  if (!scope) return scope.takeError();
  auto info = query_device(device);
  if (!info) return info.takeError();
  auto inputs = make_modifier_inputs(problem, modifiers);
  if (!inputs) return inputs.takeError();
  if (pass == Pass::backward)
    return make_backward_runner(std::move(*scope), problem, packed, *info, store,
                                std::move(*inputs));
  return make_forward_runner(std::move(*scope), problem, packed, *info, store, std::move(*inputs));
}

llvm::Expected<LoadedCandidate> InProcessRunner::load(int index, const KernelSpec &spec,
                                                      const CubinResult &cubin) {
  return load_cubin(index, spec, cubin.bytes, cubin.entry);
}

llvm::Expected<std::string> InProcessRunner::check(int index) {
  auto verdict = run_check(index);
  if (verdict) return verdict;
  const std::string why = llvm::toString(verdict.takeError());
  if (llvm::Error health = check_context_health())
    broken_by_check_ =
        "the accuracy check broke the CUDA context: " + llvm::toString(std::move(health));
  return why;
}

std::string InProcessRunner::broken() const {
  return !bench_broken().empty() ? bench_broken() : broken_by_check_;
}

llvm::Error InProcessRunner::not_loaded(int index) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 llvm::formatv("candidate {0} is not loaded", index).str());
}

}  // namespace flashjit
