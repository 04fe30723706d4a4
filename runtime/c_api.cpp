// The C API (include/flashjit/flashjit.h): plain structs in, an int out, the
// message in a thread-local string. Nothing may unwind across this boundary,
// so every entry point catches everything (bad_alloc is the only candidate).
#include "flashjit/flashjit.h"

#include <string>

#include "flashjit/forward.h"
#include "runtime/runtime_counters.h"
#include "llvm/Support/FormatVariadic.h"

namespace {

thread_local std::string g_last_error;

int fail(std::string message) {
  g_last_error = std::move(message);
  return 1;
}

flashjit::TensorStrides strides(int64_t batch, int64_t seq, int64_t head) {
  flashjit::TensorStrides s;
  s.batch = batch;
  s.seq = seq;
  s.head = head;
  return s;
}

int forward_impl(const flashjit_problem *p, const flashjit_forward_args *a, void *stream,
                 const flashjit_config *c) {
  if (!p) return fail("flashjit_forward: problem is NULL");
  if (!a) return fail("flashjit_forward: args is NULL");

  // Enum fields arrive as raw integers from FFI; an out-of-range value would
  // otherwise become an enumerator no switch handles.
  if (p->dtype != FLASHJIT_BF16 && p->dtype != FLASHJIT_FP16)
    return fail(llvm::formatv("flashjit_forward: problem.dtype={0} is invalid: expected "
                              "FLASHJIT_BF16 (0) or FLASHJIT_FP16 (1)",
                              p->dtype));
  if (p->mask < FLASHJIT_MASK_NONE || p->mask > FLASHJIT_MASK_WINDOW)
    return fail(llvm::formatv("flashjit_forward: problem.mask={0} is invalid: expected "
                              "FLASHJIT_MASK_NONE (0), FLASHJIT_MASK_CAUSAL (1) or "
                              "FLASHJIT_MASK_WINDOW (2)",
                              p->mask));

  flashjit::Problem problem;
  problem.dtype = p->dtype == FLASHJIT_BF16 ? flashjit::DType::bf16 : flashjit::DType::fp16;
  problem.mask = p->mask == FLASHJIT_MASK_NONE     ? flashjit::MaskKind::none
                 : p->mask == FLASHJIT_MASK_CAUSAL ? flashjit::MaskKind::causal
                                                   : flashjit::MaskKind::window;
  problem.batch = p->batch;
  problem.heads_q = p->heads_q;
  problem.heads_kv = p->heads_kv;
  problem.seqlen_q = p->seqlen_q;
  problem.seqlen_k = p->seqlen_k;
  problem.head_dim_qk = p->head_dim_qk;
  problem.head_dim_v = p->head_dim_v;
  problem.window_left = p->window_left;
  problem.window_right = p->window_right;
  problem.softmax_scale = p->softmax_scale;
  problem.softcap = p->softcap;

  flashjit::ForwardArgs args;
  args.q = a->q;
  args.k = a->k;
  args.v = a->v;
  args.o = a->o;
  args.lse = a->lse;
  args.q_strides = strides(a->q_stride_batch, a->q_stride_seq, a->q_stride_head);
  args.k_strides = strides(a->k_stride_batch, a->k_stride_seq, a->k_stride_head);
  args.v_strides = strides(a->v_stride_batch, a->v_stride_seq, a->v_stride_head);
  args.o_strides = strides(a->o_stride_batch, a->o_stride_seq, a->o_stride_head);

  flashjit::ForwardOptions options;
  if (c) {
    if (c->path != 0 && c->path != 1)
      return fail(llvm::formatv("flashjit_forward: config.path={0} is invalid: expected 0 "
                                "(sm80) or 1 (sm90)",
                                c->path));
    for (auto [name, value] : {std::pair{"block_m", c->block_m}, {"block_n", c->block_n},
                               {"warps", c->warps}, {"stages", c->stages}})
      if (value < 0)
        return fail(llvm::formatv("flashjit_forward: config.{0}={1} is invalid: expected a "
                                  "positive value, or 0 to let the heuristic choose",
                                  name, value));
    options.use_config = true;
    options.config.path = c->path == 0 ? flashjit::KernelPath::sm80 : flashjit::KernelPath::sm90;
    options.config.block_m = c->block_m;
    options.config.block_n = c->block_n;
    options.config.warps = c->warps;
    options.config.stages = c->stages;
  }

  flashjit::Status status =
      flashjit::forward(problem, args, static_cast<CUstream_st *>(stream), options);
  if (!status.ok()) return fail(status.message());
  g_last_error.clear();
  return 0;
}

}  // namespace

extern "C" {

int flashjit_forward(const flashjit_problem *problem, const flashjit_forward_args *args,
                     void *stream, const flashjit_config *config) {
  try {
    return forward_impl(problem, args, stream, config);
  } catch (const std::exception &e) {
    return fail(std::string("flashjit_forward: internal error: ") + e.what());
  } catch (...) {
    return fail("flashjit_forward: internal error (unknown exception)");
  }
}

const char *flashjit_last_error(void) { return g_last_error.c_str(); }

const char *flashjit_version(void) { return FLASHJIT_VERSION; }

uint64_t flashjit_compile_count(void) {
  return flashjit::runtime_counters().compiles.load(std::memory_order_relaxed);
}

}  // extern "C"
