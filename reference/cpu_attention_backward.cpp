#include "reference/cpu_attention_backward.h"

#include <cassert>
#include <cmath>
#include <limits>

namespace flashjit {

AttentionGradients cpu_attention_backward(const Problem &p, llvm::ArrayRef<float> q,
                                          llvm::ArrayRef<float> k, llvm::ArrayRef<float> v,
                                          llvm::ArrayRef<float> dout,
                                          ReferencePrecision precision,
                                          llvm::ArrayRef<float> sinks) {
  assert(q.size() == q_elements(p) && k.size() == k_elements(p) && v.size() == v_elements(p));
  assert(dout.size() == o_elements(p));
  assert(sinks.empty() || sinks.size() == size_t(p.heads_q));
  const int64_t dqk = p.head_dim_qk, dv = p.head_dim_v;
  const int64_t heads_per_kv = p.heads_q / p.heads_kv;
  const double scale =
      p.softmax_scale != 0.f ? double(p.softmax_scale) : 1.0 / std::sqrt(double(dqk));
  const double softcap = p.softcap;
  const bool element = precision == ReferencePrecision::element;
  const double minus_inf = -std::numeric_limits<double>::infinity();
  // A float64 value as the kernel's element-type operand would hold it.
  auto operand = [&](double x) { return element ? double(round_to(p.dtype, float(x))) : x; };

  // float64 accumulators; the scale of dq and dk is applied once at the end.
  std::vector<double> dq_acc(q_elements(p), 0.0);
  std::vector<double> dk_acc(k_elements(p), 0.0);
  std::vector<double> dv_acc(v_elements(p), 0.0);
  std::vector<double> dsink_acc(sinks.size(), 0.0);
  const size_t sk = static_cast<size_t>(p.seqlen_k);
  std::vector<double> scores(sk), tanhs(sk), probs(sk);
  std::vector<double> o(static_cast<size_t>(dv));

  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads_q; ++h) {
      const int64_t hk = h / heads_per_kv;
      auto k_row = [&](int64_t j) { return &k[((b * p.seqlen_k + j) * p.heads_kv + hk) * dqk]; };
      auto v_row = [&](int64_t j) { return &v[((b * p.seqlen_k + j) * p.heads_kv + hk) * dv]; };
      for (int64_t i = 0; i < p.seqlen_q; ++i) {
        const size_t q_off = static_cast<size_t>(((b * p.seqlen_q + i) * p.heads_q + h) * dqk);
        const size_t o_off = static_cast<size_t>(((b * p.seqlen_q + i) * p.heads_q + h) * dv);
        const float *qrow = &q[q_off];
        const float *dorow = &dout[o_off];

        // S, as the forward computes it.
        double row_max = minus_inf;
        for (int64_t j = 0; j < p.seqlen_k; ++j) {
          if (!key_visible(p, i, j)) {
            scores[j] = minus_inf;
            continue;
          }
          const float *krow = k_row(j);
          double dot = 0;
          for (int64_t d = 0; d < dqk; ++d) dot += double(qrow[d]) * double(krow[d]);
          if (softcap > 0) {
            tanhs[j] = std::tanh(dot * scale / softcap);
            scores[j] = softcap * tanhs[j];
          } else {
            scores[j] = dot * scale;
          }
          row_max = std::max(row_max, scores[j]);
        }
        // The sink joins the max and the denominator (cpu_attention's order).
        const double sink = sinks.empty() ? 0.0 : double(sinks[h]);
        if (!sinks.empty()) row_max = std::max(row_max, sink);
        if (row_max == minus_inf) continue;  // no visible key: P = 0, no gradient

        // P, and O from the same unnormalized weights the forward uses, so the
        // element-precision O is bit for bit cpu_attention(element)'s.
        double sum = sinks.empty() ? 0.0 : std::exp(sink - row_max);
        std::fill(o.begin(), o.end(), 0.0);
        for (int64_t j = 0; j < p.seqlen_k; ++j) {
          if (scores[j] == minus_inf) {
            probs[j] = 0;
            continue;
          }
          probs[j] = std::exp(scores[j] - row_max);
          sum += probs[j];
          const double weight = operand(probs[j]);
          const float *vrow = v_row(j);
          for (int64_t d = 0; d < dv; ++d) o[d] += weight * double(vrow[d]);
        }
        double delta = 0;  // D = rowsum(dO ∘ O)
        for (int64_t d = 0; d < dv; ++d) {
          const double od = element ? double(round_to(p.dtype, float(o[d] / sum))) : o[d] / sum;
          delta += double(dorow[d]) * od;
        }
        if (!sinks.empty()) dsink_acc[h] -= std::exp(sink - row_max) / sum * delta;

        for (int64_t j = 0; j < p.seqlen_k; ++j) {
          if (scores[j] == minus_inf) continue;
          const double prob = probs[j] / sum;
          const float *krow = k_row(j);
          const float *vrow = v_row(j);
          const size_t k_off = static_cast<size_t>(((b * p.seqlen_k + j) * p.heads_kv + hk) * dqk);
          const size_t v_off = static_cast<size_t>(((b * p.seqlen_k + j) * p.heads_kv + hk) * dv);
          // dV += Pᵀ dO and dP = dO Vᵀ.
          const double p_operand = operand(prob);
          double dp = 0;
          for (int64_t d = 0; d < dv; ++d) {
            dv_acc[v_off + d] += p_operand * double(dorow[d]);
            dp += double(dorow[d]) * double(vrow[d]);
          }
          double ds = prob * (dp - delta);
          if (softcap > 0) ds *= 1.0 - tanhs[j] * tanhs[j];
          ds = operand(ds);
          // dQ += dS K, dK += dSᵀ Q (scaled below).
          for (int64_t d = 0; d < dqk; ++d) {
            dq_acc[q_off + d] += ds * double(krow[d]);
            dk_acc[k_off + d] += ds * double(qrow[d]);
          }
        }
      }
    }
  }

  auto finish = [&](const std::vector<double> &acc, double factor) {
    std::vector<float> out(acc.size());
    for (size_t n = 0; n < acc.size(); ++n) {
      const float x = float(acc[n] * factor);
      out[n] = element ? round_to(p.dtype, x) : x;
    }
    return out;
  };
  AttentionGradients grads;
  grads.dq = finish(dq_acc, scale);
  grads.dk = finish(dk_acc, scale);
  grads.dv = finish(dv_acc, 1.0);
  // The sinks' gradient is fp32 in a kernel (a per-head reduction), never
  // rounded to the element type.
  for (double x : dsink_acc) grads.dsinks.push_back(float(x));
  return grads;
}

}  // namespace flashjit
