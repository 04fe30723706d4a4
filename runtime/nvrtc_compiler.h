// NVRTC, loaded with dlopen ($FLASHJIT_NVRTC, $CUDA_HOME/lib64,
// /usr/local/cuda/lib64, then the sonames). Compiles generated source
// straight to a cubin: the driver never JIT-compiles PTX on the hot path.
#pragma once

#include <string>
#include <vector>

#include "generator/source.h"
#include "generator/target_arch.h"
#include "llvm/Support/Error.h"

namespace flashjit {

struct Cubin {
  std::vector<char> bytes;
  std::string log;  // NVRTC's log, warnings included
  double compile_ms = 0;
  TargetArch arch;
};

// "13.0"; an error when libnvrtc cannot be loaded.
llvm::Expected<std::string> nvrtc_version();

// A failure carries NVRTC's full log, the options and the program name.
llvm::Expected<Cubin> compile_to_cubin(const GeneratedSource &source, const TargetArch &arch);

}  // namespace flashjit
