// Checks of the caller's tensors before any kernel sees them: null, 16-byte
// alignment, strides, and that the GPU can access the memory. A launch only
// happens after these pass, so bad input never reads out of bounds.
#pragma once

#include <cstdint>

#include "flashjit/forward.h"
#include "runtime/cuda_driver.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

namespace flashjit {

// One [batch, seqlen, heads, dim] argument.
struct TensorCheck {
  const char *name;
  const void *data;
  TensorStrides strides;
  int64_t batch;
  int64_t seqlen;
  int64_t heads;
  // Bytes of one element: 2 (bf16, fp16) or 1 (e4m3); strides must step
  // whole 16-byte vectors of them.
  int element_bytes = 2;
};

// Needs no driver, so it runs (and is tested) anywhere.
llvm::Error check_tensor_layout(const TensorCheck &tensor);
// A host or unknown pointer is an error naming the argument.
llvm::Error check_device_pointer(const CudaDriver &driver, const char *name, const void *ptr);
// Layout of every tensor first, then device access of every pointer (and of
// `extra`, e.g. fp32 buffers, named as given).
struct PointerCheck {
  const char *name;
  const void *data;
  int alignment;
};
llvm::Error check_tensors(llvm::ArrayRef<TensorCheck> tensors, llvm::ArrayRef<PointerCheck> extra);

// A packed varlen batch's host-checkable arguments (both passes): the
// offsets present for a varlen problem and absent otherwise, the totals in
// [0, 2^31) and at least the longest sequence's lengths. Needs no driver.
llvm::Error check_varlen_args(const Problem &problem, const VarlenArgs &varlen);

// The extents a [batch, seqlen, heads, d] check sees of a tensor of queries
// (or of keys): the problem's, or a packed batch's [1, total, heads, d] (an
// empty one keeps one row, which no kernel reads).
struct RowExtent {
  int64_t batch, rows;
};
RowExtent query_extent(const Problem &problem, const VarlenArgs &varlen);
RowExtent key_extent(const Problem &problem, const VarlenArgs &varlen);
// The forward's K/V as that check (and the tensor maps) see them: a paged
// cache's [num_pages, page_size], a contiguous cache's cache_batches entries
// under cache_batch_idx, else key_extent.
RowExtent forward_key_extent(const Problem &problem, const ForwardArgs &args);

// `error` (success passes through) prefixed with the call that failed:
// "flashjit <pass> (<problem>): ...", `pass` e.g. "forward".
llvm::Error with_call_context(const char *pass, const Problem &problem, llvm::Error error);

}  // namespace flashjit
