// Problem + caller's tensors -> the backward kernels' parameter block.
#pragma once

#include "flashjit/backward.h"
#include "templates/common/bwd_params.cuh"

namespace flashjit {

// Expects a validated problem and a workspace of backward_workspace_bytes.
// `deterministic`: the kernels' mode (KernelConfig::deterministic), which
// orders the sm90 kernel's CTAs (BwdSm90Traits::dispatch_order);
// `block_n`: the sm90 kernel's keys per work item (KernelConfig::block_n),
// which count its items (BwdSm90Traits::work_items).
BwdParams make_backward_params(const Problem &problem, const BackwardArgs &args,
                               bool deterministic, int block_n);

}  // namespace flashjit
