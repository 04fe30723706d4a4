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
// The dynamic shared memory of each step depends on `spec` alone, so a
// problem of any size of the class gives the amounts to load the kernels
// with.
// `sm_count`, the device's SMs, sizes the sm90 kernel's resident grid (0:
// a CTA per work item).
llvm::SmallVector<BackwardStep, 3> backward_steps(const KernelSpec &spec, const Problem &problem,
                                                  int sm_count = 0);

}  // namespace flashjit
