// The backward kernels checked against float64 CPU gradients, or with a
// caller's modifiers (CUDA snippets the CPU cannot run) against the naive
// fp32 GPU references (reference/gpu_reference*.h). Either is
// O(b·h·sq·sk·d), so a large problem is checked on a small one of the same class:
// one compiled program serves every size of a class (sizes are kernel
// parameters), so the small problem runs the very code the large one does.
#pragma once

#include <cuda.h>

#include "cache/tuning_db.h"
#include "flashjit/backward.h"
#include "reference/accuracy.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/Error.h"

namespace flashjit {

// `problem` itself when it is small; else its seqlens scaled down together
// to at most kBackwardCheckMaxSeqlen (so sq < sk stays sq < sk, and the
// causal diagonal keeps its offset's sign), batch 1, at most two KV heads
// with the GQA ratio kept. Window bounds are kept: they are part of the
// class. 300 is a multiple of no tile (tails of 44 keys and queries), and
// keeps the float64 references to a few seconds at d=256 with 8 heads.
Problem backward_accuracy_problem(const Problem &problem);
inline constexpr int64_t kBackwardCheckMaxSeqlen = 300;

// Enqueues the backward under test for `problem` with `args` on `stream`.
using BackwardLauncher =
    llvm::function_ref<llvm::Error(const Problem &problem, const BackwardArgs &args,
                                   CUstream stream)>;

// Random inputs and dO (rounded to the element type); O and LSE from the
// CPU forward (O in element precision, as a kernel writes it; LSE exact);
// dq, dk, dv and the workspace poisoned with NaN; `launch`; then the
// gradient criterion (accuracy.h) against cpu_attention_backward (factor 3). Runs
// `problem` as given: pass backward_accuracy_problem(p) for a large one.
llvm::Expected<GradientAccuracyReport> check_backward(const Problem &problem,
                                                      BackwardLauncher launch, CUstream stream,
                                                      uint64_t seed = 1);

// A caller's modifiers as a call passes them (ForwardArgs/BackwardArgs).
struct ModifierArgs {
  const Modifiers *modifiers = nullptr;
  const void *aux = nullptr;  // the struct Aux's bytes (AuxValues)
  size_t aux_bytes = 0;
  const float *sinks = nullptr;  // heads_q logits on the device, with modifiers->sinks
};

// check_backward's inputs and criterion with `modifiers`: O (element
// precision) and the exact LSE from the GPU forward reference, the
// gradients (and the sinks' gradient, poisoned before) against the GPU
// backward reference in exact and element precision, both compiled with
// the snippets (their cubins from or into `store`).
llvm::Expected<GradientAccuracyReport> check_modified_backward(const Problem &problem,
                                                               const ModifierArgs &modifiers,
                                                               BackwardLauncher launch,
                                                               CUstream stream,
                                                               TuningDb *store = nullptr,
                                                               uint64_t seed = 1);

}  // namespace flashjit
