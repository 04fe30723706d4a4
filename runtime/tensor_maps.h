// TMA tensor maps of the sm90 kernels' inputs, encoded on the host with
// cuTensorMapEncodeTiled (through the dlopen'ed driver) and passed to the
// kernels as __grid_constant__ parameters after FwdParams / BwdParams.
#pragma once

#include <cuda.h>

#include "flashjit/backward.h"
#include "flashjit/forward.h"
#include "generator/kernel_spec.h"
#include "runtime/loaded_kernel.h"
#include "templates/common/fwd_params.cuh"
#include "llvm/Support/Error.h"

namespace flashjit {

struct ForwardTensorMaps {
  CUtensorMap q, k, v;
};

// Each of Q, K, V as a 4-d tensor (head_dim, seqlen, heads, batch) with the
// caller's strides, read in boxes of 64 elements (one 128-byte swizzle
// column) x block rows (64 for Q, block_n for K and V) into 128-byte
// swizzled shared memory; rows past seqlen read as zeros. The error names
// the tensor and every value passed.
llvm::Expected<ForwardTensorMaps> make_forward_tensor_maps(const KernelSpec &spec,
                                                           const Problem &problem,
                                                           const ForwardArgs &args);

// Launches the sm90 kernel: FwdParams, then the three tensor maps. A
// persistent grid has `resident_ctas` CTAs (the SMs times the CTAs that fit
// on one; 0: one per SM).
llvm::Error launch_forward_sm90(const LoadedKernel &kernel, const KernelSpec &spec,
                                const Problem &problem, const ForwardArgs &args,
                                FwdParams &params, CUstream stream, int resident_ctas = 0);

struct BackwardTensorMaps {
  CUtensorMap q, k, v, dout, dq_accum;  // the kernel's parameters after BwdParams, in order
};

// The sm90 backward's inputs, as make_forward_tensor_maps: Q and dO in boxes
// of block_m rows, K and V of block_n; and its fp32 dQ accumulator in the
// workspace.
llvm::Expected<BackwardTensorMaps> make_backward_tensor_maps(const KernelSpec &spec,
                                                             const Problem &problem,
                                                             const BackwardArgs &args);

}  // namespace flashjit
