// The kernels of programs that take no spec (the GPU references of both
// passes, the block-mask builder), each compiled once per set of a caller's
// modifiers: where their cubins are kept and how a kernel is loaded.
#pragma once

#include <string>

#include "cache/tuning_db.h"
#include "flashjit/modifiers.h"
#include "generator/source.h"
#include "generator/target_arch.h"
#include "runtime/loaded_kernel.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/Error.h"

namespace flashjit {

// "<name>_<arch>", then "_mod<hash>" with modifiers: the id a program's
// cubin is stored under (and `flashjit precompile` stores it under).
std::string program_id(llvm::StringRef name, const TargetArch &arch, const Modifiers &modifiers);

// Kernel `entry` of program `name` compiled with `modifiers` (`source`
// generates it), in the current context (or device 0's primary one), with
// `dynamic_smem_bytes` the most any launch asks for: from the process's
// kernel cache; else from the program's cubin, kept for the process by id
// so one compile or store read serves every kernel and context of it: from
// `store`'s cubin store (null: the process database), else compiled and
// stored there.
llvm::Expected<const LoadedKernel &> program_kernel(llvm::StringRef name,
                                                    const Modifiers &modifiers,
                                                    llvm::function_ref<GeneratedSource()> source,
                                                    const char *entry, int dynamic_smem_bytes,
                                                    TuningDb *store);

}  // namespace flashjit
