// The tuner's timing harness for the backward: a candidate is the whole
// backward program (preprocess, main kernel, dQ conversion or the
// deterministic dQ kernel), loaded from one cubin and timed as one launch,
// since that is what a training step pays. Input sets are rotated past L2
// as ForwardBench does, and the winner is checked against float64 CPU
// gradients on a small problem of the class (reference/backward_check.h).
#pragma once

#include <cuda.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/tuning_db.h"
#include "flashjit/backward.h"
#include "generator/kernel_spec.h"
#include "reference/accuracy.h"
#include "reference/packed_batch.h"
#include "runtime/device.h"
#include "runtime/device_buffer.h"
#include "runtime/loaded_kernel.h"
#include "templates/common/bwd_params.cuh"
#include "tuner/event_timer.h"
#include "tuner/modifier_inputs.h"
#include "tuner/search.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

namespace flashjit {

// One backward candidate: its program's kernels, loaded in the current
// context in backward_steps order.
struct BackwardKernels {
  KernelSpec spec;
  std::string id;  // spec.id(), once: the key of the program's kept block maps
  std::vector<LoadedKernel> kernels;
  // With a mask_mod's block map (has_block_map): kinds, list, mask grid.
  std::vector<LoadedKernel> block_map;

  static llvm::Expected<BackwardKernels> load(const KernelSpec &spec, llvm::ArrayRef<char> cubin,
                                              const std::string &entry);
  // Kernel `entry` of `cubin` loaded once per step of `spec`'s program, with
  // that step's shared memory, so that launch() runs it in place of each
  // (the tuner's planted test faults, tuner/planted_faults.h).
  static llvm::Expected<BackwardKernels> stand_in(const KernelSpec &spec,
                                                  llvm::ArrayRef<char> cubin,
                                                  const std::string &entry);
  // The one that parallelises over key tiles: its registers, spills and
  // occupancy are the candidate's.
  const LoadedKernel &main() const;
  // Enqueues every step for `problem` on `args`' tensors on `stream` (the
  // sm90 main kernel with its tensor maps).
  llvm::Error launch(const Problem &problem, const BackwardArgs &args, CUstream stream) const;
};

class BackwardBench {
 public:
  // Allocates ceil(2 x L2 / bytes per set) input sets in the current context
  // (at least one; at most what half the free memory holds, and 32): random
  // q, k, v, O and dO, an LSE of the size softmax over seqlen_k keys has, the
  // gradients and the workspace; and a stream. A varlen problem's sets are
  // packed batches of `packed`'s lengths (required then, validated).
  // `modifiers` (or null): a caller's modifiers and their inputs, which
  // every set's call carries (with a dsinks buffer of its own when they
  // have sinks); they must outlive the bench.
  static llvm::Expected<std::unique_ptr<BackwardBench>> make(
      const Problem &problem, const std::optional<PackedBatch> &packed, const DeviceInfo &device,
      const ModifierInputs *modifiers = nullptr);
  ~BackwardBench();
  BackwardBench(const BackwardBench &) = delete;
  BackwardBench &operator=(const BackwardBench &) = delete;

  int sets() const { return static_cast<int>(sets_.size()); }
  CUstream stream() const { return stream_; }

  // Per-call median, min and max in ms of the whole backward (EventTimer).
  llvm::Expected<Measurement> time(const BackwardKernels &kernels, int repeats);
  // Runs `kernels` for about `ms` so the GPU's clocks have ramped up.
  llvm::Error warm_up(const BackwardKernels &kernels, double ms);

  // Non-empty once a fault broke the context: every later timing fails at
  // once with this reason.
  const std::string &broken() const { return broken_; }

 private:
  BackwardBench() = default;
  struct InputSet {
    DeviceBuffer q, k, v, o, dout, lse, dq, dk, dv, workspace, dsinks;
    std::optional<PackedBackwardInputs> packed;  // a varlen class: its own buffers
    BackwardArgs args;
  };
  llvm::Error launch(const BackwardKernels &kernels);
  llvm::Error failed(llvm::Error error);

  Problem problem_;
  std::vector<InputSet> sets_;
  size_t next_ = 0;
  CUstream stream_ = nullptr;
  EventTimer timer_;
  std::string broken_;
};

// Runs `kernels` on backward_accuracy_problem(problem) and compares the
// gradients with the float64 CPU reference (factor 3). A varlen problem
// runs on backward_accuracy_packed_batch(*packed), each sequence's
// gradients against its own float64 ones. With `modifiers` (dense
// problems) the reference is the GPU's, which compiles them in
// (check_modified_backward; its cubins from or into `store`).
llvm::Expected<GradientAccuracyReport> check_backward_kernels(
    const BackwardKernels &kernels, const Problem &problem,
    const std::optional<PackedBatch> &packed, CUstream stream, TuningDb *store = nullptr,
    const ModifierInputs *modifiers = nullptr);

// The packed batch a varlen backward is checked on: at most three of
// `packed`'s sequences (the longest among them), lengths scaled so the
// longest is at most kBackwardCheckMaxSeqlen (the float64 CPU reference's
// cost); irregular lengths stay.
PackedBatch backward_accuracy_packed_batch(const PackedBatch &packed);

}  // namespace flashjit
