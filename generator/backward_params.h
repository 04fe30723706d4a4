// Problem + caller's tensors -> the backward kernels' parameter block.
#pragma once

#include "flashjit/backward.h"
#include "templates/common/bwd_params.cuh"

namespace flashjit {

// Expects a validated problem and a workspace of backward_workspace_bytes.
BwdParams make_backward_params(const Problem &problem, const BackwardArgs &args);

}  // namespace flashjit
