#include "reference/gpu_reference.h"

#include "runtime/kernel_source.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "generator/modifier_source.h"
#include "reference/gpu_reference_backward.h"
#include "runtime/cuda_driver.h"
#include "runtime/device.h"
#include "runtime/device_buffer.h"
#include "runtime/element_checks.h"
#include "runtime/kernel_cache.h"
#include "runtime/program_kernel.h"
#include "runtime/launch_forward.h"
#include "runtime/nvrtc_compiler.h"
#include "templates/reference_attention.cuh"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit {

namespace {

constexpr const char *kEntry = "flashjit_reference_attention";

// Every head dim up to the maximum fits this, so one load serves all shapes.
constexpr int kMaxDynamicSmem = ref_smem_floats(kRefMaxHeadDim, kRefMaxHeadDim) * 4;

// A window bound that reaches past every key is the same as no bound; the
// clamp keeps the kernel's int arithmetic far from overflow.
int clamp_window(int64_t bound, const Problem &p) {
  if (bound < 0) return -1;
  return static_cast<int>(std::min<int64_t>(bound, p.seqlen_q + p.seqlen_k));
}

llvm::Error check_supported(const Problem &p, const ForwardArgs &inputs) {
  if (p.head_dim_qk < 1 || p.head_dim_qk > kRefMaxHeadDim || p.head_dim_v < 1 ||
      p.head_dim_v > kRefMaxHeadDim)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("GPU reference: head dims must be in [1, {0}], got qk={1} v={2}",
                      kRefMaxHeadDim, p.head_dim_qk, p.head_dim_v));
  if (p.heads_kv < 1 || p.heads_q % p.heads_kv != 0)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("GPU reference: heads_q ({0}) must be a multiple of heads_kv ({1})",
                      p.heads_q, p.heads_kv));
  const int64_t int_max = 0x7fffffff;
  if (p.seqlen_q > int_max / 4 || p.seqlen_k > int_max / 4 || p.heads_q > 65535 ||
      p.batch > 65535)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "GPU reference: problem too large for its grid: " +
                                       describe(p));
  if (!inputs.q || !inputs.k || !inputs.v)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "GPU reference: q, k and v must be device pointers");
  return llvm::Error::success();
}

llvm::Expected<const LoadedKernel &> reference_kernel(TuningDb *store,
                                                      const Modifiers &modifiers) {
  return program_kernel(
      "reference_attention", modifiers,
      [&] { return generate_reference_attention(modifiers); }, kEntry, kMaxDynamicSmem, store);
}

}  // namespace

GeneratedSource generate_reference_attention(const Modifiers &modifiers) {
  // No fast math: the reference must not trade accuracy (expf, tanhf, logf).
  return modified_program("reference_attention.cu", "reference_attention.cuh", {kEntry},
                          modifiers, {"-std=c++17"});
}

llvm::Expected<RefAttentionParams> reference_attention_params(const Problem &problem,
                                                              const ForwardArgs &inputs,
                                                              ReferencePrecision precision) {
  if (auto error = check_supported(problem, inputs)) return error;
  // The same checks as the kernels' calls (runtime/launch_forward.h).
  if (llvm::Error e = validate_modifier_args(inputs.modifiers, inputs.aux, inputs.aux_bytes))
    return e;
  if (llvm::Error e = validate_sink_args(inputs.modifiers, inputs.sinks, nullptr, false)) return e;
  // Descales for exactly the e4m3 tensors, as a call's (device access is
  // the launch's to find).
  llvm::SmallVector<PointerCheck, 3> descales;
  if (llvm::Error e = check_descales(problem, inputs.descale, descales)) return e;
  RefAttentionParams params{};
  static_assert(sizeof(params.aux) == sizeof(FwdParams::aux), "the aux struct's room");
  if (inputs.aux_bytes > 0) std::memcpy(params.aux, inputs.aux, inputs.aux_bytes);
  params.sinks = inputs.sinks;
  params.q = inputs.q;
  params.k = inputs.k;
  params.v = inputs.v;
  params.q_batch_stride = inputs.q_strides.batch;
  params.q_row_stride = inputs.q_strides.seq;
  params.q_head_stride = inputs.q_strides.head;
  params.k_batch_stride = inputs.k_strides.batch;
  params.k_row_stride = inputs.k_strides.seq;
  params.k_head_stride = inputs.k_strides.head;
  params.v_batch_stride = inputs.v_strides.batch;
  params.v_row_stride = inputs.v_strides.seq;
  params.v_head_stride = inputs.v_strides.head;
  params.seqlen_q = static_cast<int>(problem.seqlen_q);
  params.seqlen_k = static_cast<int>(problem.seqlen_k);
  params.heads_q = static_cast<int>(problem.heads_q);
  params.heads_per_kv = static_cast<int>(problem.heads_q / problem.heads_kv);
  params.head_dim_qk = problem.head_dim_qk;
  params.head_dim_v = problem.head_dim_v;
  params.window_left = -1;
  params.window_right = -1;
  if (problem.mask == MaskKind::causal) {
    params.window_right = 0;
  } else if (problem.mask == MaskKind::window) {
    params.window_left = clamp_window(problem.window_left, problem);
    params.window_right = clamp_window(problem.window_right, problem);
  }
  params.attention_chunk = problem.attention_chunk;
  params.scale = problem.softmax_scale != 0.f
                     ? problem.softmax_scale
                     : 1.0f / std::sqrt(static_cast<float>(problem.head_dim_qk));
  params.softcap = problem.softcap;
  // The 16-bit type P and O round to in the element variant: the inputs',
  // or, under e4m3 Q, the output's.
  params.is_fp16 =
      (problem.dtype == DType::e4m3 ? out_element(problem) : problem.dtype) == DType::fp16;
  params.q_e4m3 = problem.dtype == DType::e4m3;
  params.kv_e4m3 = kv_element(problem) == DType::e4m3;
  params.q_descale = inputs.descale.q;
  params.k_descale = inputs.descale.k;
  params.v_descale = inputs.descale.v;
  params.descale_batch_stride = inputs.descale.batch_stride;
  params.descale_head_stride = inputs.descale.head_stride;
  params.same_precision = precision == ReferencePrecision::element;
  return params;
}

llvm::Error launch_reference_attention(const Problem &problem, const ForwardArgs &inputs,
                                       float *out, float *lse, ReferencePrecision precision,
                                       CUstream stream, TuningDb *store) {
  auto params = reference_attention_params(problem, inputs, precision);
  if (!params) return params.takeError();
  if (!out)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "GPU reference: the output pointer is null");
  auto kernel = reference_kernel(store, inputs.modifiers ? *inputs.modifiers : Modifiers{});
  if (!kernel) return kernel.takeError();
  params->o = out;
  params->lse = lse;

  LaunchGeometry geometry;
  geometry.grid.x = static_cast<unsigned>((problem.seqlen_q + kRefBlockM - 1) / kRefBlockM);
  geometry.grid.y = static_cast<unsigned>(problem.heads_q);
  geometry.grid.z = static_cast<unsigned>(problem.batch);
  geometry.block.x = kRefThreads;
  geometry.dynamic_smem_bytes = ref_smem_floats(problem.head_dim_qk, problem.head_dim_v) * 4;
  if (problem.seqlen_q == 0 || problem.batch == 0 || problem.heads_q == 0)
    return llvm::Error::success();
  void *args[] = {&*params};
  return kernel->launch(geometry, stream, args);
}

llvm::Expected<AttentionOutputs> gpu_reference_attention(const Problem &problem,
                                                         const ForwardArgs &inputs,
                                                         ReferencePrecision precision,
                                                         CUstream stream, TuningDb *store) {
  AttentionOutputs result;
  result.out.resize(o_elements(problem));
  result.lse.resize(lse_elements(problem));
  auto out = DeviceBuffer::allocate(std::max<size_t>(result.out.size(), 1) * sizeof(float));
  if (!out) return out.takeError();
  auto lse = DeviceBuffer::allocate(std::max<size_t>(result.lse.size(), 1) * sizeof(float));
  if (!lse) return lse.takeError();
  if (auto error = launch_reference_attention(problem, inputs, static_cast<float *>(out->data()),
                                              static_cast<float *>(lse->data()), precision,
                                              stream, store))
    return error;
  auto driver = cuda_driver();
  if (!driver) return driver.takeError();
  if (auto error = cuda_check(driver->cuStreamSynchronize(stream), "cuStreamSynchronize"))
    return error;
  if (auto error = out->download(result.out.data(), result.out.size() * sizeof(float)))
    return error;
  if (auto error = lse->download(result.lse.data(), result.lse.size() * sizeof(float)))
    return error;
  return result;
}

}  // namespace flashjit
