// What every `flashjit run` report shares (forward, packed, backward): the
// JSON fields of the kernel, the device, the problem and the timing, and the
// text report's first lines.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "generator/kernel_spec.h"
#include "reference/accuracy.h"
#include "reference/packed_batch.h"
#include "runtime/device.h"
#include "runtime/device_buffer.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

namespace flashjit::cli {

// {"id", "device", "problem", "config", "median_ms", "min_ms", "max_ms",
// "repeats", "input_sets"}.
llvm::json::Object run_json(const KernelSpec &spec, const DeviceInfo &device,
                            const Problem &problem, const Timing &timing, int repeats,
                            size_t input_sets);

// The kernel, device and problem lines.
void print_run_head(llvm::raw_ostream &os, const KernelSpec &spec, const DeviceInfo &device,
                    const Problem &problem);

// The time line: median, min, max, runs and input sets.
void print_run_time(llvm::raw_ostream &os, const Timing &timing, int repeats, size_t input_sets);

// A packed batch's fields: "seqlens_q", "seqlens_k", "total_q", "total_k".
void add_packed_json(llvm::json::Object &o, const PackedBatch &batch);
// "packed   3 sequences, 4413 queries and 4413 keys in all".
void print_packed_line(llvm::raw_ostream &os, const PackedBatch &batch);

// Waits for all work of the current context (before a check reads what a
// run wrote).
llvm::Error synchronize();

// Enough copies of an input set of `set_bytes` that one run's data has
// left the L2 when it comes back (1 to 16).
size_t rotation_copies(double set_bytes, const DeviceInfo &device);

// FlashAttention's convention: the backward does 2.5x the forward's FLOPs.
inline constexpr double kBackwardFlopsFactor = 2.5;

// What `run --pass bwd` measured, dense or packed.
struct BackwardRun {
  const KernelSpec &spec;
  const DeviceInfo &device;
  const Problem &problem;
  const Timing &timing;
  int repeats = 0;
  size_t input_sets = 0;
  double tflops = 0;  // kBackwardFlopsFactor x the forward's (the sequences' own when packed)
  // The gradient check, when asked for, and the (smaller) problem it ran on.
  const std::optional<GradientAccuracyReport> &accuracy;
  const Problem &checked;
  // A packed batch's lengths, and those of the batch the check ran on.
  const PackedBatch *packed = nullptr;
  const PackedBatch *checked_packed = nullptr;
  // What each of a caller's modifiers' inputs is (ModifierInputs::lines).
  const std::vector<std::string> *aux_lines = nullptr;
};
// Prints the report (JSON with `json`, else text: the head, the packed line,
// the config, the check, the time and TFLOP/s) and returns the exit code:
// failure when the check failed.
int report_backward_run(const BackwardRun &run, bool json);

// What `run --varlen` measured in the forward, with or without a KV cache.
struct PackedForwardRun {
  const KernelSpec &spec;
  const DeviceInfo &device;
  const Problem &problem;
  const Timing &timing;
  int repeats = 0;
  size_t input_sets = 0;
  const PackedBatch &lengths;
  double tflops = 0;  // of the sequences' own work
  double gbps = 0;    // K and V read once
  const std::optional<AccuracyReport> &accuracy;
  std::string cache_line;  // the serving call's cache, for the text report ("" : none)
};
// Prints the report (JSON with `json`, else text: the head, the packed line,
// the cache, the config, the check, the time and the rates) and returns the
// exit code: 1 when the check failed.
int report_packed_forward_run(const PackedForwardRun &run, bool json);

}  // namespace flashjit::cli
