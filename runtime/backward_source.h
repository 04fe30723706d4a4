// Where a backward call's config comes from, as for the forward
// (kernel_source.h): the caller's complete config, else the database's tuning
// of this device, software and backward class (atomic and deterministic dQ
// are classes of their own, class_pass), the nearest bucket, else
// default_backward_config. The program's cubin comes from the store like the
// forward's (kernel_cubin).
#pragma once

#include "flashjit/problem.h"
#include "generator/kernel_spec.h"
#include "runtime/device.h"
#include "runtime/kernel_source.h"
#include "llvm/Support/Error.h"

namespace flashjit {

llvm::Expected<ChosenConfig> choose_backward_config(const Problem &problem,
                                                    const KernelConfig &requested,
                                                    const DeviceInfo &device, TuningDb *db,
                                                    llvm::StringRef modifiers = "");

// choose_backward_config with the process's database (`flashjit query --pass
// bwd`, tests).
llvm::Expected<ChosenConfig> explain_backward_config(const Problem &problem,
                                                     const KernelConfig &requested,
                                                     const DeviceInfo &device,
                                                     llvm::StringRef modifiers = "");

// The validated spec a backward call on device `ordinal` runs: the choice
// above with the process's database, made once per device, problem class
// (size buckets included) and requested config, so a repeat call costs one
// hash lookup rather than a device query and two database reads.
// `modifiers` (or null): the caller's, whose hash keys the class and the
// remembered spec, which carries them as resolve_modifiers decides them
// for the device (KernelSpec::modifiers: the kernels compile them in).
llvm::Expected<KernelSpec> backward_spec_for_call(const Problem &problem,
                                                  const KernelConfig &requested, int ordinal,
                                                  const Modifiers *modifiers = nullptr);

}  // namespace flashjit
