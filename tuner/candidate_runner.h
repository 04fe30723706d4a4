// Where a tune's candidates are loaded, timed and checked on the GPU: in
// this process (InProcessRunner, below) or in a worker process that a fault
// cannot take the tuner down with (WorkerRunner, tuner/worker_runner.h).
// The tuner talks to either through this interface, by candidate index,
// whichever pass it tunes.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "cache/tuning_db.h"
#include "flashjit/problem.h"
#include "generator/kernel_spec.h"
#include "reference/packed_batch.h"
#include "runtime/device.h"
#include "tuner/cubin_batch.h"
#include "tuner/device_context.h"
#include "tuner/modifier_inputs.h"
#include "tuner/search.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

namespace flashjit {

// What the tuner needs of a loaded candidate: its compiled resources (of the
// main kernel, for a program of several) and whether it is worth timing.
struct LoadedCandidate {
  int registers = 0;
  int spill_bytes = 0;  // local memory per thread
  int static_smem_bytes = 0;
  int dynamic_smem_bytes = 0;  // what the launch asks for
  int occupancy = 0;           // CTAs per SM with the candidate's block size
  // Why the compiled program is not worth timing (reject_compiled over each
  // of its kernels); empty when it is.
  std::string rejected;
};

class CandidateRunner {
 public:
  virtual ~CandidateRunner() = default;
  // Loads candidate `index` (compiled for `spec`; `cubin` from the compile
  // phase: its bytes, or only its key when the compile ran in a worker).
  virtual llvm::Expected<LoadedCandidate> load(int index, const KernelSpec &spec,
                                               const CubinResult &cubin) = 0;
  // Runs the loaded candidate for about `ms` so that clocks have ramped up.
  virtual llvm::Error warm_up(int index, double ms) = 0;
  virtual llvm::Expected<Measurement> time(int index, int repeats) = 0;
  // Empty when the candidate's output passes its pass's accuracy check (the
  // forward against the GPU reference, the backward against float64 CPU
  // gradients); else why not.
  virtual llvm::Expected<std::string> check(int index) = 0;
  virtual int input_sets() const = 0;
  // Non-empty when the GPU can no longer be used by this runner (a fault in
  // this process's context): the tune must stop. A worker runner replaces
  // its worker instead and is never broken.
  virtual std::string broken() const = 0;
};

// Everything in the calling thread's process, in device `device`'s context
// (made current while the runner lives). A GPU fault breaks that context for
// the rest of the process: broken() says so and the tune stops. Also the
// engine of the measuring worker process. One subclass per pass
// (tuner/forward_runner.h, tuner/backward_runner.h) owns that pass's bench
// and accuracy check.
class InProcessRunner : public CandidateRunner {
 public:
  // `store` (optional) holds the GPU reference's cubin for the forward's
  // check(). `packed`: a varlen problem's sequence lengths, which its
  // inputs are packed by (required for varlen; none otherwise).
  // `modifiers`: what the candidates compile of a caller's modifiers, and
  // the scalar values they run with (every run and check gets their
  // inputs: make_modifier_inputs).
  static llvm::Expected<std::unique_ptr<InProcessRunner>> make(
      Pass pass, const Problem &problem, const std::optional<PackedBatch> &packed, int device,
      TuningDb *store, const TunedModifiers &modifiers = {});

  llvm::Expected<LoadedCandidate> load(int index, const KernelSpec &spec,
                                       const CubinResult &cubin) override;
  // The same from the cubin's bytes; `entry` is the program's main kernel.
  virtual llvm::Expected<LoadedCandidate> load_cubin(int index, const KernelSpec &spec,
                                                     llvm::ArrayRef<char> cubin,
                                                     const std::string &entry) = 0;
  // Test plants (tuner/planted_faults.h): kernel `entry` of `cubin` is
  // launched in place of every kernel of `spec`'s program, with its
  // geometry and arguments.
  virtual llvm::Expected<LoadedCandidate> load_stand_in(int index, const KernelSpec &spec,
                                                        llvm::ArrayRef<char> cubin,
                                                        const std::string &entry) = 0;
  const DeviceInfo &device() const { return device_; }
  // run_check's verdict; a check that ends in an error may have broken the
  // context (broken() then says so).
  llvm::Expected<std::string> check(int index) final;
  // The bench's fault, else one a failed accuracy check left behind.
  std::string broken() const override;

 protected:
  InProcessRunner(ScopedDeviceContext scope, const Problem &problem,
                  const std::optional<PackedBatch> &packed, const DeviceInfo &device,
                  TuningDb *store, std::unique_ptr<ModifierInputs> modifier_inputs)
      : scope_(std::move(scope)), problem_(problem), packed_(packed), device_(device),
        store_(store), modifier_inputs_(std::move(modifier_inputs)) {}
  // Non-empty once a fault broke the context under the subclass's bench.
  virtual const std::string &bench_broken() const = 0;
  // The pass's accuracy check of candidate `index`: empty when it passes.
  virtual llvm::Expected<std::string> run_check(int index) = 0;
  // Candidate `index` of a subclass's loaded candidates, or an error saying
  // it is not loaded.
  template <typename Loaded>
  static llvm::Expected<Loaded *> find_loaded(std::map<int, Loaded> &loaded, int index) {
    auto it = loaded.find(index);
    if (it == loaded.end()) return not_loaded(index);
    return &it->second;
  }
  static llvm::Error not_loaded(int index);

  // First, so that it is destroyed last: every kernel and buffer of the
  // subclass lives in this context and must be released while it is current.
  ScopedDeviceContext scope_;
  const Problem problem_;
  const std::optional<PackedBatch> packed_;  // a varlen problem's lengths
  const DeviceInfo device_;
  TuningDb *const store_;
  // A caller's modifiers and their inputs on the device; null without.
  const std::unique_ptr<ModifierInputs> modifier_inputs_;

 private:
  std::string broken_by_check_;
};

}  // namespace flashjit
