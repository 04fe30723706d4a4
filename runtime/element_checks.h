// Checks of a call's element types before any kernel sees it: the dtype
// combination (Problem::dtype, kv_dtype, out_dtype), the fp8 descales each
// e4m3 tensor needs, and the backward's refusal of fp8. Host-only: they
// need no driver, so they run (and are tested) anywhere; the descales'
// device access is checked with the tensors' (check_tensors).
#pragma once

#include "flashjit/forward.h"
#include "flashjit/problem.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/Error.h"
#include "runtime/tensor_checks.h"

namespace flashjit {

// An out_dtype a problem cannot serve: bf16 or fp16 asked of a 16-bit
// problem of the other dtype (its output is its dtype). kv_dtype=e4m3 under
// dtype=e4m3 is the same as `same`, and accepted.
llvm::Error validate_element_types(const Problem &problem);

// The descales `problem` needs from `descale`: each e4m3 tensor's present,
// each 16-bit tensor's absent (a factor for a tensor that has none is a
// request no kernel would serve), the strides >= 0 and their last factor's
// offset within 64 bits. The present ones are appended to `pointers`, for
// check_tensors' device-access check.
llvm::Error check_descales(const Problem &problem, const Fp8Descales &descale,
                           llvm::SmallVectorImpl<PointerCheck> &pointers);

// The backward of an e4m3 problem (dtype or kv_dtype): refused by name.
llvm::Error refuse_fp8_backward(const Problem &problem);

}  // namespace flashjit
