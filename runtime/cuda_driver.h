// libcuda, loaded with dlopen so that the library and every CPU-only tool run
// on machines with no GPU and no driver. One table of entry points, resolved
// once per process; every CUresult becomes an llvm::Error naming the call.
#pragma once

#include <cuda.h>

#include "llvm/Support/Error.h"

namespace flashjit {

struct CudaDriver {
#define FLASHJIT_CUDA_FN(name) decltype(&::name) name = nullptr;
#include "runtime/cuda_driver_functions.def"
#undef FLASHJIT_CUDA_FN
};

// The loaded driver (cuInit done), or an error that says what to install or
// which variable to set. Thread-safe; loads once.
llvm::Expected<const CudaDriver &> cuda_driver();

// `CUresult` -> Error: "cuModuleLoadData failed: CUDA_ERROR_INVALID_IMAGE
// (device kernel image is invalid)". Success -> Error::success().
llvm::Error cuda_check(CUresult result, const char *call);

}  // namespace flashjit
