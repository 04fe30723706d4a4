// Building a block mask of a caller's mask_mod once (FlexAttention's
// create_block_mask, with the snippet compiled in), for every call that
// passes it as ForwardArgs::block_mask / BackwardArgs::block_mask: the
// classification a call's pre-pass would run each time, run once.
#pragma once

#include <cuda.h>

#include <cstddef>

#include "flashjit/modifiers.h"
#include "flashjit/problem.h"
#include "llvm/Support/Error.h"

namespace flashjit {

// Validates everything (validate_block_mask_to_build, the aux values as a
// call's), then enqueues the build on `stream` into `out`'s four arrays
// (device memory of the caller, written whole). The program is compiled on
// first use, or loaded from the process database's cubin store.
llvm::Error enqueue_block_mask_build(const Problem &problem, const Modifiers &modifiers,
                                     const void *aux, size_t aux_bytes, const BlockMask &out,
                                     CUstream stream);

}  // namespace flashjit
