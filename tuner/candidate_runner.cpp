#include "tuner/candidate_runner.h"

#include "llvm/Support/FormatVariadic.h"

namespace flashjit {
namespace {

llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

}  // namespace

llvm::Expected<std::unique_ptr<InProcessRunner>> InProcessRunner::make(const Problem &problem,
                                                                       int device,
                                                                       TuningDb *store) {
  auto scope = ScopedDeviceContext::make(device);
  if (!scope) return scope.takeError();
  std::unique_ptr<InProcessRunner> runner(new InProcessRunner(std::move(*scope)));
  auto info = query_device(device);
  if (!info) return info.takeError();
  runner->device_ = *info;
  runner->problem_ = problem;
  runner->store_ = store;
  auto bench = ForwardBench::make(problem, runner->device_);
  if (!bench) return bench.takeError();
  runner->bench_ = std::move(*bench);
  return runner;
}

llvm::Expected<LoadedCandidate> InProcessRunner::load(int index, const KernelSpec &spec,
                                                      const CubinResult &cubin) {
  return load_cubin(index, spec, cubin.bytes, cubin.entry);
}

llvm::Expected<LoadedCandidate> InProcessRunner::load_cubin(int index, const KernelSpec &spec,
                                                            llvm::ArrayRef<char> cubin,
                                                            const std::string &entry) {
  Loaded entry_state;
  entry_state.spec = spec;
  entry_state.geometry = forward_launch_geometry(spec, problem_);
  auto kernel = LoadedKernel::load(cubin, entry, entry_state.geometry.dynamic_smem_bytes);
  if (!kernel) return kernel.takeError();
  entry_state.kernel = std::move(*kernel);
  LoadedCandidate out;
  const KernelAttributes &a = entry_state.kernel.attributes();
  out.registers = a.registers;
  out.spill_bytes = a.local_bytes;
  out.static_smem_bytes = a.static_smem_bytes;
  auto occupancy = entry_state.kernel.occupancy(int(entry_state.geometry.block.x));
  if (!occupancy) return error("occupancy: " + llvm::toString(occupancy.takeError()));
  out.occupancy = *occupancy;
  kernels_[index] = std::move(entry_state);
  return out;
}

llvm::Expected<InProcessRunner::Loaded *> InProcessRunner::loaded(int index) {
  auto it = kernels_.find(index);
  if (it == kernels_.end()) return error(llvm::formatv("candidate {0} is not loaded", index));
  return &it->second;
}

llvm::Error InProcessRunner::warm_up(int index, double ms) {
  auto c = loaded(index);
  if (!c) return c.takeError();
  return bench_->warm_up((*c)->kernel, (*c)->spec, (*c)->geometry, ms);
}

llvm::Expected<Measurement> InProcessRunner::time(int index, int repeats) {
  auto c = loaded(index);
  if (!c) return c.takeError();
  return bench_->time((*c)->kernel, (*c)->spec, (*c)->geometry, repeats);
}

llvm::Expected<std::string> InProcessRunner::check(int index) {
  auto c = loaded(index);
  if (!c) return c.takeError();
  auto report = check_forward_kernel((*c)->kernel, (*c)->spec, problem_, bench_->stream(), store_);
  if (report) return report->passed ? std::string() : report->describe();
  const std::string why = llvm::toString(report.takeError());
  if (llvm::Error health = check_context_health())
    broken_ = "the accuracy check broke the CUDA context: " + llvm::toString(std::move(health));
  return why;
}

std::string InProcessRunner::broken() const {
  return !bench_->broken().empty() ? bench_->broken() : broken_;
}

}  // namespace flashjit
