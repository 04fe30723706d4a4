#include "reference/packed_check.h"

#include <algorithm>
#include <cmath>

#include "reference/cpu_attention.h"
#include "reference/cpu_attention_backward.h"
#include "reference/gpu_reference.h"
#include "runtime/cuda_driver.h"

namespace flashjit {
namespace {

std::vector<float> rows(const std::vector<float> &x, int64_t row0, int64_t count, int64_t width) {
  return std::vector<float>(x.begin() + row0 * width, x.begin() + (row0 + count) * width);
}

llvm::Expected<std::vector<float>> download(DType dtype, const DeviceBuffer &buffer, size_t n) {
  std::vector<uint16_t> bits(n);
  if (llvm::Error e = buffer.download(bits.data(), n * sizeof(uint16_t))) return e;
  return from_storage(dtype, bits);
}

}  // namespace

llvm::Expected<AccuracyReport> check_packed_forward_outputs(const Problem &p,
                                                            const PackedBatch &batch,
                                                            const PackedForwardInputs &in,
                                                            TuningDb *store) {
  const std::vector<int32_t> cu_q = batch.cu_seqlens_q(), cu_k = batch.cu_seqlens_k();
  const int64_t total_q = batch.total_q();
  const int64_t o_row = p.heads_q * p.head_dim_v;
  std::vector<uint16_t> o_bits(size_t(total_q * o_row));
  std::vector<float> lse(size_t(total_q * p.heads_q));
  if (llvm::Error e = in.o.download(o_bits.data(), o_bits.size() * 2)) return e;
  if (llvm::Error e = in.lse.download(lse.data(), lse.size() * 4)) return e;
  AttentionOutputs exact, element;
  exact.out.assign(o_bits.size(), 0.f);
  element.out = exact.out;
  exact.lse.assign(lse.size(), INFINITY);  // a sequence without keys: O = 0, LSE = +inf
  element.lse = exact.lse;
  for (size_t b = 0; b < batch.size(); ++b) {
    const int64_t lq = batch.seqlens_q[b], lk = batch.seqlens_k[b];
    if (lq == 0 || lk == 0) continue;
    const Problem one = sequence_problem(p, lq, lk);
    const auto *q = static_cast<const uint16_t *>(in.q.data()) +
                    int64_t(cu_q[b]) * p.heads_q * p.head_dim_qk;
    const auto *k = static_cast<const uint16_t *>(in.k.data()) +
                    int64_t(cu_k[b]) * p.heads_kv * p.head_dim_qk;
    const auto *v = static_cast<const uint16_t *>(in.v.data()) +
                    int64_t(cu_k[b]) * p.heads_kv * p.head_dim_v;
    const ForwardArgs args = ForwardArgs::packed(one, q, k, v, nullptr, nullptr);
    for (auto [precision, out] : {std::pair{ReferencePrecision::exact, &exact},
                                  std::pair{ReferencePrecision::element, &element}}) {
      auto r = gpu_reference_attention(one, args, precision, nullptr, store);
      if (!r) return r.takeError();
      std::copy(r->out.begin(), r->out.end(), out->out.begin() + int64_t(cu_q[b]) * o_row);
      // The reference's [1, heads, lq] into [heads, total_q].
      for (int64_t h = 0; h < p.heads_q; ++h)
        std::copy_n(r->lse.begin() + h * lq, lq, out->lse.begin() + h * total_q + cu_q[b]);
    }
  }
  return check_forward_accuracy(from_storage(p.dtype, o_bits), exact.out, element.out, lse,
                                exact.lse);
}

PackedReferenceGradients packed_reference_gradients(const Problem &p, const PackedBatch &batch,
                                                    const std::vector<float> &q,
                                                    const std::vector<float> &k,
                                                    const std::vector<float> &v,
                                                    const std::vector<float> &dout) {
  const int64_t hq = p.heads_q, hkv = p.heads_kv, d = p.head_dim_qk, dv = p.head_dim_v;
  const std::vector<int32_t> cu_q = batch.cu_seqlens_q(), cu_k = batch.cu_seqlens_k();
  const int64_t tq = batch.total_q();
  PackedReferenceGradients ref;
  ref.o.assign(size_t(tq * hq * dv), 0.f);
  ref.lse.assign(size_t(hq * tq), INFINITY);
  ref.exact = AttentionGradients{std::vector<float>(q.size(), 0.f),
                                 std::vector<float>(k.size(), 0.f),
                                 std::vector<float>(v.size(), 0.f), {}};
  ref.element = ref.exact;
  for (size_t b = 0; b < batch.size(); ++b) {
    const int64_t q0 = cu_q[b], lq = batch.seqlens_q[b], k0 = cu_k[b], lk = batch.seqlens_k[b];
    if (lq == 0 || lk == 0) continue;  // zeros (and LSE +inf) already
    const Problem one = sequence_problem(p, lq, lk);
    const auto qb = rows(q, q0, lq, hq * d), kb = rows(k, k0, lk, hkv * d),
               vb = rows(v, k0, lk, hkv * dv), db = rows(dout, q0, lq, hq * dv);
    const AttentionOutputs fwd_exact = cpu_attention(one, qb, kb, vb, ReferencePrecision::exact);
    const AttentionOutputs fwd_elem = cpu_attention(one, qb, kb, vb, ReferencePrecision::element);
    std::copy(fwd_elem.out.begin(), fwd_elem.out.end(), ref.o.begin() + q0 * hq * dv);
    for (int64_t h = 0; h < hq; ++h)
      std::copy_n(fwd_exact.lse.begin() + h * lq, lq, ref.lse.begin() + h * tq + q0);
    const AttentionGradients ge =
        cpu_attention_backward(one, qb, kb, vb, db, ReferencePrecision::exact);
    const AttentionGradients gm =
        cpu_attention_backward(one, qb, kb, vb, db, ReferencePrecision::element);
    for (auto [dst_e, dst_m, src_e, src_m, row0, width] :
         {std::tuple{&ref.exact.dq, &ref.element.dq, &ge.dq, &gm.dq, q0, hq * d},
          std::tuple{&ref.exact.dk, &ref.element.dk, &ge.dk, &gm.dk, k0, hkv * d},
          std::tuple{&ref.exact.dv, &ref.element.dv, &ge.dv, &gm.dv, k0, hkv * dv}}) {
      std::copy(src_e->begin(), src_e->end(), dst_e->begin() + row0 * width);
      std::copy(src_m->begin(), src_m->end(), dst_m->begin() + row0 * width);
    }
  }
  return ref;
}

llvm::Expected<GradientAccuracyReport> check_packed_backward(const Problem &problem,
                                                             const PackedBatch &batch,
                                                             BackwardLauncher launch,
                                                             CUstream stream, uint64_t seed) {
  const Problem p = resized_packed_problem(problem, batch);
  if (llvm::Error e = validate_packed_batch(p, batch)) return e;
  auto driver = cuda_driver();
  if (!driver) return driver.takeError();
  const int64_t hq = p.heads_q, hkv = p.heads_kv, d = p.head_dim_qk, dv = p.head_dim_v;
  const int64_t tq = batch.total_q(), tk = batch.total_k();
  const std::vector<float> q = random_values(p.dtype, size_t(tq * hq * d), seed);
  const std::vector<float> k = random_values(p.dtype, size_t(tk * hkv * d), seed + 1);
  const std::vector<float> v = random_values(p.dtype, size_t(tk * hkv * dv), seed + 2);
  const std::vector<float> dout = random_values(p.dtype, size_t(tq * hq * dv), seed + 3);

  const PackedReferenceGradients ref = packed_reference_gradients(p, batch, q, k, v, dout);
  auto in = make_packed_backward_inputs(p, batch, to_storage(p.dtype, q), to_storage(p.dtype, k),
                                        to_storage(p.dtype, v), to_storage(p.dtype, ref.o),
                                        to_storage(p.dtype, dout), ref.lse);
  if (!in) return in.takeError();
  // Uploads and memsets run on the legacy stream, which a non-blocking
  // `stream` does not wait for.
  if (llvm::Error e = cuda_check(driver->cuCtxSynchronize(), "cuCtxSynchronize")) return e;
  if (llvm::Error e = launch(p, in->args, stream)) return e;
  if (llvm::Error e = cuda_check(driver->cuCtxSynchronize(), "cuCtxSynchronize")) return e;

  AttentionGradients kernel;
  auto gq = download(p.dtype, in->dq, q.size());
  if (!gq) return gq.takeError();
  auto gk = download(p.dtype, in->dk, k.size());
  if (!gk) return gk.takeError();
  auto gv = download(p.dtype, in->dv, v.size());
  if (!gv) return gv.takeError();
  kernel.dq = std::move(*gq);
  kernel.dk = std::move(*gk);
  kernel.dv = std::move(*gv);
  return check_gradient_accuracy(kernel, ref.exact, ref.element);
}

}  // namespace flashjit
