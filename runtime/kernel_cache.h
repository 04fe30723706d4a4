// Loaded kernels of this process, keyed by kernel ID and CUDA context (a
// module belongs to one context). Concurrent first requests for one key
// compile once: the others wait for that result.
#pragma once

#include <cuda.h>

#include <functional>
#include <memory>
#include <string>

#include "runtime/loaded_kernel.h"
#include "llvm/Support/Error.h"

namespace flashjit {

class KernelCache {
 public:
  using Builder = std::function<llvm::Expected<std::unique_ptr<LoadedKernel>>()>;

  // The kernel for (id, context); `build` runs at most once per key while it
  // succeeds (a failed build is not cached, so a later call may retry).
  llvm::Expected<const LoadedKernel &> get_or_build(const std::string &id, CUcontext context,
                                                    const Builder &build);
  size_t size() const;

  static KernelCache &process();  // the process-wide instance

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_ = make_impl();
  static std::shared_ptr<Impl> make_impl();
};

}  // namespace flashjit
