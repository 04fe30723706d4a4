// A packed (varlen) batch's outputs checked sequence by sequence: each
// sequence is a dense problem of its own for the references (the GPU
// reference for the forward, float64 CPU gradients for the backward), whose
// results are assembled in the packed layout and compared with the
// criteria of accuracy.h. `flashjit run --varlen --check` and the tuner's check of a
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

// The float64 forward and backward of each sequence of `batch` alone, in the
// packed layouts: O in element precision (as a kernel writes it), the exact
// LSE ([heads_q][total_q]; +inf for a sequence without keys), and the exact
// and element gradients (zeros where no query sees a key, and for a
// sequence without keys).
struct PackedReferenceGradients {
  std::vector<float> o, lse;
  AttentionGradients exact, element;
};
PackedReferenceGradients packed_reference_gradients(const Problem &problem,
                                                    const PackedBatch &batch,
                                                    const std::vector<float> &q,
                                                    const std::vector<float> &k,
                                                    const std::vector<float> &v,
                                                    const std::vector<float> &dout);

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
