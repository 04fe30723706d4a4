// Where a tune's candidates are loaded, timed and checked on the GPU: in
// this process (InProcessRunner, below) or in a worker process that a fault
// cannot take the tuner down with (WorkerRunner, tuner/worker_runner.h).
// The tuner talks to either through this interface, by candidate index.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "cache/tuning_db.h"
#include "flashjit/problem.h"
#include "generator/kernel_spec.h"
#include "runtime/device.h"
#include "runtime/loaded_kernel.h"
#include "tuner/cubin_batch.h"
#include "tuner/device_context.h"
#include "tuner/forward_bench.h"
#include "tuner/search.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

namespace flashjit {

// What the tuner needs of a loaded kernel: its compiled resources.
struct LoadedCandidate {
  int registers = 0;
  int spill_bytes = 0;  // local memory per thread
  int static_smem_bytes = 0;
  int occupancy = 0;  // CTAs per SM with the candidate's block size
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
  // Empty when the candidate's output passes the accuracy check against the
  // GPU reference; else why not.
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
// engine of the measuring worker process.
class InProcessRunner : public CandidateRunner {
 public:
  // `store` (optional) holds the GPU reference's cubin for check().
  static llvm::Expected<std::unique_ptr<InProcessRunner>> make(const Problem &problem,
                                                               int device, TuningDb *store);

  llvm::Expected<LoadedCandidate> load(int index, const KernelSpec &spec,
                                       const CubinResult &cubin) override;
  // The same from the cubin's bytes and entry.
  llvm::Expected<LoadedCandidate> load_cubin(int index, const KernelSpec &spec,
                                             llvm::ArrayRef<char> cubin, const std::string &entry);
  llvm::Error warm_up(int index, double ms) override;
  llvm::Expected<Measurement> time(int index, int repeats) override;
  llvm::Expected<std::string> check(int index) override;
  int input_sets() const override { return bench_->sets(); }
  std::string broken() const override;
  const DeviceInfo &device() const { return device_; }

 private:
  InProcessRunner(ScopedDeviceContext scope) : scope_(std::move(scope)) {}
  struct Loaded {
    KernelSpec spec;
    LoadedKernel kernel;
    LaunchGeometry geometry;
  };
  llvm::Expected<Loaded *> loaded(int index);

  // First, so that it is destroyed last: every kernel and buffer below lives
  // in this context and must be released while it is current.
  ScopedDeviceContext scope_;
  Problem problem_;
  DeviceInfo device_;
  TuningDb *store_ = nullptr;
  std::unique_ptr<ForwardBench> bench_;
  std::map<int, Loaded> kernels_;
  std::string broken_;  // by an accuracy check (the bench keeps its own)
};

}  // namespace flashjit
