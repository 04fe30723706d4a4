// The public C++ API (include/flashjit/forward.h) over the runtime: the only
// place llvm::Error becomes a Status, so no LLVM type crosses the library's
// boundary.
#include "flashjit/backward.h"
#include "flashjit/forward.h"
#include "runtime/block_mask_build.h"
#include "runtime/launch_backward.h"
#include "runtime/launch_forward.h"
#include "runtime/runtime_counters.h"

namespace flashjit {

ForwardArgs ForwardArgs::packed(const Problem &problem, const void *q, const void *k,
                                const void *v, void *o, float *lse) {
  // [batch, seqlen, heads, dim], dim contiguous.
  auto packed_strides = [](int64_t seqlen, int64_t heads, int64_t dim) {
    TensorStrides s;
    s.head = dim;
    s.seq = heads * dim;
    s.batch = seqlen * heads * dim;
    return s;
  };
  ForwardArgs args;
  args.q = q;
  args.k = k;
  args.v = v;
  args.o = o;
  args.lse = lse;
  args.q_strides = packed_strides(problem.seqlen_q, problem.heads_q, problem.head_dim_qk);
  args.k_strides = packed_strides(problem.seqlen_k, problem.heads_kv, problem.head_dim_qk);
  args.v_strides = packed_strides(problem.seqlen_k, problem.heads_kv, problem.head_dim_v);
  args.o_strides = packed_strides(problem.seqlen_q, problem.heads_q, problem.head_dim_v);
  return args;
}

Status forward(const Problem &problem, const ForwardArgs &args, CUstream_st *stream,
               const ForwardOptions &options) {
  const KernelConfig config = options.use_config ? options.config : KernelConfig{};
  if (llvm::Error e = launch_forward(problem, args, stream, config))
    return Status::error(llvm::toString(std::move(e)));
  return Status();
}

Status create_block_mask(const Problem &problem, const Modifiers &modifiers, const void *aux,
                         size_t aux_bytes, const BlockMask &out, CUstream_st *stream) {
  if (llvm::Error e = enqueue_block_mask_build(problem, modifiers, aux, aux_bytes, out, stream))
    return Status::error(llvm::toString(std::move(e)));
  return Status();
}

Status backward(const Problem &problem, const BackwardArgs &args, CUstream_st *stream,
                const ForwardOptions &options) {
  const KernelConfig config = options.use_config ? options.config : KernelConfig{};
  if (llvm::Error e = launch_backward(problem, args, stream, config))
    return Status::error(llvm::toString(std::move(e)));
  return Status();
}

RuntimeStats runtime_stats() {
  const RuntimeCounters &c = runtime_counters();
  RuntimeStats stats;
  stats.compiles = c.compiles.load(std::memory_order_relaxed);
  stats.module_loads = c.module_loads.load(std::memory_order_relaxed);
  stats.launches = c.launches.load(std::memory_order_relaxed);
  stats.compile_ns = c.compile_ns.load(std::memory_order_relaxed);
  stats.compiler_wait_ns = c.compiler_wait_ns.load(std::memory_order_relaxed);
  stats.database_ns = c.database_ns.load(std::memory_order_relaxed);
  stats.module_load_ns = c.module_load_ns.load(std::memory_order_relaxed);
  return stats;
}

const char *version() { return FLASHJIT_VERSION; }

}  // namespace flashjit
