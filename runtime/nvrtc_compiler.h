// NVRTC, loaded with dlopen ($FLASHJIT_NVRTC, $CUDA_HOME/lib64,
// /usr/local/cuda/lib64, then the sonames). Compiles generated source
// straight to a cubin: the driver never JIT-compiles PTX on the hot path.
#pragma once

#include <nvrtc.h>

#include <string>
#include <vector>

#include "generator/source.h"
#include "generator/target_arch.h"
#include "llvm/ADT/ArrayRef.h"
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
// The path or soname of the libnvrtc this process loaded (for `flashjit info`).
llvm::Expected<std::string> nvrtc_library();
// Starts loading libnvrtc on a thread of its own, once per process, so that
// a first call's cubin key (which names NVRTC's version) does not wait for
// the dynamic linker's ~5 ms over the 100 MB library. A fork waits for the
// load to end first (the child would otherwise inherit the linker's lock
// held). Later calls return at once; nvrtc_version() waits for the load.
void preload_nvrtc();

// A failure carries NVRTC's full log, the options and the program name.
// Adds --gpu-architecture=<arch.name()> unless `source.options` already names
// the same architecture (a different one is an error). Thread-safe.
llvm::Expected<Cubin> compile_to_cubin(const GeneratedSource &source, const TargetArch &arch);
// The same for the virtual architecture of `arch` (compute_90a for
// sm_90a): `bytes` holds the PTX text (without a NUL). For the host's
// probes (runtime/modifier_facts.h), which read what the compiler made.
llvm::Expected<Cubin> compile_to_ptx(const GeneratedSource &source, const TargetArch &arch);

namespace detail {

struct NvrtcApi {
  decltype(&::nvrtcGetErrorString) GetErrorString = nullptr;
  decltype(&::nvrtcVersion) Version = nullptr;
  decltype(&::nvrtcCreateProgram) CreateProgram = nullptr;
  decltype(&::nvrtcDestroyProgram) DestroyProgram = nullptr;
  decltype(&::nvrtcCompileProgram) CompileProgram = nullptr;
  decltype(&::nvrtcGetProgramLogSize) GetProgramLogSize = nullptr;
  decltype(&::nvrtcGetProgramLog) GetProgramLog = nullptr;
  decltype(&::nvrtcGetCUBINSize) GetCUBINSize = nullptr;
  decltype(&::nvrtcGetCUBIN) GetCUBIN = nullptr;
  decltype(&::nvrtcGetPTXSize) GetPTXSize = nullptr;
  decltype(&::nvrtcGetPTX) GetPTX = nullptr;
  std::string library;  // the path or soname that was loaded
};

// Where libnvrtc is looked for, given $FLASHJIT_NVRTC and $CUDA_HOME (either
// may be null or empty). An explicit FLASHJIT_NVRTC is the only candidate:
// a wrong path the user set must fail loudly, not fall back silently.
//
// Then, for a machine with the driver and PyTorch but no toolkit, the NVRTC
// that pip installed beside PyTorch (the `nvidia-cuda-nvrtc` wheels:
// site-packages/nvidia/cu13/lib or nvidia/cuda_nvrtc/lib for CUDA 12) in
// each of `python_sites` (os.pathsep-separated site-packages folders; the
// Python binding passes its interpreter's in $FLASHJIT_PYTHON_SITES) and in
// the folder above `library_dir` (libflashjit.so's own, when it is installed
// inside a site-packages package).
std::vector<std::string> nvrtc_search_list(const char *flashjit_nvrtc, const char *cuda_home,
                                           const char *python_sites = nullptr,
                                           const std::string &library_dir = "");

// The folder of the shared object (or executable) this code is linked into.
std::string this_library_dir();

// Loads the first candidate that dlopens and has every entry point; the error
// lists each candidate with its dlerror. Not cached (the process-wide load in
// compile_to_cubin is): exposed for tests.
llvm::Expected<NvrtcApi> load_nvrtc(llvm::ArrayRef<std::string> candidates);

}  // namespace detail

}  // namespace flashjit
