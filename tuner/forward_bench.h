// The tuner's timing harness for forward kernels: input sets rotated so that
// each run reads data the previous runs have pushed out of L2 (as in a model,
// where attention's inputs come from HBM), CUDA-event timing of back-to-back
// launches, and the accuracy check of a winner against the GPU reference.
#pragma once

#include <cuda.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "flashjit/forward.h"
#include "cache/tuning_db.h"
#include "generator/kernel_spec.h"
#include "reference/accuracy.h"
#include "reference/packed_batch.h"
#include "runtime/device.h"
#include "runtime/device_buffer.h"
#include "runtime/launch_forward.h"
#include "runtime/loaded_kernel.h"
#include "templates/common/fwd_params.cuh"
#include "tuner/event_timer.h"
#include "tuner/kv_cache_inputs.h"
#include "tuner/modifier_inputs.h"
#include "tuner/search.h"
#include "llvm/Support/Error.h"

namespace flashjit {

class ForwardBench {
 public:
  // Allocates ceil(2 x L2 / bytes per set) input sets in the current context
  // (at least one; at most what half the free memory holds, and 32), fills
  // them with random values and creates a stream. A varlen problem's sets
  // are packed batches of `packed`'s lengths (required then, validated).
  // `modifiers` (or null): a caller's modifiers and their inputs, which
  // every set's call carries; they must outlive the bench.
  static llvm::Expected<std::unique_ptr<ForwardBench>> make(
      const Problem &problem, const std::optional<PackedBatch> &packed, const DeviceInfo &device,
      const ModifierInputs *modifiers = nullptr);
  ~ForwardBench();
  ForwardBench(const ForwardBench &) = delete;
  ForwardBench &operator=(const ForwardBench &) = delete;

  int sets() const { return static_cast<int>(sets_.size()); }
  size_t bytes_per_set() const { return bytes_per_set_; }
  CUstream stream() const { return stream_; }

  // EventTimer's method: one warm-up launch, then `repeats` samples, each of
  // as many back-to-back launches as last about EventTimer::kSampleMs (one
  // for ~1 ms kernels): per-launch median, min and max in ms. A sample of
  // several launches keeps the per-launch gap out of short kernels' times.
  // A launch is what a call enqueues (enqueue_forward): the main kernel with
  // the spec's arguments (sm90 adds TMA tensor maps) and, with split-KV, the
  // config's split count, the workspace and the combine kernel.
  llvm::Expected<Measurement> time(const ForwardKernels &kernels, const KernelSpec &spec,
                                   int repeats);
  // Runs the kernels for about `ms` so that the GPU's clocks have ramped up
  // before the first candidate is timed.
  llvm::Error warm_up(const ForwardKernels &kernels, const KernelSpec &spec, double ms);

  // Non-empty once a fault (an illegal address, a trap) broke the context:
  // every later timing fails at once with this reason.
  const std::string &broken() const { return broken_; }

 private:
  ForwardBench() = default;
  struct InputSet {
    DeviceBuffer q, k, v, o, lse;
    DeviceBuffer descale;  // the e4m3 tensors' factors (an fp8 class), else empty
    KvCacheInputs cache;  // a KV-cache class: the dense problem's keys in order
    std::optional<PackedForwardInputs> packed;  // a varlen class: its own buffers
    ForwardArgs args;
    FwdParams params;
  };
  llvm::Error launch(const ForwardKernels &kernels, const KernelSpec &spec);
  // Turns a CUDA failure into the candidate's error; marks the bench broken
  // when the context no longer works.
  llvm::Error failed(llvm::Error error);

  Problem problem_;
  std::vector<InputSet> sets_;
  size_t bytes_per_set_ = 0;
  size_t next_ = 0;
  CUstream stream_ = nullptr;
  EventTimer timer_;
  std::string broken_;
};

// The problem a winner's accuracy is checked on: `problem` itself when small,
// else a smaller one of the same class (the compiled kernel is the same):
// seqlens clamped to 2048, batch 1, at most two KV heads (GQA ratio kept).
Problem accuracy_problem(const Problem &problem);

// Runs the kernels of `spec` as a call does (enqueue_forward) on random inputs of
// accuracy_problem(problem), with NaN-poisoned outputs, and compares with
// the GPU reference in exact and element precision (DESIGN.md's criterion).
// With `modifiers` (dense problems) the kernels and the reference both run
// them on their inputs (sized for `problem`, so for its smaller one too).
// A varlen problem runs on a packed batch of `packed`'s lengths made small
// (accuracy_packed_batch), each sequence checked on its own rows. The
// reference kernel's cubin comes from (or goes to) `store`.
llvm::Expected<AccuracyReport> check_forward_kernel(const ForwardKernels &kernels,
                                                    const KernelSpec &spec, const Problem &problem,
                                                    const std::optional<PackedBatch> &packed,
                                                    CUstream stream, TuningDb *store = nullptr,
                                                    const ModifierInputs *modifiers = nullptr);

// The packed batch a varlen winner's forward is checked on: at most four
// of `packed`'s sequences (the longest among them), lengths scaled so the
// longest is at most accuracy_problem's 2048; irregular lengths stay.
PackedBatch accuracy_packed_batch(const PackedBatch &packed);

}  // namespace flashjit
