// libcuda, loaded with dlopen so that the library and every CPU-only tool run
// on machines with no GPU and no driver. One table of entry points, resolved
// once per process; every CUresult becomes an llvm::Error naming the call.
#pragma once

#include <cuda.h>

#include <string>

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

namespace flashjit {

// Members are named as cuda.h's macros expand them (cuMemAlloc_v2), so that
// `driver.cuMemAlloc(...)` reads like the API and calls the versioned ABI.
struct CudaDriver {
#define FLASHJIT_CUDA_FN(name) decltype(&::name) name = nullptr;
#include "runtime/cuda_driver_functions.def"
#undef FLASHJIT_CUDA_FN
  std::string library;  // the path or soname that was loaded
};

// The loaded driver (cuInit done), or an error that says what to install or
// which variable to set. Thread-safe; loads once.
llvm::Expected<const CudaDriver &> cuda_driver();

// `CUresult` -> Error: "cuModuleLoadData failed: CUDA_ERROR_INVALID_IMAGE
// (device kernel image is invalid)". Success -> Error::success().
llvm::Error cuda_check(CUresult result, const char *call);

namespace detail {
// The sonames cuda_driver() tries, in order.
llvm::ArrayRef<const char *> cuda_driver_sonames();
// Loads the first of `libraries` that dlopens, resolves every entry point and
// runs cuInit(0). Not cached: cuda_driver() caches its one call. Exposed so
// tests can check the error for a missing driver on any machine.
llvm::Expected<CudaDriver> load_cuda_driver(llvm::ArrayRef<const char *> libraries);
}  // namespace detail

}  // namespace flashjit
