#include "cli/run_report.h"

#include <algorithm>
#include <cmath>

#include "cli/cli_common.h"
#include "runtime/cuda_driver.h"
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

void add_packed_json(llvm::json::Object &o, const PackedBatch &batch) {
  llvm::json::Array json_q, json_k;
  for (int64_t n : batch.seqlens_q) json_q.push_back(n);
  for (int64_t n : batch.seqlens_k) json_k.push_back(n);
  o["seqlens_q"] = std::move(json_q);
  o["seqlens_k"] = std::move(json_k);
  o["total_q"] = batch.total_q();
  o["total_k"] = batch.total_k();
}

void print_packed_line(llvm::raw_ostream &os, const PackedBatch &batch) {
  os << llvm::formatv("packed   {0} sequences, {1} queries and {2} keys in all\n", batch.size(),
                      batch.total_q(), batch.total_k());
}

namespace {

// One gradient's check: accuracy_json's fields less the forward's LSE ones,
// which a gradient has none of.
llvm::json::Object gradient_fields(const AccuracyReport &r) {
  return llvm::json::Object{{"passed", r.passed},
                            {"max_err", r.max_err},
                            {"baseline_err", r.baseline_err},
                            {"tolerance", r.tolerance},
                            {"unwritten", int64_t(r.unwritten)}};
}

// {"passed", "dq", "dk", "dv"} of a backward's gradient check.
llvm::json::Object gradient_check_json(const GradientAccuracyReport &report) {
  return llvm::json::Object{{"passed", report.passed()},
                            {"dq", gradient_fields(report.dq)},
                            {"dk", gradient_fields(report.dk)},
                            {"dv", gradient_fields(report.dv)}};
}

}  // namespace

int report_backward_run(const BackwardRun &r, bool json) {
  if (json) {
    llvm::json::Object o =
        run_json(r.spec, r.device, r.problem, r.timing, r.repeats, r.input_sets);
    if (r.packed) add_packed_json(o, *r.packed);
    o["pass"] = "bwd";
    o["deterministic"] = r.spec.config.deterministic;
    o["tflops"] = r.tflops;
    if (r.aux_lines) {
      llvm::json::Array aux;
      for (const std::string &line : *r.aux_lines) aux.push_back(line);
      o["aux"] = std::move(aux);
    }
    if (r.accuracy) {
      llvm::json::Object check = gradient_check_json(*r.accuracy);
      check["problem"] = problem_json(r.checked);
      if (r.checked_packed) add_packed_json(check, *r.checked_packed);
      o["check"] = std::move(check);
    }
    print_json(std::move(o));
  } else {
    llvm::raw_ostream &os = llvm::outs();
    print_run_head(os, r.spec, r.device, r.problem);
    if (r.packed) print_packed_line(os, *r.packed);
    os << llvm::formatv("config   {0}\n", describe(r.spec.config));
    if (r.aux_lines)
      for (const std::string &line : *r.aux_lines) os << "aux      " << line << "\n";
    if (r.accuracy)
      os << llvm::formatv("check    {0} (on {1})\n", r.accuracy->describe(),
                          r.checked_packed ? describe_packed(r.checked, *r.checked_packed)
                                           : describe(r.checked));
    os << llvm::formatv("time     {0:f3} ms median (min {1:f3}, max {2:f3}; {3} runs, {4} input "
                        "sets; preprocess + main + dQ kernels)\n",
                        r.timing.median_ms, r.timing.min_ms, r.timing.max_ms, r.repeats,
                        r.input_sets);
    os << llvm::formatv("perf     {0:f1} TFLOP/s (backward FLOPs = 2.5x forward)\n", r.tflops);
  }
  return r.accuracy && !r.accuracy->passed() ? kExitFailure : kExitOk;
}

llvm::Error synchronize() {
  auto driver = cuda_driver();
  if (!driver) return driver.takeError();
  return cuda_check(driver->cuCtxSynchronize(), "cuCtxSynchronize");
}

size_t rotation_copies(double set_bytes, const DeviceInfo &device) {
  return std::clamp<size_t>(size_t(std::ceil(2.0 * device.l2_bytes / std::max(set_bytes, 1.0))),
                            1, 16);
}

int report_packed_forward_run(const PackedForwardRun &r, bool json) {
  if (json) {
    llvm::json::Object o = run_json(r.spec, r.device, r.problem, r.timing, r.repeats, r.input_sets);
    add_packed_json(o, r.lengths);
    o["tflops"] = r.tflops;
    o["gbps"] = r.gbps;
    if (r.accuracy) o["check"] = accuracy_json(*r.accuracy);
    print_json(std::move(o));
  } else {
    llvm::raw_ostream &os = llvm::outs();
    print_run_head(os, r.spec, r.device, r.problem);
    print_packed_line(os, r.lengths);
    if (!r.cache_line.empty()) os << "cache    " << r.cache_line << "\n";
    os << llvm::formatv("config   {0}\n", describe(r.spec.config));
    if (r.accuracy) os << llvm::formatv("check    {0}\n", r.accuracy->describe());
    print_run_time(os, r.timing, r.repeats, r.input_sets);
    os << llvm::formatv("perf     {0:f1} TFLOP/s of the sequences' own work, {1:f1} GB/s (K and "
                        "V read once)\n",
                        r.tflops, r.gbps);
  }
  return r.accuracy && !r.accuracy->passed ? kExitFailure : kExitOk;
}

}  // namespace flashjit::cli
