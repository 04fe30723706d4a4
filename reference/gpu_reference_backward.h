// The GPU reference of the backward: naive fp32 gradients
// (templates/reference_attention_backward.cuh) compiled through NVRTC with a
// caller's modifiers in (score_mod and its score_mod_grad, mask_mod, aux,
// learned sinks), which the float64 CPU reference (cpu_attention_backward)
// cannot run. It reads the same 16-bit tensors with the same strides as the
// backward kernel under test, and the forward's O and LSE.
#pragma once

#include <cuda.h>

#include "cache/tuning_db.h"
#include "flashjit/backward.h"
#include "flashjit/modifiers.h"
#include "generator/source.h"
#include "llvm/Support/Error.h"
#include "reference/cpu_attention.h"
#include "reference/cpu_attention_backward.h"
#include "templates/reference_attention_backward.cuh"

namespace flashjit {

// The NVRTC program of the backward reference's three kernels: one for every
// shape and dtype (run-time parameters), one per set of modifiers, their
// score_mod_grad included.
GeneratedSource generate_reference_attention_backward(const Modifiers &modifiers = {});

// The gradients of L = sum(O ∘ dout), as cpu_attention_backward defines
// them, with the modifiers applied as the backward kernels apply them:
// score_mod on the softcapped score inside the sequence, dS times
// score_mod_grad at that score (before score_mod) and the softcap's
// 1 − tanh², mask_mod on top of the built-in mask, learned sinks in the
// forward's LSE and their gradient in dsinks. Reads inputs.q/k/v/o/dout
// (16-bit, with their strides) and inputs.lse (the forward's, [batch,
// heads_q, seqlen_q] fp32); inputs.modifiers, aux, aux_bytes and sinks as
// flashjit::backward checks them; inputs.dq/dk/dv, dsinks, workspace and
// block_mask are ignored (mask_mod decides every element). D = rowsum(dO ∘
// O) comes from the given O: for ReferencePrecision::element pass the
// element-precision forward's, as a kernel's forward writes it.
// Returns packed fp32 gradients on the host (dsinks with sinks only),
// computed into device memory it allocates, after waiting for `stream`.
// Dense problems only: a packed varlen batch or a KV cache is an error. The
// checks of the arguments come before anything needs a GPU. `store`: the
// cubin store (null: the process database), as gpu_reference_attention.
llvm::Expected<AttentionGradients> gpu_reference_attention_backward(const Problem &problem,
                                                                    const BackwardArgs &inputs,
                                                                    ReferencePrecision precision,
                                                                    CUstream stream = nullptr,
                                                                    TuningDb *store = nullptr);

}  // namespace flashjit
