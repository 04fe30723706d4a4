// What every `flashjit run` report shares (forward, packed, backward): the
// JSON fields of the kernel, the device, the problem and the timing, and the
// text report's first lines.
#pragma once

#include <cstddef>

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

// FlashAttention's convention: the backward does 2.5x the forward's FLOPs.
inline constexpr double kBackwardFlopsFactor = 2.5;
// {"passed", "dq", "dk", "dv"} of a backward's gradient check.
llvm::json::Object gradient_check_json(const GradientAccuracyReport &report);
// The backward's time line (what a call enqueues) and its TFLOP/s.
void print_backward_time(llvm::raw_ostream &os, const Timing &timing, int repeats,
                         size_t input_sets, double tflops);

}  // namespace flashjit::cli
