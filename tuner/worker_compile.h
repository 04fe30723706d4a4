// Candidate compiles in worker processes: a small pool of `flashjit worker`
// processes, one per compile thread, each taking the next spec. A worker
// that crashes (NVRTC has segfaulted on some programs) or runs past the
// timeout fails only the spec it was compiling; its thread starts a fresh
// one for the next. Cubins travel through the database's cubin store: the
// result carries the key, not the bytes.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "generator/kernel_spec.h"
#include "tuner/cubin_batch.h"
#include "llvm/ADT/ArrayRef.h"

namespace flashjit {

// One result per spec, in order (like cubins_for, with empty `bytes`).
// `candidates[i]` is spec i's index in the tune (what planted faults name).
// The NVRTC compiles the workers make are added to this process's count.
std::vector<CubinResult> cubins_in_workers(
    llvm::ArrayRef<KernelSpec> specs, llvm::ArrayRef<int> candidates, const std::string &binary,
    const std::string &db_path, int threads, double timeout_s,
    const std::function<void(const std::string &)> &progress = {});

}  // namespace flashjit
