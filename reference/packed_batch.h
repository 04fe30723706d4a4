// A packed (varlen) batch's sequence lengths, flash_attn_varlen_func's
// layout: Q/O [total_q, heads_q, d], K/V [total_k, heads_kv, d], sequence b
// owning the rows cu_seqlens[b] .. cu_seqlens[b + 1]. The CLI's run and
// tune, the tuner's benches and the accuracy checks all build their packed
// inputs from this one value and these helpers, so that they agree on the
// layout.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "flashjit/backward.h"
#include "flashjit/problem.h"
#include "runtime/device_buffer.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

namespace flashjit {

struct PackedBatch {
  std::vector<int64_t> seqlens_q, seqlens_k;  // one entry per sequence each

  size_t size() const { return seqlens_q.size(); }
  int64_t total_q() const;
  int64_t total_k() const;
  // The int32 offsets the kernels read: [size() + 1], from 0 to the total.
  std::vector<int32_t> cu_seqlens_q() const;
  std::vector<int32_t> cu_seqlens_k() const;
  bool operator==(const PackedBatch &) const = default;
};

// `problem.batch` sequences of the longest lengths (seqlen_q, seqlen_k):
// the packed batch of a varlen problem given only its batch and maxima.
PackedBatch equal_lengths(const Problem &problem);

// That `batch` is a packed batch of `problem`: varlen, as many sequences as
// problem.batch, no negative length, the longest ones problem.seqlen_q and
// seqlen_k, totals within int32 (the offsets' type). Errors name the value.
llvm::Error validate_packed_batch(const Problem &problem, const PackedBatch &batch);

// What a bench or check of `problem` runs on: `packed` validated when the
// problem is varlen (an error when it is missing then), nullptr when it is
// dense (an error when lengths were given for it).
llvm::Expected<const PackedBatch *> packed_batch_for(const Problem &problem,
                                                     const std::optional<PackedBatch> &packed);

// Elements of a problem's Q, K, V and O tensors and its LSE rows: batch x
// the longest lengths when dense, the packed batch's tokens when `packed`.
struct TensorElements {
  size_t q, k, v, o, lse;
};
TensorElements tensor_elements(const Problem &problem, const PackedBatch *packed);

// describe(problem) and the batch: "... varlen (packed: 3 sequences, 4413
// queries, 4413 keys)".
std::string describe_packed(const Problem &problem, const PackedBatch &batch);

// Sequence lq x lk of a packed problem alone, as a dense problem of one
// sequence (what the references compute per sequence).
Problem sequence_problem(const Problem &packed, int64_t seqlen_q, int64_t seqlen_k);

// The forward FLOPs of the sequences' own work (causal halved per sequence,
// as Problem::forward_flops does): a packed batch's TFLOP/s count these,
// not the padded batch x longest.
double packed_forward_flops(const Problem &packed, const PackedBatch &batch);

// A smaller packed batch of the same class for accuracy checks: at most
// `max_sequences` sequences (the longest among them) and every length scaled
// by one factor so the longest is at most `max_seqlen` (lengths stay
// irregular; a non-zero length stays at least 1).
PackedBatch scaled_packed_batch(const PackedBatch &batch, int64_t max_seqlen,
                                size_t max_sequences);
// `problem` with batch and longest lengths of `batch`.
Problem resized_packed_problem(const Problem &problem, const PackedBatch &batch);

// Strides of [total, heads, dim] tensors: rows of every sequence in one
// tensor, no batch stride.
void set_packed_strides(const Problem &problem, ForwardArgs &args);
void set_packed_strides(const Problem &problem, BackwardArgs &args);

// A packed batch's forward tensors on the device: Q, K, V from the host's
// bits, O and the LSE ([heads_q, total_q]) poisoned with NaN (an element a
// kernel never writes cannot pass a check), the offsets, and `args`
// pointing at them.
struct PackedForwardInputs {
  DeviceBuffer q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k;
  ForwardArgs args;
};
llvm::Expected<PackedForwardInputs> make_packed_forward_inputs(const Problem &problem,
                                                               const PackedBatch &batch,
                                                               llvm::ArrayRef<uint16_t> q,
                                                               llvm::ArrayRef<uint16_t> k,
                                                               llvm::ArrayRef<uint16_t> v);

// The backward's: Q, K, V, O and dO from bits, the LSE from `lse`
// ([heads_q, total_q]), dQ, dK, dV and the workspace (per-sequence
// blocks: backward_workspace_bytes(problem, total_q)) poisoned.
struct PackedBackwardInputs {
  DeviceBuffer q, k, v, o, dout, lse, dq, dk, dv, workspace, cu_seqlens_q, cu_seqlens_k;
  BackwardArgs args;
  // The forward over the same Q, K, V writing this set's O and LSE (what a
  // training step's backward reads).
  ForwardArgs forward_args(const Problem &problem) const;
};
llvm::Expected<PackedBackwardInputs> make_packed_backward_inputs(
    const Problem &problem, const PackedBatch &batch, llvm::ArrayRef<uint16_t> q,
    llvm::ArrayRef<uint16_t> k, llvm::ArrayRef<uint16_t> v, llvm::ArrayRef<uint16_t> o,
    llvm::ArrayRef<uint16_t> dout, llvm::ArrayRef<float> lse);

}  // namespace flashjit
