// The GPU reference: naive fp32 attention (templates/reference_attention.cuh)
// compiled through NVRTC, for shapes too large for cpu_attention (the CLI's
// `run --check` at seqlen 8k, the GPU tests). It reads the same 16-bit
// tensors with the same strides as the kernel under test.
#pragma once

#include <cuda.h>

#include "flashjit/forward.h"
#include "flashjit/modifiers.h"
#include "cache/tuning_db.h"
#include "generator/source.h"
#include "reference/cpu_attention.h"
#include "templates/reference_attention.cuh"
#include "llvm/Support/Error.h"

namespace flashjit {

// `store`: the cubin store to load the reference kernel from (and to put it
// in when compiled); null: the process database. A tune on a GPU whose
// store `flashjit precompile` filled compiles nothing, this included.
//
// The NVRTC program of the reference kernel: one for every shape and dtype
// (all of them are run-time parameters), and one per set of modifiers (a
// caller's snippets compiled in, as the fast kernels').
GeneratedSource generate_reference_attention(const Modifiers &modifiers = {});

// Enqueues the reference on `stream`: reads `inputs.q/k/v` with their
// strides and, with inputs.modifiers, the snippets' aux values and the
// learned sinks (inputs.o and inputs.lse are ignored), writes packed fp32 `out`
// [batch, seqlen_q, heads_q, head_dim_v] and, when non-null, `lse`
// [batch, heads_q, seqlen_q]. Compiles and loads the kernel on first use in
// the current context (or the primary context of device 0).
llvm::Error launch_reference_attention(const Problem &problem, const ForwardArgs &inputs,
                                       float *out, float *lse, ReferencePrecision precision,
                                       CUstream stream, TuningDb *store = nullptr);

// As above, into device memory it allocates; waits for the stream and
// returns both outputs on the host.
llvm::Expected<AttentionOutputs> gpu_reference_attention(const Problem &problem,
                                                         const ForwardArgs &inputs,
                                                         ReferencePrecision precision,
                                                         CUstream stream = nullptr,
                                                         TuningDb *store = nullptr);

// The forward reference's parameter block for `problem` and `inputs` after
// launch_reference_attention's checks (sizes the kernels serve, q, k and v
// given, the modifiers' aux and sinks as a call's): q, k, v and strides,
// sizes, mask, scale, softcap, dtype, precision, sinks and aux; o and lse
// null. The backward's kernels read it as their first member.
llvm::Expected<RefAttentionParams> reference_attention_params(const Problem &problem,
                                                              const ForwardArgs &inputs,
                                                              ReferencePrecision precision);

}  // namespace flashjit
