// The kernels one backward call launches, in order, with their geometry: the
// sequence launch_backward enqueues, spelled once for whoever launches a
// backward program's kernels itself (the tuner's bench and its accuracy
// check launch each candidate's own loaded kernels, not the call's choice).
#pragma once

#include "flashjit/problem.h"
#include "generator/kernel_spec.h"
#include "generator/launch_geometry.h"
#include "llvm/ADT/SmallVector.h"

namespace flashjit {

struct BackwardStep {
  const char *entry;  // extern "C" name in the backward program
  LaunchGeometry geometry;
};

// Preprocess (D = rowsum(dO·O), dQ accumulator zeroed), the main kernel,
// then the dQ conversion, or with sm80's `deterministic` the dQ kernel;
// with learned sinks (Modifiers::sinks) last their gradient.
// `sm_count`, the device's SMs, sizes the sm90 kernel's resident grid (0:
// a CTA per work item).
llvm::SmallVector<BackwardStep, 3> backward_steps(const KernelSpec &spec, const Problem &problem,
                                                  int sm_count = 0);
// The same steps with what they take from `spec` alone, their blocks and
// dynamic shared memory (each grid left at one CTA): the entries a backward
// program holds and the shared memory to load each with.
llvm::SmallVector<BackwardStep, 3> backward_steps(const KernelSpec &spec);

}  // namespace flashjit
