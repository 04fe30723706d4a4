// The backward's GPU reference (templates/reference_attention_backward.cuh)
// against the float64 CPU gradients (cpu_attention_backward) on small
// irregular shapes, and its modifiers against what they must equal: the
// built-in causal mask and softcap written as modifiers, a score_mod whose
// derivative is not 1, and ALiBi with a mask_mod and sinks against the CPU
// reference given the same scores through extra head dimensions. The GPU
// reference is what the tuner can trust for backward kernels compiled with
// a caller's modifiers, which the CPU reference cannot run.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "flashjit/mods.h"
#include "gpu_environment.h"
#include "reference/accuracy.h"
#include "reference/cpu_attention_backward.h"
#include "reference/gpu_reference_backward.h"
#include "runtime/device_buffer.h"

namespace flashjit {
namespace {

using testing::make_problem;
using testing::random_values;
using testing::upload_values;

double scale_of(const Problem &p) {
  return p.softmax_scale != 0.f ? double(p.softmax_scale) : 1.0 / std::sqrt(double(p.head_dim_qk));
}

// max |a − b| over max |b| (over 1 where b is all zeros).
double relative_error(llvm::ArrayRef<float> a, llvm::ArrayRef<float> b) {
  double top = 0;
  for (float x : b) top = std::max(top, double(std::fabs(x)));
  return max_abs_error(a, b) / (top > 0 ? top : 1.0);
}

// A backward's inputs on the host, as the element type holds them: q, k, v
// and dout random; O and LSE the forward's (O rounded to the element type,
// as a kernel's forward stores it); the learned sinks, or none.
struct Inputs {
  std::vector<float> q, k, v, dout, o, lse, sinks;
};

Inputs random_inputs(const Problem &p, uint64_t seed, bool sinks) {
  Inputs in;
  in.q = random_values(p.dtype, q_elements(p), seed);
  in.k = random_values(p.dtype, k_elements(p), seed + 1);
  in.v = random_values(p.dtype, v_elements(p), seed + 2);
  in.dout = random_values(p.dtype, o_elements(p), seed + 3);
  if (sinks)
    for (int64_t h = 0; h < p.heads_q; ++h) in.sinks.push_back(2.f * std::sin(float(h) + 1.f));
  return in;
}

// O from cpu_attention in `precision`, rounded; the LSE exact (a kernel
// keeps it in fp32).
void set_forward(const Problem &p, Inputs &in, ReferencePrecision precision) {
  ReferenceModifiers sinks;
  sinks.sinks = in.sinks;
  in.o = cpu_attention(p, in.q, in.k, in.v, precision, sinks).out;
  round_all(p.dtype, in.o);
  in.lse = cpu_attention(p, in.q, in.k, in.v, ReferencePrecision::exact, sinks).lse;
}

// [batch, seqlen, heads, dim] values as [batch, heads, seqlen, dim].
std::vector<float> to_bhsd(const std::vector<float> &packed, int64_t batch, int64_t seqlen,
                           int64_t heads, int64_t dim) {
  std::vector<float> out(packed.size());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < seqlen; ++s)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t d = 0; d < dim; ++d)
          out[((b * heads + h) * seqlen + s) * dim + d] =
              packed[((b * seqlen + s) * heads + h) * dim + d];
  return out;
}

// How a call passes its inputs: the modifiers (sinks from Inputs::sinks),
// and the layout of the 16-bit tensors.
struct Call {
  const Modifiers *modifiers = nullptr;
  const AuxValues *aux = nullptr;
  bool bhsd = false;  // [batch, heads, seqlen, dim] rather than packed
};

llvm::Expected<AttentionGradients> gpu_backward(const Problem &p, const Inputs &in,
                                                ReferencePrecision precision,
                                                const Call &call = {}) {
  auto layout = [&](const std::vector<float> &x, int64_t seqlen, int64_t heads, int64_t dim) {
    return call.bhsd ? to_bhsd(x, p.batch, seqlen, heads, dim) : x;
  };
  auto q = upload_values(p.dtype, layout(in.q, p.seqlen_q, p.heads_q, p.head_dim_qk));
  auto k = upload_values(p.dtype, layout(in.k, p.seqlen_k, p.heads_kv, p.head_dim_qk));
  auto v = upload_values(p.dtype, layout(in.v, p.seqlen_k, p.heads_kv, p.head_dim_v));
  auto o = upload_values(p.dtype, layout(in.o, p.seqlen_q, p.heads_q, p.head_dim_v));
  auto dout = upload_values(p.dtype, layout(in.dout, p.seqlen_q, p.heads_q, p.head_dim_v));
  auto lse = DeviceBuffer::from_host(in.lse.data(), in.lse.size() * sizeof(float));
  auto sinks = DeviceBuffer::from_host(in.sinks.data(), in.sinks.size() * sizeof(float));
  for (auto *b : {&q, &k, &v, &o, &dout, &lse, &sinks})
    if (!*b) return b->takeError();
  BackwardArgs args = BackwardArgs::packed(p, q->data(), k->data(), v->data(), o->data(),
                                           dout->data(), static_cast<const float *>(lse->data()),
                                           nullptr, nullptr, nullptr, nullptr, 0);
  if (call.bhsd) {
    auto strides = [&](int64_t seqlen, int64_t heads, int64_t dim) {
      return TensorStrides{heads * seqlen * dim, dim, seqlen * dim};
    };
    args.q_strides = strides(p.seqlen_q, p.heads_q, p.head_dim_qk);
    args.k_strides = strides(p.seqlen_k, p.heads_kv, p.head_dim_qk);
    args.v_strides = strides(p.seqlen_k, p.heads_kv, p.head_dim_v);
    args.o_strides = args.dout_strides = strides(p.seqlen_q, p.heads_q, p.head_dim_v);
  }
  args.modifiers = call.modifiers;
  if (call.aux) {
    args.aux = call.aux->data();
    args.aux_bytes = call.aux->size();
  }
  if (!in.sinks.empty()) args.sinks = static_cast<const float *>(sinks->data());
  return gpu_reference_attention_backward(p, args, precision);
}

// cpu_attention_backward(exact) with D = rowsum(dO ∘ O) from in.o, the
// 16-bit O the GPU reads, rather than from the exact O. The gradients are
// affine in D: dQ_i = … − scale·D_i·Σ_j P_ij K_j, dK_j = … − scale·Σ_i
// P_ij D_i Q_i, d sink_h = −Σ_i P_sink,i D_i; so δ = D(in.o) − D(exact O)
// moves them by terms the CPU references compute: Σ_j P_ij K_j is the
// forward's output with K as the values, Σ_i P_ij δ_i Q_i the dV of
// dO := δ·Q. Exact without a softcap; with one, these terms leave out its
// factor 1 − tanh² (close to 1 for a softcap well above the scores).
AttentionGradients cpu_gradients_reading_o(const Problem &p, const Inputs &in) {
  ReferenceModifiers sinks;
  sinks.sinks = in.sinks;
  const AttentionOutputs forward =
      cpu_attention(p, in.q, in.k, in.v, ReferencePrecision::exact, sinks);
  AttentionGradients g =
      cpu_attention_backward(p, in.q, in.k, in.v, in.dout, ReferencePrecision::exact, in.sinks);
  Problem keys_as_values = p;
  keys_as_values.head_dim_v = p.head_dim_qk;
  const std::vector<float> pk =
      cpu_attention(keys_as_values, in.q, in.k, in.k, ReferencePrecision::exact, sinks).out;
  const double scale = scale_of(p);
  const int64_t dqk = p.head_dim_qk, dv = p.head_dim_v;
  std::vector<float> delta_q(q_elements(p));
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t i = 0; i < p.seqlen_q; ++i)
      for (int64_t h = 0; h < p.heads_q; ++h) {
        const int64_t row = (b * p.seqlen_q + i) * p.heads_q + h;
        double delta = 0;
        for (int64_t d = 0; d < dv; ++d)
          delta += double(in.dout[row * dv + d]) *
                   (double(in.o[row * dv + d]) - double(forward.out[row * dv + d]));
        for (int64_t d = 0; d < dqk; ++d) {
          g.dq[row * dqk + d] =
              float(double(g.dq[row * dqk + d]) - scale * delta * pk[row * dqk + d]);
          delta_q[row * dqk + d] = float(delta * in.q[row * dqk + d]);
        }
        if (!in.sinks.empty()) {
          const double lse = forward.lse[(b * p.heads_q + h) * p.seqlen_q + i];
          g.dsinks[h] = float(double(g.dsinks[h]) - std::exp(double(in.sinks[h]) - lse) * delta);
        }
      }
  const AttentionGradients shift = cpu_attention_backward(keys_as_values, in.q, in.k, in.k, delta_q,
                                                          ReferencePrecision::exact, in.sinks);
  for (size_t n = 0; n < g.dk.size(); ++n)
    g.dk[n] = float(double(g.dk[n]) - scale * double(shift.dv[n]));
  return g;
}

struct Shape {
  Problem problem;
  bool sinks;
};

TEST(ReferenceBackwardGpu, MatchesTheCpuReferenceOnIrregularShapes) {
  FLASHJIT_REQUIRE_GPU();
  const int64_t U = -1;
  const Shape shapes[] = {
      {make_problem(DType::bf16, 2, 4, 2, 77, 133, 64, 64, MaskKind::none), false},
      {make_problem(DType::fp16, 2, 4, 2, 77, 133, 64, 64, MaskKind::none), true},
      {make_problem(DType::fp16, 1, 4, 2, 77, 133, 96, 64, MaskKind::causal), false},
      {make_problem(DType::bf16, 1, 4, 2, 77, 133, 96, 64, MaskKind::causal), true},
      // More queries than keys: the first rows see no key.
      {make_problem(DType::bf16, 1, 4, 2, 133, 77, 96, 64, MaskKind::causal), false},
      {make_problem(DType::bf16, 1, 1, 1, 200, 3, 16, 24, MaskKind::causal), true},
      {make_problem(DType::fp16, 2, 2, 1, 64, 200, 32, 32, MaskKind::window, 16, 3), false},
      {make_problem(DType::bf16, 1, 2, 2, 45, 45, 256, 256, MaskKind::window, 7, U), true},
      {make_problem(DType::bf16, 1, 2, 1, 33, 65, 72, 40, MaskKind::none, U, U, 5.0f), false},
      {make_problem(DType::fp16, 1, 4, 2, 77, 133, 64, 64, MaskKind::causal, U, U, 8.0f), true},
      {make_problem(DType::bf16, 1, 1, 1, 1, 1, 8, 8, MaskKind::none), false},
  };
  uint64_t seed = 300;
  for (const Shape &s : shapes) {
    const Problem &p = s.problem;
    SCOPED_TRACE(describe(p) + (s.sinks ? " sinks" : ""));
    Modifiers sinks;
    sinks.sinks = s.sinks;
    Call call;
    if (s.sinks) call.modifiers = &sinks;
    Inputs in = random_inputs(p, seed += 10, s.sinks);

    // fp32 against float64 from the same inputs, O included.
    set_forward(p, in, ReferencePrecision::exact);
    auto gpu_exact = gpu_backward(p, in, ReferencePrecision::exact, call);
    ASSERT_TRUE(bool(gpu_exact)) << llvm::toString(gpu_exact.takeError());
    const AttentionGradients cpu = cpu_gradients_reading_o(p, in);
    for (const auto *g : {&gpu_exact->dq, &gpu_exact->dk, &gpu_exact->dv})
      EXPECT_EQ(count_nan(*g), 0u);
    // fp32 against float64: at most 7.3e-7 on the H200 (d=256). With a
    // softcap, cpu_gradients_reading_o's shift of D leaves out 1 − tanh²:
    // the shift is up to 9e-4 of the gradients (softcap 5) and what it
    // leaves 1.6e-4.
    const double tolerance = p.softcap > 0 ? 4e-4 : 5e-6;
    EXPECT_LE(relative_error(gpu_exact->dq, cpu.dq), tolerance);
    EXPECT_LE(relative_error(gpu_exact->dk, cpu.dk), tolerance);
    EXPECT_LE(relative_error(gpu_exact->dv, cpu.dv), 5e-6);
    ASSERT_EQ(gpu_exact->dsinks.size(), s.sinks ? size_t(p.heads_q) : 0u);
    if (s.sinks) {
      EXPECT_LE(max_abs_error(gpu_exact->dsinks, cpu.dsinks), tolerance);
    }

    // The same-precision variant, from the element-precision forward's O:
    // it may round a P, a dS or an output to the neighbouring 16-bit value
    // where fp32 and float64 straddle a tie, so it is held to the baseline
    // it defines, as the forward reference is (reference_gpu_test.cpp).
    set_forward(p, in, ReferencePrecision::element);
    auto gpu_low = gpu_backward(p, in, ReferencePrecision::element, call);
    ASSERT_TRUE(bool(gpu_low)) << llvm::toString(gpu_low.takeError());
    const AttentionGradients cpu_exact =
        cpu_attention_backward(p, in.q, in.k, in.v, in.dout, ReferencePrecision::exact, in.sinks);
    const AttentionGradients cpu_low =
        cpu_attention_backward(p, in.q, in.k, in.v, in.dout, ReferencePrecision::element, in.sinks);
    const std::pair<const char *, std::vector<float> AttentionGradients::*> tensors[] = {
        {"dq", &AttentionGradients::dq},
        {"dk", &AttentionGradients::dk},
        {"dv", &AttentionGradients::dv}};
    for (const auto &[name, tensor] : tensors) {
      SCOPED_TRACE(name);
      const double cpu_baseline = max_abs_error(cpu_low.*tensor, cpu_exact.*tensor);
      const double gpu_baseline = max_abs_error((*gpu_low).*tensor, cpu_exact.*tensor);
      EXPECT_LE(gpu_baseline, 1.5 * cpu_baseline + 1e-5);
      EXPECT_GE(gpu_baseline, 0.5 * cpu_baseline);
      EXPECT_LE(max_abs_error((*gpu_low).*tensor, cpu_low.*tensor), 2 * cpu_baseline + 1e-5);
    }
    // The sinks' gradient is never rounded: fp32 against float64 from the
    // same O.
    if (s.sinks) {
      EXPECT_LE(max_abs_error(gpu_low->dsinks, cpu_low.dsinks), 2e-5);
    }
  }
}

// The same tensors as [batch, heads, seqlen, dim] views give the same bits.
TEST(ReferenceBackwardGpu, StridedInputsGiveThePackedGradients) {
  FLASHJIT_REQUIRE_GPU();
  const Problem p = make_problem(DType::bf16, 2, 4, 2, 77, 133, 96, 64, MaskKind::causal);
  Inputs in = random_inputs(p, 7, false);
  set_forward(p, in, ReferencePrecision::element);
  auto packed = gpu_backward(p, in, ReferencePrecision::element);
  ASSERT_TRUE(bool(packed)) << llvm::toString(packed.takeError());
  Call bhsd;
  bhsd.bhsd = true;
  auto strided = gpu_backward(p, in, ReferencePrecision::element, bhsd);
  ASSERT_TRUE(bool(strided)) << llvm::toString(strided.takeError());
  EXPECT_EQ(strided->dq, packed->dq);
  EXPECT_EQ(strided->dk, packed->dk);
  EXPECT_EQ(strided->dv, packed->dv);
}

// Bottom-right causal written as a mask_mod (with the offset in aux) is the
// built-in causal mask bit for bit, in both precisions; and two runs give
// the same bits.
TEST(ReferenceBackwardGpu, CausalAsAMaskModIsTheBuiltInCausalBitForBit) {
  FLASHJIT_REQUIRE_GPU();
  const Problem causal = make_problem(DType::fp16, 2, 4, 2, 77, 133, 64, 64, MaskKind::causal);
  Problem unmasked = causal;
  unmasked.mask = MaskKind::none;
  Modifiers m;
  m.mask_mod =
      "__device__ bool mask_mod(int b, int h, int q, int k, const Aux &aux) {\n"
      "  return k <= q + aux.offset;\n"
      "}\n";
  m.aux = {{"int", "offset"}};
  AuxValues aux(m);
  ASSERT_EQ(aux.set("offset", static_cast<long long>(causal.seqlen_k - causal.seqlen_q)), "");
  Call call;
  call.modifiers = &m;
  call.aux = &aux;
  Inputs in = random_inputs(causal, 11, false);
  for (ReferencePrecision precision : {ReferencePrecision::exact, ReferencePrecision::element}) {
    set_forward(causal, in, precision);
    auto built_in = gpu_backward(causal, in, precision);
    ASSERT_TRUE(bool(built_in)) << llvm::toString(built_in.takeError());
    auto modified = gpu_backward(unmasked, in, precision, call);
    ASSERT_TRUE(bool(modified)) << llvm::toString(modified.takeError());
    EXPECT_EQ(modified->dq, built_in->dq);
    EXPECT_EQ(modified->dk, built_in->dk);
    EXPECT_EQ(modified->dv, built_in->dv);
    auto again = gpu_backward(causal, in, precision);
    ASSERT_TRUE(bool(again)) << llvm::toString(again.takeError());
    EXPECT_EQ(again->dq, built_in->dq);
    EXPECT_EQ(again->dk, built_in->dk);
    EXPECT_EQ(again->dv, built_in->dv);
  }
}

// A score_mod whose derivative is not 1: 0.5 * score with score_mod_grad
// 0.5 is the plain attention at half the scale, exactly (halving is exact
// in floating point), so the reference must give its bits.
TEST(ReferenceBackwardGpu, ScoreModGradientScalesTheScoreGradient) {
  FLASHJIT_REQUIRE_GPU();
  Problem p = make_problem(DType::bf16, 1, 4, 2, 77, 133, 96, 64, MaskKind::window, 40, 10);
  p.softmax_scale = 0.125f;
  Problem half = p;
  half.softmax_scale = 0.0625f;
  Modifiers m;
  m.score_mod =
      "__device__ float score_mod(float score, int b, int h, int q, int k) {\n"
      "  return 0.5f * score;\n"
      "}\n";
  m.score_mod_grad =
      "__device__ float score_mod_grad(float score, int b, int h, int q, int k) {\n"
      "  return 0.5f;\n"
      "}\n";
  Call call;
  call.modifiers = &m;
  Inputs in = random_inputs(p, 21, false);
  set_forward(half, in, ReferencePrecision::exact);
  auto plain = gpu_backward(half, in, ReferencePrecision::exact);
  ASSERT_TRUE(bool(plain)) << llvm::toString(plain.takeError());
  auto modified = gpu_backward(p, in, ReferencePrecision::exact, call);
  ASSERT_TRUE(bool(modified)) << llvm::toString(modified.takeError());
  EXPECT_EQ(modified->dq, plain->dq);
  EXPECT_EQ(modified->dk, plain->dk);
  EXPECT_EQ(modified->dv, plain->dv);
  // And the plain one is the CPU's.
  const AttentionGradients cpu = cpu_gradients_reading_o(half, in);
  EXPECT_LE(relative_error(plain->dq, cpu.dq), 5e-6);
  EXPECT_LE(relative_error(plain->dk, cpu.dk), 5e-6);
}

// A tanh softcap written as a score_mod (with score_mod_grad 1 − tanh²)
// is the built-in softcap bit for bit, in both precisions: the modifier
// path and the built-in one compute the same backward.
TEST(ReferenceBackwardGpu, TanhSoftcapModifierIsTheBuiltInSoftcap) {
  FLASHJIT_REQUIRE_GPU();
  const Problem capped =
      make_problem(DType::bf16, 2, 4, 2, 77, 133, 64, 64, MaskKind::causal, -1, -1, 2.5f);
  Problem plain = capped;
  plain.softcap = 0.f;
  Modifiers m;
  m.score_mod =
      "__device__ float score_mod(float score, int b, int h, int q, int k, const Aux &aux) {\n"
      "  return aux.cap * tanhf(score / aux.cap);\n"
      "}\n";
  m.score_mod_grad =
      "__device__ float score_mod_grad(float score, int b, int h, int q, int k, const Aux &aux) {\n"
      "  const float t = tanhf(score / aux.cap);\n"
      "  return 1.f - t * t;\n"
      "}\n";
  m.aux = {{"float", "cap"}};
  AuxValues aux(m);
  ASSERT_EQ(aux.set("cap", 2.5f), "");
  Call call;
  call.modifiers = &m;
  call.aux = &aux;
  Inputs in = random_inputs(capped, 31, false);
  for (ReferencePrecision precision : {ReferencePrecision::exact, ReferencePrecision::element}) {
    set_forward(capped, in, precision);
    auto built_in = gpu_backward(capped, in, precision);
    ASSERT_TRUE(bool(built_in)) << llvm::toString(built_in.takeError());
    auto modified = gpu_backward(plain, in, precision, call);
    ASSERT_TRUE(bool(modified)) << llvm::toString(modified.takeError());
    EXPECT_EQ(modified->dq, built_in->dq);
    EXPECT_EQ(modified->dk, built_in->dk);
    EXPECT_EQ(modified->dv, built_in->dv);
  }
}

// ALiBi (mods::alibi over per-head slopes), a mask_mod hiding every third
// key (by batch), the built-in causal mask and learned sinks, against the
// CPU reference given the same scores through three extra head dimensions:
// q' = [q, −c_h·i, c_h, 1] and k' = [k, 1, j, −M where hidden], so that
// scale·q'·k' = scale·q·k + slope_h·(j − i) − scale·M·hidden with c_h =
// slope_h / scale (powers of two: every product exact) and scale·M = 2048
// (exp of it is 0 in float64). The first head_dim_qk columns of the
// extended dQ and dK are the gradients.
TEST(ReferenceBackwardGpu, AlibiMaskModAndSinksMatchTheCpuThroughExtraDimensions) {
  FLASHJIT_REQUIRE_GPU();
  Problem p = make_problem(DType::bf16, 2, 4, 2, 77, 133, 64, 64, MaskKind::causal);
  p.softmax_scale = 0.125f;
  Modifiers m = mods::alibi();
  m.mask_mod =
      "__device__ bool mask_mod(int b, int h, int q, int k, const Aux &aux) {\n"
      "  return (k + b) % 3 != 0;\n"
      "}\n";
  m.sinks = true;
  const std::vector<float> slopes = {-0.0625f, -0.03125f, -0.015625f, -0.0078125f};
  auto slopes_device = DeviceBuffer::from_host(slopes.data(), slopes.size() * sizeof(float));
  ASSERT_TRUE(bool(slopes_device)) << llvm::toString(slopes_device.takeError());
  AuxValues aux(m);
  ASSERT_EQ(aux.set("slopes", slopes_device->data()), "");
  Call call;
  call.modifiers = &m;
  call.aux = &aux;

  Inputs in = random_inputs(p, 41, true);
  const int64_t d = p.head_dim_qk, dx = d + 3;
  const double big = 16384;  // M
  Problem extended = p;
  extended.head_dim_qk = static_cast<int>(dx);
  Inputs ex = in;
  ex.q.assign(q_elements(extended), 0.f);
  ex.k.assign(k_elements(extended), 0.f);
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t i = 0; i < p.seqlen_q; ++i)
      for (int64_t h = 0; h < p.heads_q; ++h) {
        const int64_t row = (b * p.seqlen_q + i) * p.heads_q + h;
        std::copy_n(&in.q[row * d], d, &ex.q[row * dx]);
        const float c = float(slopes[h] / p.softmax_scale);
        ex.q[row * dx + d] = -c * float(i);
        ex.q[row * dx + d + 1] = c;
        ex.q[row * dx + d + 2] = 1.f;
      }
    for (int64_t j = 0; j < p.seqlen_k; ++j)
      for (int64_t h = 0; h < p.heads_kv; ++h) {
        const int64_t row = (b * p.seqlen_k + j) * p.heads_kv + h;
        std::copy_n(&in.k[row * d], d, &ex.k[row * dx]);
        ex.k[row * dx + d] = 1.f;
        ex.k[row * dx + d + 1] = float(j);
        ex.k[row * dx + d + 2] = (j + b) % 3 != 0 ? 0.f : float(-big);
      }
  }
  set_forward(extended, ex, ReferencePrecision::exact);
  in.o = ex.o;
  in.lse = ex.lse;
  auto gpu = gpu_backward(p, in, ReferencePrecision::exact, call);
  ASSERT_TRUE(bool(gpu)) << llvm::toString(gpu.takeError());
  const AttentionGradients cpu_extended = cpu_gradients_reading_o(extended, ex);
  AttentionGradients cpu;
  cpu.dv = cpu_extended.dv;
  cpu.dsinks = cpu_extended.dsinks;
  for (size_t row = 0; row < q_elements(p) / d; ++row)
    cpu.dq.insert(cpu.dq.end(), &cpu_extended.dq[row * dx], &cpu_extended.dq[row * dx + d]);
  for (size_t row = 0; row < k_elements(p) / d; ++row)
    cpu.dk.insert(cpu.dk.end(), &cpu_extended.dk[row * dx], &cpu_extended.dk[row * dx + d]);
  EXPECT_EQ(count_nan(gpu->dq) + count_nan(gpu->dk) + count_nan(gpu->dv), 0u);
  EXPECT_LE(relative_error(gpu->dq, cpu.dq), 5e-6);  // 3e-7 on the H200
  EXPECT_LE(relative_error(gpu->dk, cpu.dk), 5e-6);
  EXPECT_LE(relative_error(gpu->dv, cpu.dv), 5e-6);
  ASSERT_EQ(gpu->dsinks.size(), size_t(p.heads_q));
  EXPECT_LE(max_abs_error(gpu->dsinks, cpu.dsinks), 1e-5);  // 1.1e-6
  // The hidden keys get no gradient at all.
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t j = b == 0 ? 0 : 2; j < p.seqlen_k; j += 3)
      for (int64_t c = 0; c < d; ++c)
        ASSERT_EQ(gpu->dk[((b * p.seqlen_k + j) * p.heads_kv) * d + c], 0.f) << b << " " << j;
}

// The tuner may check a backward at the sizes it tunes: 8k tokens, 16
// heads, d=128 stays within seconds.
TEST(ReferenceBackwardGpu, LongSequenceIsQuick) {
  FLASHJIT_REQUIRE_GPU();
  const Problem p = make_problem(DType::bf16, 2, 16, 16, 8192, 8192, 128, 128, MaskKind::none);
  const size_t n = q_elements(p);
  auto tensor = DeviceBuffer::allocate(n * sizeof(uint16_t));
  ASSERT_TRUE(bool(tensor)) << llvm::toString(tensor.takeError());
  FLASHJIT_ASSERT_OK(tensor->fill_bytes(0x3C));  // 0x3C3C: a small normal in bf16 and fp16
  auto lse = DeviceBuffer::allocate(lse_elements(p) * sizeof(float));
  ASSERT_TRUE(bool(lse)) << llvm::toString(lse.takeError());
  FLASHJIT_ASSERT_OK(lse->fill_bytes(0x3C));  // about 0.0115
  void *t = tensor->data();
  const BackwardArgs args =
      BackwardArgs::packed(p, t, t, t, t, t, static_cast<const float *>(lse->data()), nullptr,
                           nullptr, nullptr, nullptr, 0);
  auto warm = gpu_reference_attention_backward(p, args, ReferencePrecision::exact);  // compiles
  ASSERT_TRUE(bool(warm)) << llvm::toString(warm.takeError());
  const auto start = std::chrono::steady_clock::now();
  auto grads = gpu_reference_attention_backward(p, args, ReferencePrecision::element);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(bool(grads)) << llvm::toString(grads.takeError());
  EXPECT_EQ(count_nan(grads->dq) + count_nan(grads->dk) + count_nan(grads->dv), 0u);
  RecordProperty("seconds", std::to_string(seconds));
  std::printf("backward reference, %s: %.3f s\n", describe(p).c_str(), seconds);
  EXPECT_LT(seconds, 10.0);  // 0.85 s on the H200
}

}  // namespace
}  // namespace flashjit
