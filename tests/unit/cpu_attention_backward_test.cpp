// The float64 CPU reference of the backward pass: against central finite
// differences of an independent float64 forward, GQA's sums over query
// heads, fully masked rows, and the element-precision baseline.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "reference/accuracy.h"
#include "reference/cpu_attention.h"
#include "reference/cpu_attention_backward.h"
#include "reference/packed_check.h"

namespace flashjit {
namespace {

Problem tiny(MaskKind mask = MaskKind::none) {
  Problem p;
  p.batch = 1;
  p.heads_q = 2;
  p.heads_kv = 1;
  p.seqlen_q = 3;
  p.seqlen_k = 5;
  p.head_dim_qk = p.head_dim_v = 8;
  p.mask = mask;
  return p;
}

// Random element-type values (bf16 unless the problem says otherwise).
std::vector<float> random_tensor(const Problem &p, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> t(n);
  for (float &x : t) x = round_to(p.dtype, normal(rng));
  return t;
}

struct Inputs {
  std::vector<float> q, k, v, dout;
};

Inputs random_inputs(const Problem &p, uint32_t seed = 1) {
  return {random_tensor(p, q_elements(p), seed), random_tensor(p, k_elements(p), seed + 1),
          random_tensor(p, v_elements(p), seed + 2), random_tensor(p, o_elements(p), seed + 3)};
}

// Attention in float64 from float64 inputs, written independently of
// cpu_attention (a row that sees no key gives O = 0).
std::vector<double> forward_f64(const Problem &p, const std::vector<double> &q,
                                const std::vector<double> &k, const std::vector<double> &v) {
  const int64_t dqk = p.head_dim_qk, dv = p.head_dim_v, group = p.heads_q / p.heads_kv;
  const double scale = p.softmax_scale != 0.f ? p.softmax_scale : 1.0 / std::sqrt(double(dqk));
  std::vector<double> out(o_elements(p), 0.0);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t i = 0; i < p.seqlen_q; ++i) {
        std::vector<double> s;
        std::vector<int64_t> keys;
        for (int64_t j = 0; j < p.seqlen_k; ++j) {
          if (!key_visible(p, i, j)) continue;
          double dot = 0;
          for (int64_t d = 0; d < dqk; ++d)
            dot += q[((b * p.seqlen_q + i) * p.heads_q + h) * dqk + d] *
                   k[((b * p.seqlen_k + j) * p.heads_kv + h / group) * dqk + d];
          dot *= scale;
          s.push_back(p.softcap > 0 ? p.softcap * std::tanh(dot / p.softcap) : dot);
          keys.push_back(j);
        }
        if (s.empty()) continue;
        const double m = *std::max_element(s.begin(), s.end());
        double sum = 0;
        for (double &x : s) sum += (x = std::exp(x - m));
        for (size_t n = 0; n < s.size(); ++n)
          for (int64_t d = 0; d < dv; ++d)
            out[((b * p.seqlen_q + i) * p.heads_q + h) * dv + d] +=
                s[n] / sum * v[((b * p.seqlen_k + keys[n]) * p.heads_kv + h / group) * dv + d];
      }
  return out;
}

std::vector<double> widen(const std::vector<float> &x) { return {x.begin(), x.end()}; }

double max_abs(const std::vector<float> &x) {
  double m = 0;
  for (float e : x) m = std::max(m, std::fabs(double(e)));
  return m;
}

// Compares every gradient element with (L(x + h) - L(x - h)) / 2h, where
// L = sum(O ∘ dout) is computed by forward_f64.
void expect_matches_finite_differences(const Problem &p, const Inputs &in) {
  const AttentionGradients g = cpu_attention_backward(p, in.q, in.k, in.v, in.dout);
  ASSERT_EQ(g.dq.size(), q_elements(p));
  ASSERT_EQ(g.dk.size(), k_elements(p));
  ASSERT_EQ(g.dv.size(), v_elements(p));
  std::vector<double> x[3] = {widen(in.q), widen(in.k), widen(in.v)};
  const std::vector<double> dout = widen(in.dout);
  auto loss = [&] {
    const std::vector<double> o = forward_f64(p, x[0], x[1], x[2]);
    double l = 0;
    for (size_t n = 0; n < o.size(); ++n) l += o[n] * dout[n];
    return l;
  };
  const std::vector<float> *analytic[3] = {&g.dq, &g.dk, &g.dv};
  const char *names[3] = {"dq", "dk", "dv"};
  const double step = 1e-5;
  for (int t = 0; t < 3; ++t) {
    // Relative to the tensor's largest gradient: float output rounding is 6e-8.
    const double tol = 1e-6 * std::max(1.0, max_abs(*analytic[t]));
    EXPECT_GT(max_abs(*analytic[t]), 1e-2) << names[t] << " is trivially zero";
    for (size_t n = 0; n < x[t].size(); ++n) {
      const double saved = x[t][n];
      x[t][n] = saved + step;
      const double up = loss();
      x[t][n] = saved - step;
      const double down = loss();
      x[t][n] = saved;
      EXPECT_NEAR((*analytic[t])[n], (up - down) / (2 * step), tol)
          << names[t] << "[" << n << "] " << describe(p);
    }
  }
}

TEST(CpuAttentionBackward, TheTestForwardIsCpuAttention) {
  for (MaskKind mask : {MaskKind::none, MaskKind::causal}) {
    Problem p = tiny(mask);
    p.softcap = mask == MaskKind::causal ? 2.0f : 0.f;
    const Inputs in = random_inputs(p);
    const AttentionOutputs ref = cpu_attention(p, in.q, in.k, in.v);
    const std::vector<double> o = forward_f64(p, widen(in.q), widen(in.k), widen(in.v));
    for (size_t n = 0; n < o.size(); ++n) EXPECT_NEAR(ref.out[n], o[n], 1e-6);
  }
}

TEST(CpuAttentionBackward, MatchesFiniteDifferencesFull) {
  expect_matches_finite_differences(tiny(), random_inputs(tiny(), 10));
}

TEST(CpuAttentionBackward, MatchesFiniteDifferencesCausal) {
  expect_matches_finite_differences(tiny(MaskKind::causal), random_inputs(tiny(), 20));
}

TEST(CpuAttentionBackward, MatchesFiniteDifferencesWindow) {
  Problem p = tiny(MaskKind::window);
  p.window_left = 1;
  p.window_right = 0;
  expect_matches_finite_differences(p, random_inputs(p, 30));
}

TEST(CpuAttentionBackward, MatchesFiniteDifferencesSoftcap) {
  Problem p = tiny();
  p.softmax_scale = 0.8f;  // scores of a few units, so tanh bends them
  p.softcap = 1.5f;
  expect_matches_finite_differences(p, random_inputs(p, 40));
  p.mask = MaskKind::causal;
  expect_matches_finite_differences(p, random_inputs(p, 41));
}

TEST(CpuAttentionBackward, MatchesFiniteDifferencesOtherShapes) {
  // Different head dims for V, two batches, two KV heads of two query heads.
  Problem p = tiny();
  p.batch = 2;
  p.heads_q = 4;
  p.heads_kv = 2;
  p.seqlen_q = 4;
  p.seqlen_k = 3;
  p.head_dim_v = 5;
  expect_matches_finite_differences(p, random_inputs(p, 50));
}

TEST(CpuAttentionBackward, MatchesFiniteDifferencesWithMaskedRows) {
  Problem p = tiny(MaskKind::causal);
  p.seqlen_q = 5;
  p.seqlen_k = 3;  // rows 0 and 1 see no key
  expect_matches_finite_differences(p, random_inputs(p, 55));
}

TEST(CpuAttentionBackward, GqaSumsOverQueryHeads) {
  Problem shared = tiny(MaskKind::causal);  // hq = 2, hkv = 1
  shared.softcap = 3.0f;
  const Inputs in = random_inputs(shared, 60);
  // The same problem with the KV head duplicated: hq = hkv = 2.
  Problem split = shared;
  split.heads_kv = 2;
  const int64_t d = shared.head_dim_qk, dv = shared.head_dim_v;
  std::vector<float> k2, v2;
  for (int64_t j = 0; j < shared.seqlen_k; ++j)
    for (int copy = 0; copy < 2; ++copy) {
      k2.insert(k2.end(), in.k.begin() + j * d, in.k.begin() + (j + 1) * d);
      v2.insert(v2.end(), in.v.begin() + j * dv, in.v.begin() + (j + 1) * dv);
    }
  const AttentionGradients g1 = cpu_attention_backward(shared, in.q, in.k, in.v, in.dout);
  const AttentionGradients g2 = cpu_attention_backward(split, in.q, k2, v2, in.dout);
  ASSERT_EQ(g1.dq.size(), g2.dq.size());
  for (size_t n = 0; n < g1.dq.size(); ++n) EXPECT_NEAR(g1.dq[n], g2.dq[n], 1e-6);
  for (int64_t j = 0; j < shared.seqlen_k; ++j) {
    for (int64_t e = 0; e < d; ++e)
      EXPECT_NEAR(g1.dk[j * d + e], g2.dk[(2 * j) * d + e] + g2.dk[(2 * j + 1) * d + e], 1e-6);
    for (int64_t e = 0; e < dv; ++e)
      EXPECT_NEAR(g1.dv[j * dv + e], g2.dv[(2 * j) * dv + e] + g2.dv[(2 * j + 1) * dv + e],
                  1e-6);
  }
}

TEST(CpuAttentionBackward, FullyMaskedRowsGiveNoGradient) {
  // Causal with seqlen_q > seqlen_k, bottom-right aligned: rows 0 and 1 see no key.
  Problem p = tiny(MaskKind::causal);
  p.seqlen_q = 5;
  p.seqlen_k = 3;
  Inputs in = random_inputs(p, 70);
  for (ReferencePrecision precision : {ReferencePrecision::exact, ReferencePrecision::element}) {
    const AttentionGradients g = cpu_attention_backward(p, in.q, in.k, in.v, in.dout, precision);
    const int64_t row = p.heads_q * p.head_dim_qk;
    for (int64_t n = 0; n < 2 * row; ++n) EXPECT_EQ(g.dq[n], 0.0f) << n;
    for (int64_t n = 2 * row; n < 5 * row; ++n) EXPECT_TRUE(std::isfinite(g.dq[n]));
    EXPECT_GT(max_abs(g.dq), 0.0);
    // Masked rows add nothing to dk and dv: changing their q and dout changes nothing.
    Inputs changed = in;
    for (int64_t n = 0; n < 2 * row; ++n) changed.q[n] = 7.0f;
    for (int64_t n = 0; n < 2 * p.heads_q * p.head_dim_v; ++n) changed.dout[n] = -3.0f;
    const AttentionGradients h =
        cpu_attention_backward(p, changed.q, changed.k, changed.v, changed.dout, precision);
    EXPECT_EQ(g.dk, h.dk);
    EXPECT_EQ(g.dv, h.dv);
  }
  // A window of one key per row: keys no row sees get no gradient.
  p.mask = MaskKind::window;
  p.window_left = 0;
  p.window_right = 0;
  p.seqlen_q = 1;
  p.seqlen_k = 3;  // row 0 sees key 2 only
  in = random_inputs(p, 72);
  const AttentionGradients g = cpu_attention_backward(p, in.q, in.k, in.v, in.dout);
  // Keys 0 and 1 are seen by no row.
  const int64_t krow = p.heads_kv * p.head_dim_qk;
  for (int64_t n = 0; n < 2 * krow; ++n) {
    EXPECT_EQ(g.dk[n], 0.0f);
    EXPECT_EQ(g.dv[n], 0.0f);
  }
}

TEST(CpuAttentionBackward, ElementPrecisionIsASmallNonzeroBaseline) {
  for (DType dtype : {DType::bf16, DType::fp16}) {
    Problem p;
    p.dtype = dtype;
    p.heads_q = 4;
    p.heads_kv = 2;
    p.seqlen_q = 17;
    p.seqlen_k = 33;
    p.head_dim_qk = p.head_dim_v = 16;
    p.mask = MaskKind::causal;
    const Inputs in = random_inputs(p, 80);
    const AttentionGradients exact = cpu_attention_backward(p, in.q, in.k, in.v, in.dout);
    const AttentionGradients low =
        cpu_attention_backward(p, in.q, in.k, in.v, in.dout, ReferencePrecision::element);
    // bf16 keeps 8 bits of mantissa, fp16 11.
    const double lo = dtype == DType::bf16 ? 1e-4 : 1e-5;
    const double hi = dtype == DType::bf16 ? 5e-2 : 5e-3;
    const std::vector<float> *exact_grads[3] = {&exact.dq, &exact.dk, &exact.dv};
    const std::vector<float> *low_grads[3] = {&low.dq, &low.dk, &low.dv};
    for (int t = 0; t < 3; ++t) {
      const double err = max_abs_error(*exact_grads[t], *low_grads[t]);
      const double scale = max_abs(*exact_grads[t]);
      EXPECT_GT(err, lo * scale) << to_string(dtype) << " tensor " << t;
      EXPECT_LT(err, hi * scale) << to_string(dtype) << " tensor " << t;
      for (float x : *low_grads[t]) EXPECT_EQ(x, round_to(dtype, x));  // element-type outputs
    }
    // The criterion: exact and element pass; an error beyond 3x the baseline fails.
    EXPECT_TRUE(check_gradient_accuracy(exact, exact, low).passed());
    const GradientAccuracyReport self = check_gradient_accuracy(low, exact, low);
    EXPECT_TRUE(self.passed()) << self.describe();
    EXPECT_EQ(self.dk.tolerance, 3 * self.dk.baseline_err + 1e-5);
    AttentionGradients bad = exact;
    bad.dv[5] += float(4 * self.dv.baseline_err + 1e-4);
    const GradientAccuracyReport r = check_gradient_accuracy(bad, exact, low);
    EXPECT_FALSE(r.passed());
    EXPECT_TRUE(r.dq.passed && r.dk.passed && !r.dv.passed);
    EXPECT_EQ(r.describe().rfind("FAIL", 0), 0u) << r.describe();
    bad = exact;
    bad.dq[0] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_EQ(check_gradient_accuracy(bad, exact, low).dq.unwritten, 1u);
  }
}

// A packed batch's references: each sequence computed as a problem of its
// own and placed at its rows (the LSE at [head][total_q]); a sequence
// without keys leaves O and dQ zero and its LSE +inf, and keys no query
// sees (a sequence without queries) get dK = dV = 0.
TEST(PackedReference, EachSequenceIsItsOwnProblemAtItsRows) {
  Problem p = tiny(MaskKind::causal);
  p.varlen = true;
  PackedBatch batch;
  batch.seqlens_q = {3, 0, 2};
  batch.seqlens_k = {5, 4, 0};
  p.batch = 3;
  const int64_t hq = p.heads_q, hkv = p.heads_kv, d = p.head_dim_qk;
  const int64_t tq = batch.total_q(), tk = batch.total_k();
  const std::vector<float> q = random_values(p.dtype, size_t(tq * hq * d), 1);
  const std::vector<float> k = random_values(p.dtype, size_t(tk * hkv * d), 2);
  const std::vector<float> v = random_values(p.dtype, size_t(tk * hkv * d), 3);
  const std::vector<float> dout = random_values(p.dtype, size_t(tq * hq * d), 4);
  const PackedReferenceGradients ref = packed_reference_gradients(p, batch, q, k, v, dout);

  // Sequence 0 (queries 0..2, keys 0..4) alone.
  Problem one = p;
  one.varlen = false;
  one.batch = 1;
  one.seqlen_q = 3;
  one.seqlen_k = 5;
  auto head_rows = [](const std::vector<float> &x, int64_t rows, int64_t width) {
    return std::vector<float>(x.begin(), x.begin() + rows * width);
  };
  const auto q0 = head_rows(q, 3, hq * d), k0 = head_rows(k, 5, hkv * d),
             v0 = head_rows(v, 5, hkv * d), d0 = head_rows(dout, 3, hq * d);
  const AttentionOutputs fwd = cpu_attention(one, q0, k0, v0, ReferencePrecision::exact);
  const AttentionOutputs fwd_element = cpu_attention(one, q0, k0, v0, ReferencePrecision::element);
  const AttentionGradients grads =
      cpu_attention_backward(one, q0, k0, v0, d0, ReferencePrecision::exact);
  for (size_t i = 0; i < fwd_element.out.size(); ++i) EXPECT_EQ(ref.o[i], fwd_element.out[i]) << i;
  for (int64_t h = 0; h < hq; ++h)
    for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(ref.lse[h * tq + i], fwd.lse[h * 3 + i]);
  for (size_t i = 0; i < grads.dq.size(); ++i) EXPECT_EQ(ref.exact.dq[i], grads.dq[i]) << i;
  for (size_t i = 0; i < grads.dk.size(); ++i) EXPECT_EQ(ref.exact.dk[i], grads.dk[i]) << i;
  for (size_t i = 0; i < grads.dv.size(); ++i) EXPECT_EQ(ref.exact.dv[i], grads.dv[i]) << i;

  // Sequence 1 has no queries: its 4 keys (rows 5..8) get dK = dV = 0.
  for (int64_t i = 5 * hkv * d; i < 9 * hkv * d; ++i) {
    EXPECT_EQ(ref.exact.dk[i], 0.f);
    EXPECT_EQ(ref.element.dv[i], 0.f);
  }
  // Sequence 2 has no keys: its 2 queries (rows 3..4) get O = dQ = 0, LSE +inf.
  for (int64_t i = 3 * hq * d; i < 5 * hq * d; ++i) {
    EXPECT_EQ(ref.o[i], 0.f);
    EXPECT_EQ(ref.exact.dq[i], 0.f);
  }
  for (int64_t h = 0; h < hq; ++h)
    for (int64_t i = 3; i < 5; ++i) EXPECT_EQ(ref.lse[h * tq + i], INFINITY);
}

// Learned sinks (GPT-OSS): a head's sink logit joins each row's softmax
// denominator with no value. That is attention over one more key whose
// score is the sink and whose value is zero: a key with an extra
// dimension, q' = [q, 1] and k_extra = [0.., sink / scale], v_extra = 0.
// The references with sinks must equal the plain references on that
// problem, O and LSE forward, dq/dk/dv backward, and d sink_h must be the
// extra key's gradient in its last dimension over the scale.
struct SinkProblems {
  Problem plain, augmented;
  std::vector<float> sinks;
  Inputs in, augmented_in;
};

SinkProblems sink_problems() {
  SinkProblems s;
  Problem &p = s.plain;
  p = tiny();
  p.heads_kv = p.heads_q;  // a sink per query head rides on its own KV head
  p.softmax_scale = 0.37f;  // the augmented head dim must not change it
  s.in = random_inputs(p, 7);
  s.sinks = {0.8f, -1.3f};
  Problem &a = s.augmented;
  a = p;
  a.seqlen_k = p.seqlen_k + 1;
  a.head_dim_qk = p.head_dim_qk + 1;
  const int64_t d = p.head_dim_qk, dv = p.head_dim_v, h = p.heads_q;
  Inputs &x = s.augmented_in;
  x.q.assign(q_elements(a), 0.f);
  x.k.assign(k_elements(a), 0.f);
  x.v.assign(v_elements(a), 0.f);
  x.dout = s.in.dout;
  for (int64_t i = 0; i < p.seqlen_q; ++i)
    for (int64_t hh = 0; hh < h; ++hh) {
      for (int64_t c = 0; c < d; ++c)
        x.q[(i * h + hh) * (d + 1) + c] = s.in.q[(i * h + hh) * d + c];
      x.q[(i * h + hh) * (d + 1) + d] = 1.f;
    }
  for (int64_t j = 0; j < p.seqlen_k; ++j)
    for (int64_t hh = 0; hh < h; ++hh) {
      for (int64_t c = 0; c < d; ++c)
        x.k[(j * h + hh) * (d + 1) + c] = s.in.k[(j * h + hh) * d + c];
      for (int64_t c = 0; c < dv; ++c) x.v[(j * h + hh) * dv + c] = s.in.v[(j * h + hh) * dv + c];
    }
  for (int64_t hh = 0; hh < h; ++hh)
    x.k[(p.seqlen_k * h + hh) * (d + 1) + d] = s.sinks[hh] / p.softmax_scale;
  return s;
}

TEST(CpuAttentionSinks, ForwardIsAnExtraKeyWithoutValue) {
  const SinkProblems s = sink_problems();
  ReferenceModifiers with_sinks;
  with_sinks.sinks = s.sinks;
  const AttentionOutputs got = cpu_attention(s.plain, s.in.q, s.in.k, s.in.v,
                                             ReferencePrecision::exact, with_sinks);
  const AttentionOutputs want =
      cpu_attention(s.augmented, s.augmented_in.q, s.augmented_in.k, s.augmented_in.v);
  ASSERT_EQ(got.out.size(), want.out.size());
  for (size_t n = 0; n < got.out.size(); ++n) EXPECT_NEAR(got.out[n], want.out[n], 1e-6) << n;
  for (size_t n = 0; n < got.lse.size(); ++n) EXPECT_NEAR(got.lse[n], want.lse[n], 1e-6) << n;
  // The sinks change the result: O shrinks by the sink's share.
  const AttentionOutputs plain = cpu_attention(s.plain, s.in.q, s.in.k, s.in.v);
  EXPECT_GT(std::fabs(plain.out[0] - got.out[0]), 1e-3);
}

TEST(CpuAttentionSinks, BackwardIsAnExtraKeyWithoutValue) {
  const SinkProblems s = sink_problems();
  const Problem &p = s.plain;
  const AttentionGradients got = cpu_attention_backward(p, s.in.q, s.in.k, s.in.v, s.in.dout,
                                                        ReferencePrecision::exact, s.sinks);
  const AttentionGradients want =
      cpu_attention_backward(s.augmented, s.augmented_in.q, s.augmented_in.k, s.augmented_in.v,
                             s.augmented_in.dout);
  const int64_t d = p.head_dim_qk, dv = p.head_dim_v, h = p.heads_q;
  for (int64_t i = 0; i < p.seqlen_q; ++i)
    for (int64_t hh = 0; hh < h; ++hh)
      for (int64_t c = 0; c < d; ++c)
        EXPECT_NEAR(got.dq[(i * h + hh) * d + c], want.dq[(i * h + hh) * (d + 1) + c], 1e-6);
  for (int64_t j = 0; j < p.seqlen_k; ++j)
    for (int64_t hh = 0; hh < h; ++hh) {
      for (int64_t c = 0; c < d; ++c)
        EXPECT_NEAR(got.dk[(j * h + hh) * d + c], want.dk[(j * h + hh) * (d + 1) + c], 1e-6);
      for (int64_t c = 0; c < dv; ++c)
        EXPECT_NEAR(got.dv[(j * h + hh) * dv + c], want.dv[(j * h + hh) * dv + c], 1e-6);
    }
  ASSERT_EQ(got.dsinks.size(), size_t(h));
  for (int64_t hh = 0; hh < h; ++hh) {
    const float extra = want.dk[(p.seqlen_k * h + hh) * (d + 1) + d];
    EXPECT_NEAR(got.dsinks[hh], extra / p.softmax_scale, 1e-6) << hh;
    EXPECT_GT(std::fabs(got.dsinks[hh]), 1e-3) << "d sink is trivially zero";
  }
  // Without sinks there is no sink gradient.
  EXPECT_TRUE(cpu_attention_backward(p, s.in.q, s.in.k, s.in.v, s.in.dout).dsinks.empty());
}

TEST(CpuAttentionSinks, ARowWithoutKeysHasTheSinkAsItsLse) {
  Problem p = tiny(MaskKind::causal);
  p.seqlen_q = 5;
  p.seqlen_k = 3;  // bottom-right: rows 0 and 1 see no key
  const Inputs in = random_inputs(p, 3);
  ReferenceModifiers with_sinks;
  with_sinks.sinks = {0.5f, -2.f};
  const AttentionOutputs out =
      cpu_attention(p, in.q, in.k, in.v, ReferencePrecision::exact, with_sinks);
  for (int64_t h = 0; h < p.heads_q; ++h)
    for (int64_t i = 0; i < 2; ++i) {
      EXPECT_EQ(out.lse[h * p.seqlen_q + i], with_sinks.sinks[h]);
      for (int64_t c = 0; c < p.head_dim_v; ++c)
        EXPECT_EQ(out.out[(i * p.heads_q + h) * p.head_dim_v + c], 0.f);
    }
  const AttentionGradients g = cpu_attention_backward(p, in.q, in.k, in.v, in.dout,
                                                      ReferencePrecision::exact, with_sinks.sinks);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t c = 0; c < p.heads_q * p.head_dim_qk; ++c)
      EXPECT_EQ(g.dq[i * p.heads_q * p.head_dim_qk + c], 0.f);
}

}  // namespace
}  // namespace flashjit
