// A packed (varlen) batch's outputs checked sequence by sequence: each
// sequence is a dense problem of its own for the references (the GPU
// reference for the forward, float64 CPU gradients for the backward), whose
// results are assembled in the packed layout and compared with DESIGN.md's
// criteria. `flashjit run --varlen --check` and the tuner's check of a
// varlen winner both come here.
#pragma once

#include <cuda.h>

#include "cache/tuning_db.h"
#include "reference/accuracy.h"
#include "reference/backward_check.h"
#include "reference/packed_batch.h"
#include "llvm/Support/Error.h"

namespace flashjit {

// The O and LSE a kernel wrote into `in` (after the work on every stream is
// done) against the GPU reference applied to each sequence alone (exact and
// element precision). A sequence without keys must have O = 0 and LSE +inf.
llvm::Expected<AccuracyReport> check_packed_forward_outputs(const Problem &problem,
                                                            const PackedBatch &batch,
                                                            const PackedForwardInputs &in,
                                                            TuningDb *store = nullptr);

// The backward under test on a packed batch of `problem` (resized to
// `batch`): random inputs and dO, O and the LSE of each sequence's float64
// forward, gradients and workspace poisoned; `launch`; then the gradient
// criterion against each sequence's float64 gradients (a sequence without
// keys must have dQ = 0, keys no query sees dK = dV = 0). The references are
// O(sq·sk·d) per head in float64: pass a small batch (scaled_packed_batch
// with kBackwardCheckMaxSeqlen).
llvm::Expected<GradientAccuracyReport> check_packed_backward(const Problem &problem,
                                                             const PackedBatch &batch,
                                                             BackwardLauncher launch,
                                                             CUstream stream, uint64_t seed = 1);

}  // namespace flashjit
