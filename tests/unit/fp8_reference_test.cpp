// The host's e4m3: bit-exact conversions over every code and at every
// rounding boundary, the per-(batch, KV head) quantization, and the fp8
// accuracy criterion (reference/accuracy.h) on CPU references.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "reference/accuracy.h"
#include "reference/cpu_attention.h"
#include "reference/fp8.h"
#include "reference/gpu_reference.h"
#include "runtime/nvrtc_compiler.h"

namespace flashjit {
namespace {

// An oracle written apart from fp8.cpp's: e4m3's value from its fields.
double e4m3_value(int code) {
  const int sign = code >> 7, exponent = (code >> 3) & 15, mantissa = code & 7;
  const double magnitude = exponent == 0 ? mantissa / 512.0
                                         : (1 + mantissa / 8.0) * std::pow(2.0, exponent - 7);
  return sign ? -magnitude : magnitude;
}

TEST(E4m3, EveryCodeDecodesAndRoundTrips) {
  for (int code = 0; code < 256; ++code) {
    const float value = e4m3_bits_to_float(uint8_t(code));
    if ((code & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(value)) << code;
      EXPECT_EQ(float_to_e4m3_bits(value), code) << code;  // the sign kept
      continue;
    }
    EXPECT_EQ(double(value), e4m3_value(code)) << code;
    EXPECT_EQ(std::signbit(value), code >= 0x80) << code;  // -0 included
    EXPECT_EQ(float_to_e4m3_bits(value), code) << code;
  }
  EXPECT_EQ(e4m3_bits_to_float(0x7e), 448.f);
  EXPECT_EQ(e4m3_bits_to_float(0x01), std::ldexp(1.f, -9));
  EXPECT_EQ(e4m3_bits_to_float(0x08), std::ldexp(1.f, -6));
  EXPECT_EQ(e4m3_bits_to_float(0x38), 1.f);
  for (int code = 1; code < 0x7f; ++code)
    EXPECT_LT(e4m3_bits_to_float(uint8_t(code - 1)), e4m3_bits_to_float(uint8_t(code)));
}

// Between two neighbouring codes: below the midpoint the lower, above it the
// upper, at it the one with the even mantissa (the even code).
TEST(E4m3, RoundsToNearestEvenAtEveryBoundary) {
  for (int code = 0; code < 0x7e; ++code)
    for (int sign : {0, 0x80}) {
      const double lo = e4m3_value(code), hi = e4m3_value(code + 1);
      const float mid = float((lo + hi) / 2);  // exact: a few bits past e4m3's
      ASSERT_EQ(double(mid), (lo + hi) / 2);
      const float s = sign ? -1.f : 1.f;
      const int even = code % 2 == 0 ? code : code + 1;
      EXPECT_EQ(float_to_e4m3_bits(s * mid), sign | even) << code;
      EXPECT_EQ(float_to_e4m3_bits(s * std::nextafter(mid, 0.f)), sign | code) << code;
      EXPECT_EQ(float_to_e4m3_bits(s * std::nextafter(mid, 1e9f)), sign | (code + 1)) << code;
    }
}

TEST(E4m3, SaturatesAndKeepsNan) {
  for (float big : {448.f, 448.5f, 463.99f, 464.f, 480.f, 1e6f, INFINITY}) {
    EXPECT_EQ(float_to_e4m3_bits(big), 0x7e) << big;
    EXPECT_EQ(float_to_e4m3_bits(-big), 0xfe) << big;
  }
  EXPECT_EQ(float_to_e4m3_bits(432.f), 0x7e);   // the tie of 416 and 448: even is 448
  EXPECT_EQ(float_to_e4m3_bits(431.9f), 0x7d);  // 416
  EXPECT_TRUE(std::isnan(e4m3_bits_to_float(float_to_e4m3_bits(NAN))));
  EXPECT_EQ(float_to_e4m3_bits(-NAN), 0xff);
  // Below half the smallest subnormal (2^-10) is zero, the tie too (even).
  EXPECT_EQ(float_to_e4m3_bits(std::ldexp(1.f, -10)), 0x00);
  EXPECT_EQ(float_to_e4m3_bits(std::nextafter(std::ldexp(1.f, -10), 1.f)), 0x01);
  EXPECT_EQ(float_to_e4m3_bits(-1e-30f), 0x80);
  EXPECT_EQ(float_to_bits(DType::e4m3, 3.f), 0x44);  // the reference's storage helpers
  EXPECT_EQ(round_to(DType::e4m3, 3.1f), 3.f);
}

Problem gqa_problem() {
  Problem p;
  p.dtype = DType::e4m3;
  p.batch = 2;
  p.heads_q = 4;
  p.heads_kv = 2;
  p.seqlen_q = 17;
  p.seqlen_k = 33;
  p.head_dim_qk = 32;
  p.head_dim_v = 16;
  return p;
}

TEST(QuantizePerHead, DescalesAreEachGroupsAmaxOver448) {
  const Problem p = gqa_problem();
  std::vector<float> q = random_values(DType::bf16, q_elements(p), 3);
  q[((1 * p.seqlen_q + 5) * p.heads_q + 3) * p.head_dim_qk + 7] = -60.f;  // b 1, kv head 1
  const Fp8Tensor t = quantize_per_head(p, Fp8Role::q, q, p.seqlen_q);
  ASSERT_EQ(t.descale.size(), 4u);
  EXPECT_EQ(t.descale[3], 60.f / 448.f);
  EXPECT_EQ(t.codes[((1 * p.seqlen_q + 5) * p.heads_q + 3) * p.head_dim_qk + 7], 0xfe);
  for (int g = 0; g < 3; ++g) EXPECT_LT(t.descale[g], 6.f / 448.f) << g;  // N(0, 1) maxima
  for (size_t i = 0; i < q.size(); ++i) {
    const int64_t h = int64_t(i / p.head_dim_qk) % p.heads_q;
    const int64_t b = int64_t(i / (p.head_dim_qk * p.heads_q * p.seqlen_q));
    const float descale = t.descale[b * p.heads_kv + h / 2];
    ASSERT_EQ(t.dequantized[i], e4m3_bits_to_float(t.codes[i]) * descale);
    // Half an ulp of 3 mantissa bits, or of the subnormals' quantum.
    EXPECT_LE(std::fabs(t.dequantized[i] - q[i]),
              std::max(std::fabs(q[i]) / 16, descale * std::ldexp(1.f, -10)) * 1.0001f);
  }
  // An all-zero group keeps descale 1 (no division by zero).
  std::vector<float> zeros(k_elements(p), 0.f);
  const Fp8Tensor z = quantize_per_head(p, Fp8Role::k, zeros, p.seqlen_k);
  for (float d : z.descale) EXPECT_EQ(d, 1.f);
}

// Standard-normal inputs, or FlashAttention-3's outliers: 0.1% of the
// entries from N(0, 10^2).
std::vector<float> inputs(size_t n, uint64_t seed, bool outliers) {
  std::vector<float> x = random_values(DType::bf16, n, seed);
  if (outliers) {
    std::mt19937_64 rng(seed + 100);
    std::uniform_real_distribution<double> u(0, 1);
    std::normal_distribution<double> wide(0, 10);
    for (float &v : x)
      if (u(rng) < 1e-3) v = float(wide(rng));
  }
  return x;
}

struct Fp8Case {
  Problem problem;
  Fp8Tensor q, k, v;
  AttentionOutputs exact;
  double v_max_abs = 0;
};

Fp8Case fp8_case(bool outliers) {
  Fp8Case c;
  Problem &p = c.problem;
  p = gqa_problem();
  p.seqlen_q = 64;
  p.seqlen_k = 113;
  p.head_dim_qk = p.head_dim_v = 64;
  p.mask = MaskKind::causal;
  c.q = quantize_per_head(p, Fp8Role::q, inputs(q_elements(p), 1, outliers), p.seqlen_q);
  c.k = quantize_per_head(p, Fp8Role::k, inputs(k_elements(p), 2, outliers), p.seqlen_k);
  c.v = quantize_per_head(p, Fp8Role::v, inputs(v_elements(p), 3, outliers), p.seqlen_k);
  c.exact = cpu_attention(p, c.q.dequantized, c.k.dequantized, c.v.dequantized);
  for (float x : c.v.dequantized) c.v_max_abs = std::max(c.v_max_abs, double(std::fabs(x)));
  return c;
}

// A kernel that rounds P and O to bf16 (the element variant) is well inside
// the criterion on both input kinds.
TEST(Fp8Criterion, AKernelsRoundingPasses) {
  for (bool outliers : {false, true}) {
    const Fp8Case c = fp8_case(outliers);
    const AttentionOutputs element = cpu_attention(c.problem, c.q.dequantized, c.k.dequantized,
                                                   c.v.dequantized, ReferencePrecision::element);
    const AccuracyReport r =
        check_fp8_forward_accuracy(element.out, c.exact.out, c.v_max_abs, element.lse, c.exact.lse);
    std::printf("fp8 criterion, %s inputs: %s\n", outliers ? "outlier" : "standard-normal",
                r.describe().c_str());
    EXPECT_TRUE(r.passed) << r.describe();
    EXPECT_GT(r.rmse, 0);
    EXPECT_LT(r.rmse, r.rmse_bound / 4);
  }
}

// A kernel that reads the wrong keys' values fails on RMSE.
TEST(Fp8Criterion, WrongValuesFail) {
  const Fp8Case c = fp8_case(false);
  std::vector<float> shifted = c.v.dequantized;
  std::rotate(shifted.begin(), shifted.begin() + c.problem.heads_kv * c.problem.head_dim_v,
              shifted.end());
  const AttentionOutputs wrong =
      cpu_attention(c.problem, c.q.dequantized, c.k.dequantized, shifted);
  const AccuracyReport r = check_fp8_forward_accuracy(wrong.out, c.exact.out, c.v_max_abs);
  EXPECT_FALSE(r.passed);
  EXPECT_GT(r.rmse, r.rmse_bound);
}

TEST(Fp8Criterion, BoundsAndMessages) {
  const std::vector<float> ref = {0.5f, -1.f, 2.f, 0.25f};
  std::vector<float> out = ref;
  for (float &x : out) x += 0.009f;  // RMSE 9e-3: inside
  AccuracyReport r = check_fp8_forward_accuracy(out, ref, 3.0);
  EXPECT_TRUE(r.passed) << r.describe();
  EXPECT_NEAR(r.rmse, 0.009, 1e-7);
  EXPECT_DOUBLE_EQ(r.tolerance, 3.0 / 16 + 2.0 / 256 + 1e-5);
  for (float &x : out) x += 0.0011f;  // RMSE 1.01e-2: outside
  r = check_fp8_forward_accuracy(out, ref, 3.0);
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.describe(), "FAIL rmse=1.01e-02 > 9.10e-03, max_err=1.01e-02 <= 1.95e-01 (fp8)");

  // One element past the max-abs bound fails, whatever the RMSE of many.
  std::vector<float> many(100000, 1.f), near = many;
  near[7] += 0.25f;  // RMSE 7.9e-4, max_err 0.25 > 1/16 + 1/256
  r = check_fp8_forward_accuracy(near, many, 1.0);
  EXPECT_LT(r.rmse, r.rmse_bound);
  EXPECT_FALSE(r.passed);
  EXPECT_GT(r.max_err, r.tolerance);

  // An unwritten output fails.
  near = many;
  near[3] = NAN;
  r = check_fp8_forward_accuracy(near, many, 1.0);
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.unwritten, 1u);
}

// The GPU reference reads e4m3 itself (integer decoding, no sm_89 cvt):
// it compiles for sm_80 as for sm_90a; its parameters carry each tensor's
// element type and descales, and refuse what a call refuses.
TEST(Fp8ReferenceCompile, TheForwardReferenceCompilesForSm80AndSm90a) {
  for (const TargetArch &arch : {TargetArch{8, 0, false}, TargetArch{9, 0, true}}) {
    auto cubin = compile_to_cubin(generate_reference_attention(), arch);
    ASSERT_TRUE(bool(cubin)) << arch.name() << ": " << llvm::toString(cubin.takeError());
  }
}

TEST(Fp8ReferenceParams, CarryElementTypesAndDescales) {
  Problem p = gqa_problem();
  p.out_dtype = OutDType::fp16;
  const void *fake = reinterpret_cast<const void *>(0x1000);
  const float *descales = reinterpret_cast<const float *>(0x2000);
  ForwardArgs a = ForwardArgs::packed(p, fake, fake, fake, nullptr, nullptr);
  a.descale = {descales, descales + 4, descales + 8, 2, 1};
  auto params = reference_attention_params(p, a, ReferencePrecision::exact);
  ASSERT_TRUE(bool(params)) << llvm::toString(params.takeError());
  EXPECT_EQ(params->q_e4m3, 1);
  EXPECT_EQ(params->kv_e4m3, 1);
  EXPECT_EQ(params->is_fp16, 1);  // O's type rounds the element variant
  EXPECT_EQ(params->k_descale, descales + 4);
  EXPECT_EQ(params->descale_batch_stride, 2);

  p.dtype = DType::bf16;
  p.kv_dtype = KvDType::e4m3;
  p.out_dtype = OutDType::automatic;
  a.descale.q = nullptr;
  params = reference_attention_params(p, a, ReferencePrecision::exact);
  ASSERT_TRUE(bool(params)) << llvm::toString(params.takeError());
  EXPECT_EQ(params->q_e4m3, 0);
  EXPECT_EQ(params->kv_e4m3, 1);
  EXPECT_EQ(params->is_fp16, 0);
  a.descale.v = nullptr;
  params = reference_attention_params(p, a, ReferencePrecision::exact);
  ASSERT_FALSE(bool(params));
  EXPECT_NE(llvm::toString(params.takeError()).find("argument v_descale is null"),
            std::string::npos);
}

}  // namespace
}  // namespace flashjit
