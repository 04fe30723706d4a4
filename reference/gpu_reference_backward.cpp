#include "reference/gpu_reference_backward.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>

#include "generator/modifier_source.h"
#include "llvm/ADT/Twine.h"
#include "reference/gpu_reference.h"
#include "runtime/cuda_driver.h"
#include "runtime/device.h"
#include "runtime/device_buffer.h"
#include "runtime/kernel_cache.h"
#include "runtime/kernel_source.h"
#include "runtime/modifier_facts.h"
#include "runtime/nvrtc_compiler.h"
#include "runtime/program_kernel.h"

namespace flashjit {

namespace {

constexpr const char *kDqEntry = "flashjit_reference_attention_bwd_dq";
constexpr const char *kDkDvEntry = "flashjit_reference_attention_bwd_dkdv";
constexpr const char *kSinksEntry = "flashjit_reference_attention_bwd_sinks";

// Every head dim up to the maximum fits these, so one load serves all shapes.
constexpr int kMaxDqSmem = ref_bwd_dq_smem_floats(kRefMaxHeadDim, kRefMaxHeadDim) * 4;
constexpr int kMaxDkDvSmem = ref_bwd_dkdv_smem_floats(kRefMaxHeadDim, kRefMaxHeadDim) * 4;

llvm::Error reference_error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 ("GPU backward reference: " + message).str());
}

// The checks the forward reference's do not make: a dense problem with a
// backward, the backward's own inputs, and a score_mod's derivative (as
// flashjit::backward refuses a score_mod without one).
llvm::Error check_backward_inputs(const Problem &p, const BackwardArgs &in) {
  if (p.varlen)
    return reference_error(
        "a packed varlen batch is not supported, only dense [batch, seqlen, heads, dim] "
        "tensors (check the class on a dense problem): " +
        describe(p));
  if (p.seqused_k || p.page_size != 0)
    return reference_error("a KV cache (seqused_k, page_size) has no backward: " + describe(p));
  if (!in.o || !in.dout || !in.lse)
    return reference_error(
        "o, dout and lse must be device pointers (the forward's output and log-sum-exp, and the "
        "output's gradient)");
  // Its derivative given apart or in the score_mod's source, not both: a
  // probe, no GPU.
  if (in.modifiers)
    if (llvm::Error e = check_score_mod_grad(*in.modifiers))
      return reference_error(llvm::toString(std::move(e)));
  return llvm::Error::success();
}

struct ReferenceBackwardKernels {
  const LoadedKernel *dq = nullptr, *dkdv = nullptr, *sinks = nullptr;
};

// The program's kernels in the current context (or the primary context of
// device 0), the sinks' only with sinks.
llvm::Expected<ReferenceBackwardKernels> reference_backward_kernels(TuningDb *store,
                                                                    const Modifiers &modifiers) {
  auto load = [&](const char *entry, int smem_bytes) {
    return program_kernel(
        "reference_attention_backward", modifiers,
        [&] { return generate_reference_attention_backward(modifiers); }, entry, smem_bytes,
        store);
  };
  ReferenceBackwardKernels kernels;
  auto dq = load(kDqEntry, kMaxDqSmem);
  if (!dq) return dq.takeError();
  kernels.dq = &*dq;
  auto dkdv = load(kDkDvEntry, kMaxDkDvSmem);
  if (!dkdv) return dkdv.takeError();
  kernels.dkdv = &*dkdv;
  if (modifiers.sinks) {
    auto sinks = load(kSinksEntry, 0);
    if (!sinks) return sinks.takeError();
    kernels.sinks = &*sinks;
  }
  return kernels;
}

llvm::Expected<DeviceBuffer> allocate_floats(size_t count) {
  return DeviceBuffer::allocate(std::max<size_t>(count, 1) * sizeof(float));
}

}  // namespace

GeneratedSource generate_reference_attention_backward(const Modifiers &modifiers) {
  // No fast math: the reference must not trade accuracy (expf, tanhf).
  return modified_program("reference_attention_backward.cu", "reference_attention_backward.cuh",
                          {kDqEntry, kDkDvEntry, kSinksEntry}, modifiers, {"-std=c++17"},
                          /*backward=*/true);
}

llvm::Expected<AttentionGradients> gpu_reference_attention_backward(const Problem &problem,
                                                                    const BackwardArgs &inputs,
                                                                    ReferencePrecision precision,
                                                                    CUstream stream,
                                                                    TuningDb *store) {
  // Every check before anything needs the GPU.
  if (llvm::Error e = check_backward_inputs(problem, inputs)) return e;
  ForwardArgs forward;
  forward.q = inputs.q;
  forward.k = inputs.k;
  forward.v = inputs.v;
  forward.q_strides = inputs.q_strides;
  forward.k_strides = inputs.k_strides;
  forward.v_strides = inputs.v_strides;
  forward.modifiers = inputs.modifiers;
  forward.aux = inputs.aux;
  forward.aux_bytes = inputs.aux_bytes;
  forward.sinks = inputs.sinks;
  auto scores = reference_attention_params(problem, forward, precision);
  if (!scores) return scores.takeError();

  const Modifiers modifiers = inputs.modifiers ? *inputs.modifiers : Modifiers{};
  auto kernels = reference_backward_kernels(store, modifiers);
  if (!kernels) return kernels.takeError();

  AttentionGradients result;
  result.dq.resize(q_elements(problem));
  result.dk.resize(k_elements(problem));
  result.dv.resize(v_elements(problem));
  if (modifiers.sinks) result.dsinks.resize(static_cast<size_t>(problem.heads_q));
  auto dq = allocate_floats(result.dq.size());
  if (!dq) return dq.takeError();
  auto dk = allocate_floats(result.dk.size());
  if (!dk) return dk.takeError();
  auto dv = allocate_floats(result.dv.size());
  if (!dv) return dv.takeError();
  auto dsum = allocate_floats(lse_elements(problem));
  if (!dsum) return dsum.takeError();
  auto dsinks = allocate_floats(result.dsinks.size());
  if (!dsinks) return dsinks.takeError();

  RefBackwardParams params{};
  params.fwd = *scores;
  params.o = inputs.o;
  params.dout = inputs.dout;
  params.o_batch_stride = inputs.o_strides.batch;
  params.o_row_stride = inputs.o_strides.seq;
  params.o_head_stride = inputs.o_strides.head;
  params.do_batch_stride = inputs.dout_strides.batch;
  params.do_row_stride = inputs.dout_strides.seq;
  params.do_head_stride = inputs.dout_strides.head;
  params.lse = inputs.lse;
  params.dsum = static_cast<float *>(dsum->data());
  params.dq = static_cast<float *>(dq->data());
  params.dk = static_cast<float *>(dk->data());
  params.dv = static_cast<float *>(dv->data());
  params.dsinks = modifiers.sinks ? static_cast<float *>(dsinks->data()) : nullptr;
  params.batch = static_cast<int>(problem.batch);
  void *args[] = {&params};

  // D and dQ (D feeds the others, in stream order), then dK and dV, then
  // the sinks' gradient.
  if (problem.batch > 0 && problem.heads_q > 0 && problem.seqlen_q > 0) {
    LaunchGeometry geometry;
    geometry.grid.x = static_cast<unsigned>((problem.seqlen_q + kRefBwdRows - 1) / kRefBwdRows);
    geometry.grid.y = static_cast<unsigned>(problem.heads_q);
    geometry.grid.z = static_cast<unsigned>(problem.batch);
    geometry.block.x = kRefThreads;
    geometry.dynamic_smem_bytes =
        ref_bwd_dq_smem_floats(problem.head_dim_qk, problem.head_dim_v) * 4;
    if (llvm::Error e = kernels->dq->launch(geometry, stream, args)) return e;
  }
  // With no query, dK and dV are zeros, which this kernel still writes.
  if (problem.batch > 0 && problem.seqlen_k > 0) {
    LaunchGeometry geometry;
    geometry.grid.x =
        static_cast<unsigned>((problem.seqlen_k + kRefBwdKeyRows - 1) / kRefBwdKeyRows);
    geometry.grid.y = static_cast<unsigned>(problem.heads_kv);
    geometry.grid.z = static_cast<unsigned>(problem.batch);
    geometry.block.x = kRefThreads;
    geometry.dynamic_smem_bytes =
        ref_bwd_dkdv_smem_floats(problem.head_dim_qk, problem.head_dim_v) * 4;
    if (llvm::Error e = kernels->dkdv->launch(geometry, stream, args)) return e;
  }
  if (modifiers.sinks && problem.heads_q > 0) {
    LaunchGeometry geometry;
    geometry.grid.x = static_cast<unsigned>(problem.heads_q);
    geometry.block.x = kRefThreads;
    if (llvm::Error e = kernels->sinks->launch(geometry, stream, args)) return e;
  }

  auto driver = cuda_driver();
  if (!driver) return driver.takeError();
  if (llvm::Error e = cuda_check(driver->cuStreamSynchronize(stream), "cuStreamSynchronize"))
    return e;
  auto download = [](const DeviceBuffer &from, std::vector<float> &to) {
    return from.download(to.data(), to.size() * sizeof(float));
  };
  if (llvm::Error e = download(*dq, result.dq)) return e;
  if (llvm::Error e = download(*dk, result.dk)) return e;
  if (llvm::Error e = download(*dv, result.dv)) return e;
  if (llvm::Error e = download(*dsinks, result.dsinks)) return e;
  return result;
}

}  // namespace flashjit
