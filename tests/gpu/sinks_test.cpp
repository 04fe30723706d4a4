// Learned attention sinks (GPT-OSS), built in (Modifiers::sinks):
// the forward of both families, unsplit and split-KV (the combine adds the
// sink once), against the float64 reference with the sinks, a row that sees
// no key writing O = 0 and LSE = its head's sink; the backward's dq, dk, dv
// with the gradient criterion (reference/accuracy.h) and d sinks against the reference's,
// the deterministic mode bit-identical over runs. Outputs and gradients are
// poisoned before each run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "flashjit/backward.h"
#include "flashjit/forward.h"
#include "flashjit/mods.h"
#include "forward_check.h"
#include "reference/accuracy.h"
#include "reference/cpu_attention_backward.h"
#include "runtime/launch_backward.h"
#include "runtime/launch_forward.h"

namespace flashjit {
namespace {

using testing::make_problem;
using testing::upload_values;

Modifiers with_sinks() {
  Modifiers m;
  m.sinks = true;
  return m;
}

// Logits of either sign and size: some rows are dominated by their sink.
std::vector<float> sink_logits(int64_t heads) {
  std::vector<float> s(heads);
  for (int64_t h = 0; h < heads; ++h) s[h] = static_cast<float>((h % 5) - 2) * 1.7f + 0.3f;
  return s;
}

struct SinkRun {
  std::vector<float> out, lse;
  AttentionGradients grads;  // dsinks included
};

// The forward (and, when `dout` is given, the backward) of `p` with sinks
// through launch_forward / launch_backward; `modifiers` (with sinks) and
// their `aux` where others join the sinks.
SinkRun run_sinks(const Problem &p, const KernelConfig &config, const std::vector<float> &sinks,
                  const std::vector<float> &q, const std::vector<float> &k,
                  const std::vector<float> &v, const std::vector<float> *dout,
                  const Modifiers &modifiers = with_sinks(), const AuxValues *aux = nullptr) {
  SinkRun r;
  auto dq_in = upload_values(p.dtype, q), dk_in = upload_values(p.dtype, k),
       dv_in = upload_values(p.dtype, v);
  auto o = DeviceBuffer::allocate(o_elements(p) * 2);
  auto lse = DeviceBuffer::allocate(lse_elements(p) * 4);
  auto dsinks_in = DeviceBuffer::from_host(sinks.data(), sinks.size() * 4);
  for (auto *buffer : {&dq_in, &dk_in, &dv_in, &o, &lse, &dsinks_in}) {
    if (!*buffer) {
      ADD_FAILURE() << llvm::toString(buffer->takeError());
      return r;
    }
  }
  EXPECT_FALSE(bool(o->fill_bytes(0xff)));
  EXPECT_FALSE(bool(lse->fill_bytes(0xff)));
  ForwardArgs fa = ForwardArgs::packed(p, dq_in->data(), dk_in->data(), dv_in->data(), o->data(),
                                       static_cast<float *>(lse->data()));
  fa.modifiers = &modifiers;
  fa.sinks = static_cast<const float *>(dsinks_in->data());
  if (aux) fa.aux = aux->data(), fa.aux_bytes = aux->size();
  if (llvm::Error e = launch_forward(p, fa, nullptr, config)) {
    ADD_FAILURE() << llvm::toString(std::move(e));
    return r;
  }
  auto out = testing::download_values(p.dtype, *o, o_elements(p));
  if (!out) {
    ADD_FAILURE() << llvm::toString(out.takeError());
    return r;
  }
  r.out = std::move(*out);
  r.lse.resize(lse_elements(p));
  EXPECT_FALSE(bool(lse->download(r.lse.data(), r.lse.size() * 4)));
  if (!dout) return r;

  auto ddo = upload_values(p.dtype, *dout);
  auto dq = DeviceBuffer::allocate(q_elements(p) * 2);
  auto dk = DeviceBuffer::allocate(k_elements(p) * 2);
  auto dv = DeviceBuffer::allocate(v_elements(p) * 2);
  auto ds = DeviceBuffer::allocate(sinks.size() * 4);
  auto ws = DeviceBuffer::allocate(backward_workspace_bytes(p));
  for (auto *buffer : {&ddo, &dq, &dk, &dv, &ds, &ws}) {
    if (!*buffer) {
      ADD_FAILURE() << llvm::toString(buffer->takeError());
      return r;
    }
  }
  for (DeviceBuffer *poisoned : {&*dq, &*dk, &*dv, &*ds, &*ws})
    EXPECT_FALSE(bool(poisoned->fill_bytes(0xff)));
  BackwardArgs ba = BackwardArgs::packed(p, dq_in->data(), dk_in->data(), dv_in->data(), o->data(),
                                         ddo->data(), static_cast<const float *>(lse->data()),
                                         dq->data(), dk->data(), dv->data(), ws->data(),
                                         ws->size());
  ba.modifiers = &modifiers;
  ba.sinks = static_cast<const float *>(dsinks_in->data());
  if (aux) ba.aux = aux->data(), ba.aux_bytes = aux->size();
  ba.dsinks = static_cast<float *>(ds->data());
  if (llvm::Error e = launch_backward(p, ba, nullptr, config)) {
    ADD_FAILURE() << llvm::toString(std::move(e));
    return r;
  }
  auto grads = testing::download_gradients(p, *dq, *dk, *dv);
  if (!grads) {
    ADD_FAILURE() << llvm::toString(grads.takeError());
    return r;
  }
  r.grads = std::move(*grads);
  r.grads.dsinks.resize(sinks.size());
  EXPECT_FALSE(bool(ds->download(r.grads.dsinks.data(), sinks.size() * 4)));
  return r;
}

// d sinks recomputed in float64 from what the kernels wrote: the forward's O
// (element type) and LSE with dO; and per head the sum of the terms'
// magnitudes, sum over rows of exp(sink - LSE) * sum |dO * O|, the scale of
// the rounding any computation of D carries.
struct SinkGradientCheck {
  std::vector<double> from_kernel_outputs, magnitude;
};

SinkGradientCheck sink_gradient_check(const Problem &p, const std::vector<float> &sinks,
                                      const SinkRun &run, const std::vector<float> &dout) {
  SinkGradientCheck c;
  c.from_kernel_outputs.assign(p.heads_q, 0.0);
  c.magnitude.assign(p.heads_q, 0.0);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t i = 0; i < p.seqlen_q; ++i) {
        const double prob =
            std::exp(double(sinks[h]) - run.lse[(b * p.heads_q + h) * p.seqlen_q + i]);
        const size_t row = static_cast<size_t>(((b * p.seqlen_q + i) * p.heads_q + h) * p.head_dim_v);
        double delta = 0, delta_magnitude = 0;
        for (int64_t d = 0; d < p.head_dim_v; ++d) {
          delta += double(dout[row + d]) * run.out[row + d];
          delta_magnitude += std::fabs(double(dout[row + d]) * run.out[row + d]);
        }
        c.from_kernel_outputs[h] -= prob * delta;
        c.magnitude[h] += prob * delta_magnitude;
      }
  return c;
}

// Half an ulp of 1 in the element type: the relative error of one rounding.
double unit_roundoff(DType dtype) { return dtype == DType::bf16 ? 0x1p-8 : 0x1p-11; }

// A forward case: family, mask, lengths, splits.
struct SinkCase {
  KernelPath path;
  MaskKind mask;
  int64_t seqlen_q, seqlen_k;
  int splits;
};

// Causal with more queries than keys leaves the first row of every (batch,
// head) without a key: its LSE is the head's sink (to fp32 rounding).
void expect_keyless_rows_take_the_sink(const Problem &p, const std::vector<float> &lse,
                                       const std::vector<float> &sinks) {
  if (p.mask != MaskKind::causal || p.seqlen_q <= p.seqlen_k) return;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h)
      EXPECT_NEAR(lse[(b * p.heads_q + h) * p.seqlen_q], sinks[h], 1e-5);
}

// The forward cases: both families, unsplit and split over 3 CTAs per row,
// full and causal; causal with more queries than keys leaves the first rows
// without a key (O = 0, LSE = the sink); decode. GQA 6/2, irregular lengths.
constexpr SinkCase kForwardCases[] = {
    {KernelPath::sm90, MaskKind::none, 300, 421, 1},
    {KernelPath::sm90, MaskKind::causal, 300, 421, 1},
    {KernelPath::sm90, MaskKind::causal, 333, 200, 1},
    {KernelPath::sm90, MaskKind::none, 5, 1000, 3},
    {KernelPath::sm90, MaskKind::none, 1, 777, 1},
    {KernelPath::sm80, MaskKind::none, 300, 421, 1},
    {KernelPath::sm80, MaskKind::causal, 333, 200, 1},
    {KernelPath::sm80, MaskKind::none, 5, 1000, 3},
};

// One forward case with sinks and `modifiers` (with `aux`; `ref` their
// reference twin, the sinks added here): O and the LSE against the
// reference, keyless rows at the sink.
void expect_forward_with_sinks(const SinkCase &c, DType dtype, const Modifiers &modifiers,
                               const AuxValues *aux, ReferenceModifiers ref) {
  const Problem p = make_problem(dtype, 2, 6, 2, c.seqlen_q, c.seqlen_k, 128, 128, c.mask);
  SCOPED_TRACE(describe(p) + " " + to_string(c.path) + " splits " + std::to_string(c.splits));
  KernelConfig config{c.path};
  config.splits = c.splits;
  const std::vector<float> sinks = sink_logits(p.heads_q);
  const auto q = random_values(p.dtype, q_elements(p), 51);
  const auto k = random_values(p.dtype, k_elements(p), 52);
  const auto v = random_values(p.dtype, v_elements(p), 53);
  const SinkRun got = run_sinks(p, config, sinks, q, k, v, nullptr, modifiers, aux);
  ASSERT_EQ(got.out.size(), o_elements(p));
  ref.sinks = sinks;
  const AttentionOutputs exact = cpu_attention(p, q, k, v, ReferencePrecision::exact, ref);
  const AttentionOutputs element = cpu_attention(p, q, k, v, ReferencePrecision::element, ref);
  const AccuracyReport report =
      check_forward_accuracy(got.out, exact.out, element.out, got.lse, exact.lse);
  EXPECT_TRUE(report.passed) << report.describe();
  expect_keyless_rows_take_the_sink(p, got.lse, sinks);
}

TEST(SinksGpu, ForwardMatchesTheReference) {
  FLASHJIT_REQUIRE_SM90();
  for (const SinkCase &c : kForwardCases)
    for (DType dtype : {DType::bf16, DType::fp16})
      expect_forward_with_sinks(c, dtype, with_sinks(), nullptr, {});
}

// ALiBi's slope form (score_mod_slope: the sm90 forward biases against the
// warpgroup's first row and takes the rows' own part off the max) with
// sinks, which must meet the keys in the true logits' units; sm80, which
// calls score_mod, as the twin.
TEST(SinksGpu, AlibiSlopeWithSinksMatchesTheReference) {
  FLASHJIT_REQUIRE_SM90();
  Modifiers modifiers = mods::alibi();
  modifiers.sinks = true;
  std::vector<float> slopes(6);  // the cases' query heads
  for (size_t h = 0; h < slopes.size(); ++h) slopes[h] = -std::exp2(-8.0 * (h + 1) / 6);
  auto dslopes = DeviceBuffer::from_host(slopes.data(), slopes.size() * 4);
  FLASHJIT_ASSERT_OK(dslopes.takeError());
  AuxValues aux(modifiers);
  ASSERT_EQ(aux.set("slopes", static_cast<const void *>(dslopes->data())), "");
  ReferenceModifiers ref;
  ref.score = [&](double s, int64_t, int64_t h, int64_t qi, int64_t ki) {
    return s + double(slopes[h]) * double(ki - qi);
  };
  for (const SinkCase &c : kForwardCases)
    expect_forward_with_sinks(c, DType::bf16, modifiers, &aux, ref);
}

// The backward with sinks: dq, dk, dv with the gradient criterion (reference/accuracy.h)
// and d sinks against the reference's (at most 3x the element reference's
// error, plus 1e-3 of the largest); sm90 default and deterministic (the
// same bits twice), sm80.
TEST(SinksGpu, BackwardMatchesTheReferenceWithTheSinksGradient) {
  FLASHJIT_REQUIRE_SM90();
  KernelConfig deterministic{KernelPath::sm90};
  deterministic.deterministic = true;
  const KernelConfig configs[] = {KernelConfig{KernelPath::sm90}, deterministic,
                                  KernelConfig{KernelPath::sm80}};
  for (const KernelConfig &config : configs)
    for (MaskKind mask : {MaskKind::none, MaskKind::causal}) {
      const Problem p = make_problem(DType::bf16, 2, 6, 2, 257, 300, 128, 128, mask);
      SCOPED_TRACE(describe(p) + " " + describe(config));
      const std::vector<float> sinks = sink_logits(p.heads_q);
      const auto q = random_values(p.dtype, q_elements(p), 61);
      const auto k = random_values(p.dtype, k_elements(p), 62);
      const auto v = random_values(p.dtype, v_elements(p), 63);
      const auto dout = random_values(p.dtype, o_elements(p), 64);
      const SinkRun got = run_sinks(p, config, sinks, q, k, v, &dout);
      ASSERT_EQ(got.grads.dsinks.size(), sinks.size());
      const AttentionGradients exact =
          cpu_attention_backward(p, q, k, v, dout, ReferencePrecision::exact, sinks);
      const AttentionGradients element =
          cpu_attention_backward(p, q, k, v, dout, ReferencePrecision::element, sinks);
      const GradientAccuracyReport report = check_gradient_accuracy(got.grads, exact, element);
      EXPECT_TRUE(report.passed()) << report.describe();
      double largest = 0;
      for (float x : exact.dsinks) largest = std::max(largest, std::fabs(double(x)));
      EXPECT_GT(largest, 1e-2) << "d sinks trivially zero";
      const SinkGradientCheck check = sink_gradient_check(p, sinks, got, dout);
      for (size_t h = 0; h < sinks.size(); ++h) {
        // The kernel's reduction: its own O and LSE in float64, to fp32
        // accumulation.
        EXPECT_LE(std::fabs(double(got.grads.dsinks[h]) - check.from_kernel_outputs[h]),
                  1e-4 * check.magnitude[h] + 1e-7)
            << "d sink " << h << ": " << got.grads.dsinks[h] << " against "
            << check.from_kernel_outputs[h] << " from the kernel's O and LSE";
        // The math: against float64 attention, within what rounding O to the
        // element type moves D = rowsum(dO * O) (u |dO| |O| per row, twice
        // for O's own rounding), or 3x the element reference's error.
        const double baseline = std::fabs(double(element.dsinks[h]) - exact.dsinks[h]);
        EXPECT_LE(std::fabs(double(got.grads.dsinks[h]) - exact.dsinks[h]),
                  3 * baseline + 2 * unit_roundoff(p.dtype) * check.magnitude[h])
            << "d sink " << h << ": " << got.grads.dsinks[h] << " against " << exact.dsinks[h];
      }
      if (config.deterministic) {
        const SinkRun again = run_sinks(p, config, sinks, q, k, v, &dout);
        EXPECT_TRUE(again.grads.dq == got.grads.dq && again.grads.dk == got.grads.dk &&
                    again.grads.dv == got.grads.dv && again.grads.dsinks == got.grads.dsinks);
      }
    }
}

}  // namespace
}  // namespace flashjit
