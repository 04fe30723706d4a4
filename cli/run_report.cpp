#include "cli/run_report.h"

#include "cli/cli_common.h"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit::cli {

llvm::json::Object run_json(const KernelSpec &spec, const DeviceInfo &device,
                            const Problem &problem, const Timing &timing, int repeats,
                            size_t input_sets) {
  return llvm::json::Object{{"id", spec.id()},
                            {"device", device.name},
                            {"problem", problem_json(problem)},
                            {"config", config_json(spec.config)},
                            {"median_ms", timing.median_ms},
                            {"min_ms", timing.min_ms},
                            {"max_ms", timing.max_ms},
                            {"repeats", repeats},
                            {"input_sets", int64_t(input_sets)}};
}

void print_run_head(llvm::raw_ostream &os, const KernelSpec &spec, const DeviceInfo &device,
                    const Problem &problem) {
  os << llvm::formatv("kernel   {0}\n", spec.id());
  os << llvm::formatv("device   {0}\n", device.name);
  os << llvm::formatv("problem  {0}\n", describe(problem));
}

void print_run_time(llvm::raw_ostream &os, const Timing &timing, int repeats, size_t input_sets) {
  os << llvm::formatv(
      "time     {0:f3} ms median (min {1:f3}, max {2:f3}; {3} runs, {4} input sets)\n",
      timing.median_ms, timing.min_ms, timing.max_ms, repeats, input_sets);
}

}  // namespace flashjit::cli
