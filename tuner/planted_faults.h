// Test-only faulty candidates, to prove that the tuner survives them. The
// worker process (never the tuner itself, never a forward call) reads
// $FLASHJIT_TEST_PLANT, e.g. "compile_crash:2,gpu_fault:3,hang:4", and
// replaces candidate n of the tune (its index in the candidate list, the
// heuristic's config being 0) with:
//   compile_crash  a program that makes NVRTC 13.0 itself segfault: a wgmma
//                  whose shared-memory descriptors are compile-time zeros
//                  (a genuine compiler crash, in the worker's compile);
//   gpu_fault      a kernel that stores to an address no allocation has:
//                  CUDA_ERROR_ILLEGAL_ADDRESS, the worker's context is gone;
//   hang           a kernel that spins forever on a volatile flag.
// The planted kernels take no parameters: the driver reads only as many
// parameters as a kernel declares, so they launch with any candidate's.
#pragma once

#include <optional>

#include "generator/source.h"
#include "llvm/Support/Error.h"

namespace flashjit {

struct PlantedFaults {
  int compile_crash = -1;  // candidate index, -1: none
  int gpu_fault = -1;
  int hang = -1;
  bool any() const { return compile_crash >= 0 || gpu_fault >= 0 || hang >= 0; }
};

// Parses "kind:n[,kind:n...]"; an unknown kind or a bad index is an error
// naming it (a typo must not silently plant nothing).
llvm::Expected<PlantedFaults> parse_planted_faults(llvm::StringRef text);
// $FLASHJIT_TEST_PLANT parsed; none when unset or empty.
llvm::Expected<PlantedFaults> planted_faults_from_env();

// The program that crashes NVRTC (for sm_90a; NVRTC crashes before it looks
// at the target's features).
GeneratedSource planted_compiler_crash_source();
// The kernel to load in place of the candidate, or none when the candidate
// is not planted. Entry names: flashjit_planted_gpu_fault, flashjit_planted_hang.
std::optional<GeneratedSource> planted_kernel_source(const PlantedFaults &plants, int candidate);

}  // namespace flashjit
