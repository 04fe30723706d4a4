#include "tuner/forward_runner.h"

#include <algorithm>
#include <map>

#include "generator/block_map.h"
#include "runtime/loaded_kernel.h"
#include "tuner/candidates.h"
#include "tuner/forward_bench.h"

namespace flashjit {
namespace {

class ForwardRunner final : public InProcessRunner {
 public:
  ForwardRunner(ScopedDeviceContext scope, const Problem &problem,
                const std::optional<PackedBatch> &packed, const DeviceInfo &device,
                TuningDb *store, std::unique_ptr<ModifierInputs> modifier_inputs)
      : InProcessRunner(std::move(scope), problem, packed, device, store,
                        std::move(modifier_inputs)) {}
  // The bench reads the modifier inputs, which the base owns.
  llvm::Error make_bench() {
    auto bench = ForwardBench::make(problem_, packed_, device_, modifier_inputs_.get());
    if (!bench) return bench.takeError();
    bench_ = std::move(*bench);
    return llvm::Error::success();
  }

  llvm::Expected<LoadedCandidate> load_cubin(int index, const KernelSpec &spec,
                                             llvm::ArrayRef<char> cubin,
                                             const std::string &entry) override;
  // A forward program is its main kernel (and the split-KV combine kernel,
  // loaded beside it): the stand-in is loaded in the main kernel's place. Its
  // program has no combine kernel, so it is loaded as a spec without splits
  // (it faults or hangs before a combine would run).
  llvm::Expected<LoadedCandidate> load_stand_in(int index, const KernelSpec &spec,
                                                llvm::ArrayRef<char> cubin,
                                                const std::string &entry) override {
    KernelSpec alone = spec;
    alone.split_kv = false;
    return load_cubin(index, alone, cubin, entry);
  }
  llvm::Error warm_up(int index, double ms) override;
  llvm::Expected<Measurement> time(int index, int repeats) override;
  int input_sets() const override { return bench_->sets(); }

 private:
  const std::string &bench_broken() const override { return bench_->broken(); }
  llvm::Expected<std::string> run_check(int index) override;
  struct Loaded {
    KernelSpec spec;
    LoadedKernel kernel;
    LoadedKernel combine;  // split-KV specs: the program's combine kernel
    // A mask_mod's block map (has_block_map): its pre-pass kernels.
    LoadedKernel block_kinds, block_list, block_runs, block_mask_grid;
    LaunchGeometry geometry;
    int resident_ctas = 0;
    // Stable once the map holds it.
    ForwardKernels kernels() const {
      ForwardKernels k{&kernel, spec.split_kv ? &combine : nullptr, resident_ctas};
      if (has_block_map(spec)) {
        k.block_kinds = &block_kinds;
        k.block_list = &block_list;
        k.block_runs = &block_runs;
        k.block_mask_grid = &block_mask_grid;
        k.id = spec.id();
      }
      return k;
    }
  };

  std::unique_ptr<ForwardBench> bench_;
  std::map<int, Loaded> kernels_;
};

llvm::Expected<LoadedCandidate> ForwardRunner::load_cubin(int index, const KernelSpec &spec,
                                                          llvm::ArrayRef<char> cubin,
                                                          const std::string &entry) {
  Loaded state;
  state.spec = spec;
  state.geometry = forward_launch_geometry(spec, problem_);
  auto kernel = LoadedKernel::load(cubin, entry, state.geometry.dynamic_smem_bytes);
  if (!kernel) return kernel.takeError();
  state.kernel = std::move(*kernel);
  LoadedCandidate out;
  const KernelAttributes &a = state.kernel.attributes();
  out.registers = a.registers;
  out.spill_bytes = a.local_bytes;
  out.static_smem_bytes = a.static_smem_bytes;
  out.dynamic_smem_bytes = int(state.geometry.dynamic_smem_bytes);
  auto occupancy = state.kernel.occupancy(int(state.geometry.block.x));
  if (!occupancy)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "occupancy: " + llvm::toString(occupancy.takeError()));
  out.occupancy = *occupancy;
  state.resident_ctas = state.kernel.sm_count() * std::max(*occupancy, 1);
  if (spec.split_kv) {
    // Timed and checked as a call runs it: main kernel, then the combine.
    auto combine = LoadedKernel::load(cubin, "flashjit_fwd_combine", 0);
    if (!combine) return combine.takeError();
    state.combine = std::move(*combine);
  }
  if (has_block_map(spec)) {
    // Timed as a call runs it: the block map's pre-pass, then the kernel.
    for (auto [loaded, entry_name] :
         {std::pair{&state.block_kinds, "flashjit_fwd_block_kinds"},
          std::pair{&state.block_list, "flashjit_fwd_block_list"},
          std::pair{&state.block_runs, "flashjit_fwd_block_runs"},
          std::pair{&state.block_mask_grid, "flashjit_block_mask_grid"}}) {
      auto part = LoadedKernel::load(cubin, entry_name, 0);
      if (!part) return part.takeError();
      *loaded = std::move(*part);
    }
  }
  if (auto reason = reject_compiled(out.spill_bytes, out.occupancy)) out.rejected = *reason;
  kernels_[index] = std::move(state);
  return out;
}

llvm::Error ForwardRunner::warm_up(int index, double ms) {
  auto c = find_loaded(kernels_, index);
  if (!c) return c.takeError();
  return bench_->warm_up((*c)->kernels(), (*c)->spec, ms);
}

llvm::Expected<Measurement> ForwardRunner::time(int index, int repeats) {
  auto c = find_loaded(kernels_, index);
  if (!c) return c.takeError();
  return bench_->time((*c)->kernels(), (*c)->spec, repeats);
}

llvm::Expected<std::string> ForwardRunner::run_check(int index) {
  auto c = find_loaded(kernels_, index);
  if (!c) return c.takeError();
  auto report =
      check_forward_kernel((*c)->kernels(), (*c)->spec, problem_, packed_, bench_->stream(),
                           store_, modifier_inputs_.get());
  if (!report) return report.takeError();
  return report->passed ? std::string() : report->describe();
}

}  // namespace

llvm::Expected<std::unique_ptr<InProcessRunner>> make_forward_runner(
    ScopedDeviceContext scope, const Problem &problem, const std::optional<PackedBatch> &packed,
    const DeviceInfo &device, TuningDb *store, std::unique_ptr<ModifierInputs> modifier_inputs) {
  auto runner = std::make_unique<ForwardRunner>(std::move(scope), problem, packed, device, store,
                                                std::move(modifier_inputs));
  if (llvm::Error e = runner->make_bench()) return e;
  return runner;
}

}  // namespace flashjit
