// A cubin loaded into a context: owns the CUmodule, exposes the function and
// its compiled attributes, and knows the dynamic shared memory it needs.
#pragma once

#include <cuda.h>

#include <string>

#include "generator/launch_geometry.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

namespace flashjit {

struct KernelAttributes {
  int registers = 0;
  int static_smem_bytes = 0;
  int local_bytes = 0;  // per thread: spills and stack
  int max_threads_per_block = 0;
  int ptx_version = 0;
  int binary_version = 0;
};

class LoadedKernel {
 public:
  LoadedKernel() = default;
  LoadedKernel(const LoadedKernel &) = delete;
  LoadedKernel &operator=(const LoadedKernel &) = delete;
  LoadedKernel(LoadedKernel &&other) noexcept;
  LoadedKernel &operator=(LoadedKernel &&other) noexcept;
  ~LoadedKernel();

  // Loads into the current context (or the primary context of device 0 made
  // current, as current_or_primary_context()) and raises the function's dynamic shared
  // memory limit to `dynamic_smem_bytes` (needed above 48 KB).
  static llvm::Expected<LoadedKernel> load(llvm::ArrayRef<char> cubin, const std::string &entry,
                                           int dynamic_smem_bytes);

  CUfunction function() const { return function_; }
  CUcontext context() const { return context_; }
  const std::string &entry() const { return entry_; }
  int dynamic_smem_bytes() const { return dynamic_smem_bytes_; }
  const KernelAttributes &attributes() const { return attributes_; }
  // SMs of the device it is loaded on: the grid of a persistent kernel.
  int sm_count() const { return sm_count_; }
  // The device of the context it is loaded in.
  CUdevice device() const { return device_; }
  // Blocks of this kernel resident per SM with `threads` threads.
  llvm::Expected<int> occupancy(int threads) const;

  // Launches with `geometry` (its dynamic shared memory must not exceed the
  // limit set at load, or 48 KB when none was). The error names the entry and
  // the geometry. Counts in runtime_stats().launches. `dependent`: a
  // programmatic dependent launch (the kernel runs griddepcontrol.wait
  // before it reads what the kernel before it on the stream wrote).
  llvm::Error launch(const LaunchGeometry &geometry, CUstream stream, void **params,
                     bool dependent = false) const;

 private:
  CUmodule module_ = nullptr;
  CUfunction function_ = nullptr;
  CUcontext context_ = nullptr;
  std::string entry_;
  int dynamic_smem_bytes_ = 0;
  int sm_count_ = 0;
  CUdevice device_ = 0;
  KernelAttributes attributes_;
};

}  // namespace flashjit
