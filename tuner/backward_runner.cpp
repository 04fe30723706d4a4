#include "tuner/backward_runner.h"

#include <map>

#include "generator/backward_steps.h"
#include "generator/bwd_sm90_traits.h"
#include "tuner/backward_bench.h"
#include "tuner/candidates.h"

namespace flashjit {
namespace {

class BackwardRunner final : public InProcessRunner {
 public:
  BackwardRunner(ScopedDeviceContext scope, const Problem &problem,
                 const std::optional<PackedBatch> &packed, const DeviceInfo &device,
                 TuningDb *store, std::unique_ptr<ModifierInputs> modifier_inputs)
      : InProcessRunner(std::move(scope), problem, packed, device, store,
                        std::move(modifier_inputs)) {}
  // The bench reads the modifier inputs, which the base owns.
  llvm::Error make_bench() {
    auto bench = BackwardBench::make(problem_, packed_, device_, modifier_inputs_.get());
    if (!bench) return bench.takeError();
    bench_ = std::move(*bench);
    return llvm::Error::success();
  }

  llvm::Expected<LoadedCandidate> load_cubin(int index, const KernelSpec &spec,
                                             llvm::ArrayRef<char> cubin,
                                             const std::string &entry) override {
    return keep(index, BackwardKernels::load(spec, cubin, entry));
  }
  llvm::Expected<LoadedCandidate> load_stand_in(int index, const KernelSpec &spec,
                                                llvm::ArrayRef<char> cubin,
                                                const std::string &entry) override {
    return keep(index, BackwardKernels::stand_in(spec, cubin, entry));
  }
  llvm::Error warm_up(int index, double ms) override;
  llvm::Expected<Measurement> time(int index, int repeats) override;
  int input_sets() const override { return bench_->sets(); }

 private:
  const std::string &bench_broken() const override { return bench_->broken(); }
  llvm::Expected<std::string> run_check(int index) override;
  // Describes the loaded program and keeps it as candidate `index`.
  llvm::Expected<LoadedCandidate> keep(int index, llvm::Expected<BackwardKernels> kernels);

  std::unique_ptr<BackwardBench> bench_;
  std::map<int, BackwardKernels> programs_;
};

llvm::Expected<LoadedCandidate> BackwardRunner::keep(int index,
                                                     llvm::Expected<BackwardKernels> kernels) {
  if (!kernels) return kernels.takeError();
  LoadedCandidate out;
  const LoadedKernel &main = kernels->main();
  out.registers = main.attributes().registers;
  out.spill_bytes = main.attributes().local_bytes;
  out.static_smem_bytes = main.attributes().static_smem_bytes;
  out.dynamic_smem_bytes = main.dynamic_smem_bytes();
  // Every kernel of the program must be worth running: the deterministic
  // dQ kernel does a third of the work and could spill on its own.
  const auto steps = backward_steps(kernels->spec, problem_);
  for (size_t k = 0; k < steps.size() && out.rejected.empty(); ++k) {
    const LoadedKernel &kernel = kernels->kernels[k];
    auto occupancy = kernel.occupancy(int(steps[k].geometry.block.x));
    if (!occupancy)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "occupancy of " + kernel.entry() + ": " + llvm::toString(occupancy.takeError()));
    if (&kernel == &main) out.occupancy = *occupancy;
    // The sm90 main kernel's producer keeps its loop's state in local memory
    // by design (BwdSm90Traits::kProducerSpillBytes): with two Q/dO stages
    // at d=160-192 112 bytes, and 4-9% faster than one stage with none.
    const bool sm90_main = &kernel == &main && kernels->spec.config.path == KernelPath::sm90;
    const int max_spill =
        kDefaultMaxSpillBytes + (sm90_main ? BwdSm90Traits::kProducerSpillBytes : 0);
    if (auto reason = reject_compiled(kernel.attributes().local_bytes, *occupancy, max_spill))
      out.rejected = kernel.entry() + " " + *reason;
  }
  programs_.insert_or_assign(index, std::move(*kernels));
  return out;
}

llvm::Error BackwardRunner::warm_up(int index, double ms) {
  auto c = find_loaded(programs_, index);
  if (!c) return c.takeError();
  return bench_->warm_up(**c, ms);
}

llvm::Expected<Measurement> BackwardRunner::time(int index, int repeats) {
  auto c = find_loaded(programs_, index);
  if (!c) return c.takeError();
  return bench_->time(**c, repeats);
}

llvm::Expected<std::string> BackwardRunner::run_check(int index) {
  auto c = find_loaded(programs_, index);
  if (!c) return c.takeError();
  auto report = check_backward_kernels(**c, problem_, packed_, bench_->stream(), store_,
                                       modifier_inputs_.get());
  if (!report) return report.takeError();
  return report->passed() ? std::string() : report->describe();
}

}  // namespace

llvm::Expected<std::unique_ptr<InProcessRunner>> make_backward_runner(
    ScopedDeviceContext scope, const Problem &problem, const std::optional<PackedBatch> &packed,
    const DeviceInfo &device, TuningDb *store, std::unique_ptr<ModifierInputs> modifier_inputs) {
  auto runner = std::make_unique<BackwardRunner>(std::move(scope), problem, packed, device, store,
                                                 std::move(modifier_inputs));
  if (llvm::Error e = runner->make_bench()) return e;
  return runner;
}

}  // namespace flashjit
