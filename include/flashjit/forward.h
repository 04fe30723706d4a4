// The runtime entry point: exact attention on the GPU with a kernel generated,
// compiled and loaded for this problem class on first use.
#pragma once

#include <cstdint>
#include <string>

#include "flashjit/problem.h"

struct CUstream_st;  // cuda.h's CUstream is CUstream_st*; so is cudaStream_t

namespace flashjit {

// Element strides of a [batch, seqlen, heads, dim] tensor; dim is contiguous.
struct TensorStrides {
  int64_t batch = 0;
  int64_t seq = 0;
  int64_t head = 0;
};

// Device pointers in the current CUDA context (or the primary context of the
// current device). `lse` ([batch, heads_q, seqlen_q] fp32, contiguous) may be
// null when the caller does not need it.
struct ForwardArgs {
  const void *q = nullptr;
  const void *k = nullptr;
  const void *v = nullptr;
  void *o = nullptr;
  float *lse = nullptr;
  TensorStrides q_strides, k_strides, v_strides, o_strides;

  // Strides of densely packed [batch, seqlen, heads, dim] tensors.
  static ForwardArgs packed(const Problem &problem, const void *q, const void *k, const void *v,
                            void *o, float *lse);
};

// Success, or a message that names the input that was wrong and what to do.
class Status {
 public:
  Status() = default;
  static Status error(std::string message) { return Status(std::move(message)); }
  bool ok() const { return !failed_; }
  explicit operator bool() const { return ok(); }
  const std::string &message() const { return message_; }

 private:
  explicit Status(std::string message) : failed_(true), message_(std::move(message)) {}
  bool failed_ = false;
  std::string message_;
};

struct ForwardOptions {
  // A complete config overrides the heuristic; a partial one fills its zero
  // fields from the heuristic.
  KernelConfig config{};
  bool use_config = false;
};

// Enqueues the forward pass on `stream` (null: the legacy default stream).
// The first call for a problem class compiles its kernel (about a second);
// later calls cost a hash lookup and the launch. Thread-safe: concurrent first
// calls for the same class compile once.
Status forward(const Problem &problem, const ForwardArgs &args, CUstream_st *stream = nullptr,
               const ForwardOptions &options = {});

// Counters for tests and diagnostics.
struct RuntimeStats {
  uint64_t compiles = 0;      // NVRTC compilations performed by this process
  uint64_t module_loads = 0;  // cuModuleLoadData calls
  uint64_t launches = 0;
};
RuntimeStats runtime_stats();

const char *version();

}  // namespace flashjit
