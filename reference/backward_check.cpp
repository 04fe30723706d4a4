#include "reference/backward_check.h"

#include <algorithm>
#include <cmath>

#include "reference/cpu_attention.h"
#include "reference/cpu_attention_backward.h"
#include "reference/gpu_reference.h"
#include "reference/gpu_reference_backward.h"
#include "runtime/cuda_driver.h"
#include "runtime/device_buffer.h"

namespace flashjit {
namespace {

llvm::Expected<DeviceBuffer> upload(DType dtype, llvm::ArrayRef<float> values) {
  const std::vector<uint16_t> bits = to_storage(dtype, values);
  auto buffer = DeviceBuffer::allocate(bits.size() * sizeof(uint16_t));
  if (!buffer) return buffer.takeError();
  if (llvm::Error e = buffer->upload(bits.data(), bits.size() * sizeof(uint16_t))) return e;
  return std::move(*buffer);
}

llvm::Expected<DeviceBuffer> allocate_poisoned(size_t bytes) {
  auto buffer = DeviceBuffer::allocate(bytes);
  if (!buffer) return buffer.takeError();
  if (llvm::Error e = buffer->fill_bytes(0xFF)) return e;  // NaN in fp16, bf16 and fp32
  return std::move(*buffer);
}

llvm::Expected<std::vector<float>> download(DType dtype, const DeviceBuffer &buffer, size_t n) {
  std::vector<uint16_t> bits(n);
  if (llvm::Error e = buffer.download(bits.data(), n * sizeof(uint16_t))) return e;
  return from_storage(dtype, bits);
}

// The kernel's dq, dk and dv of `p`, as floats.
llvm::Expected<AttentionGradients> download_gradients(const Problem &p, const DeviceBuffer &dq,
                                                      const DeviceBuffer &dk,
                                                      const DeviceBuffer &dv) {
  AttentionGradients out;
  auto gq = download(p.dtype, dq, q_elements(p));
  if (!gq) return gq.takeError();
  auto gk = download(p.dtype, dk, k_elements(p));
  if (!gk) return gk.takeError();
  auto gv = download(p.dtype, dv, v_elements(p));
  if (!gv) return gv.takeError();
  out.dq = std::move(*gq);
  out.dk = std::move(*gk);
  out.dv = std::move(*gv);
  return out;
}

}  // namespace

Problem backward_accuracy_problem(const Problem &problem) {
  constexpr int64_t kMaxBatchHeads = 8;
  Problem p = problem;
  const int64_t longest = std::max(p.seqlen_q, p.seqlen_k);
  if (longest > kBackwardCheckMaxSeqlen) {
    auto scaled = [&](int64_t n) {
      return std::max<int64_t>(1, n * kBackwardCheckMaxSeqlen / longest);
    };
    p.seqlen_q = scaled(p.seqlen_q);
    p.seqlen_k = scaled(p.seqlen_k);
  }
  if (p.batch * p.heads_q > kMaxBatchHeads) {
    // Two KV heads still exercise the head indexing; the ratio keeps the
    // GQA mapping (dK, dV summed over a group) of the class.
    const int64_t ratio = p.heads_kv > 0 ? std::max<int64_t>(1, p.heads_q / p.heads_kv) : 1;
    p.batch = 1;
    p.heads_kv = std::min<int64_t>(p.heads_kv, ratio >= kMaxBatchHeads / 2 ? 1 : 2);
    p.heads_q = p.heads_kv * ratio;
  }
  return p;
}

llvm::Expected<GradientAccuracyReport> check_backward(const Problem &p, BackwardLauncher launch,
                                                      CUstream stream, uint64_t seed) {
  auto driver = cuda_driver();
  if (!driver) return driver.takeError();
  const std::vector<float> q = random_values(p.dtype, q_elements(p), seed);
  const std::vector<float> k = random_values(p.dtype, k_elements(p), seed + 1);
  const std::vector<float> v = random_values(p.dtype, v_elements(p), seed + 2);
  const std::vector<float> dout = random_values(p.dtype, o_elements(p), seed + 3);
  // The forward a kernel would have run: O in element precision (the
  // element-precision reference's D uses the same O), the exact LSE (the
  // forward keeps it in fp32).
  const std::vector<float> o = cpu_attention(p, q, k, v, ReferencePrecision::element).out;
  const std::vector<float> lse = cpu_attention(p, q, k, v, ReferencePrecision::exact).lse;

  auto qb = upload(p.dtype, q), kb = upload(p.dtype, k), vb = upload(p.dtype, v),
       ob = upload(p.dtype, o), dob = upload(p.dtype, dout);
  for (auto *b : {&qb, &kb, &vb, &ob, &dob})
    if (!*b) return b->takeError();
  auto lseb = DeviceBuffer::allocate(lse.size() * sizeof(float));
  if (!lseb) return lseb.takeError();
  if (llvm::Error e = lseb->upload(lse.data(), lse.size() * sizeof(float))) return e;
  auto dq = allocate_poisoned(q_elements(p) * 2), dk = allocate_poisoned(k_elements(p) * 2),
       dv = allocate_poisoned(v_elements(p) * 2),
       workspace = allocate_poisoned(backward_workspace_bytes(p));
  for (auto *b : {&dq, &dk, &dv, &workspace})
    if (!*b) return b->takeError();
  // Uploads and memsets run on the legacy stream, which a non-blocking
  // `stream` does not wait for.
  if (llvm::Error e = cuda_check(driver->cuCtxSynchronize(), "cuCtxSynchronize")) return e;

  const BackwardArgs args = BackwardArgs::packed(
      p, qb->data(), kb->data(), vb->data(), ob->data(), dob->data(),
      static_cast<const float *>(lseb->data()), dq->data(), dk->data(), dv->data(),
      workspace->data(), workspace->size());
  if (llvm::Error e = launch(p, args, stream)) return e;
  if (llvm::Error e = cuda_check(driver->cuCtxSynchronize(), "cuCtxSynchronize")) return e;

  auto downloaded = download_gradients(p, *dq, *dk, *dv);
  if (!downloaded) return downloaded.takeError();
  AttentionGradients kernel = std::move(*downloaded);
  const AttentionGradients exact =
      cpu_attention_backward(p, q, k, v, dout, ReferencePrecision::exact);
  const AttentionGradients element =
      cpu_attention_backward(p, q, k, v, dout, ReferencePrecision::element);
  return check_gradient_accuracy(kernel, exact, element);
}

llvm::Expected<GradientAccuracyReport> check_modified_backward(const Problem &p,
                                                               const ModifierArgs &modifiers,
                                                               BackwardLauncher launch,
                                                               CUstream stream, TuningDb *store,
                                                               uint64_t seed) {
  auto driver = cuda_driver();
  if (!driver) return driver.takeError();
  const bool sinks = modifiers.modifiers && modifiers.modifiers->sinks;
  const std::vector<float> q = random_values(p.dtype, q_elements(p), seed);
  const std::vector<float> k = random_values(p.dtype, k_elements(p), seed + 1);
  const std::vector<float> v = random_values(p.dtype, v_elements(p), seed + 2);
  const std::vector<float> dout = random_values(p.dtype, o_elements(p), seed + 3);
  auto qb = upload(p.dtype, q), kb = upload(p.dtype, k), vb = upload(p.dtype, v),
       dob = upload(p.dtype, dout);
  for (auto *b : {&qb, &kb, &vb, &dob})
    if (!*b) return b->takeError();
  if (llvm::Error e = cuda_check(driver->cuCtxSynchronize(), "cuCtxSynchronize")) return e;

  // The forward a kernel would have run, with the snippets: O in element
  // precision, the exact LSE.
  ForwardArgs forward = ForwardArgs::packed(p, qb->data(), kb->data(), vb->data(), nullptr,
                                            nullptr);
  forward.modifiers = modifiers.modifiers;
  forward.aux = modifiers.aux;
  forward.aux_bytes = modifiers.aux_bytes;
  forward.sinks = modifiers.sinks;
  auto element_forward =
      gpu_reference_attention(p, forward, ReferencePrecision::element, stream, store);
  if (!element_forward) return element_forward.takeError();
  auto exact_forward = gpu_reference_attention(p, forward, ReferencePrecision::exact, stream, store);
  if (!exact_forward) return exact_forward.takeError();
  auto ob = upload(p.dtype, element_forward->out);
  if (!ob) return ob.takeError();
  const std::vector<float> &lse = exact_forward->lse;
  auto lseb = DeviceBuffer::allocate(std::max<size_t>(lse.size(), 1) * sizeof(float));
  if (!lseb) return lseb.takeError();
  if (llvm::Error e = lseb->upload(lse.data(), lse.size() * sizeof(float))) return e;
  auto dq = allocate_poisoned(q_elements(p) * 2), dk = allocate_poisoned(k_elements(p) * 2),
       dv = allocate_poisoned(v_elements(p) * 2),
       workspace = allocate_poisoned(backward_workspace_bytes(p)),
       dsinks = allocate_poisoned(sinks ? size_t(p.heads_q) * sizeof(float) : 0);
  for (auto *b : {&dq, &dk, &dv, &workspace, &dsinks})
    if (!*b) return b->takeError();
  if (llvm::Error e = cuda_check(driver->cuCtxSynchronize(), "cuCtxSynchronize")) return e;

  BackwardArgs args = BackwardArgs::packed(
      p, qb->data(), kb->data(), vb->data(), ob->data(), dob->data(),
      static_cast<const float *>(lseb->data()), dq->data(), dk->data(), dv->data(),
      workspace->data(), workspace->size());
  args.modifiers = modifiers.modifiers;
  args.aux = modifiers.aux;
  args.aux_bytes = modifiers.aux_bytes;
  if (sinks) {
    args.sinks = modifiers.sinks;
    args.dsinks = static_cast<float *>(dsinks->data());
  }
  if (llvm::Error e = launch(p, args, stream)) return e;
  if (llvm::Error e = cuda_check(driver->cuCtxSynchronize(), "cuCtxSynchronize")) return e;

  auto downloaded = download_gradients(p, *dq, *dk, *dv);
  if (!downloaded) return downloaded.takeError();
  AttentionGradients kernel = std::move(*downloaded);
  if (sinks) {
    kernel.dsinks.resize(size_t(p.heads_q));
    if (llvm::Error e = dsinks->download(kernel.dsinks.data(), kernel.dsinks.size() * 4)) return e;
  }
  auto exact = gpu_reference_attention_backward(p, args, ReferencePrecision::exact, stream, store);
  if (!exact) return exact.takeError();
  auto element =
      gpu_reference_attention_backward(p, args, ReferencePrecision::element, stream, store);
  if (!element) return element.takeError();
  GradientAccuracyReport report = check_gradient_accuracy(kernel, *exact, *element);
  if (sinks) {
    // The reference rounds nothing in dsinks (a sum over the head's rows of
    // P_sink * D, D from the same O in both precisions), so its baseline is
    // 0: the kernel's fp32 sum gets a tolerance relative to the gradient.
    AccuracyCriterion criterion = kGradientCriterion;
    double largest = 0;
    for (float x : exact->dsinks) largest = std::max(largest, double(std::fabs(x)));
    criterion.atol += 1e-5 * largest;
    report.dsinks = check_forward_accuracy(kernel.dsinks, exact->dsinks, element->dsinks, {}, {},
                                           criterion);
  }
  return report;
}

}  // namespace flashjit
