// What every `flashjit run` report shares (forward, packed, backward): the
// JSON fields of the kernel, the device, the problem and the timing, and the
// text report's first lines.
#pragma once

#include <cstddef>

#include "generator/kernel_spec.h"
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

}  // namespace flashjit::cli
