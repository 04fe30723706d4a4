// The float64 CPU reference and the rounding helpers, against values worked
// out by hand.
#include <cmath>
#include <limits>

#include "gtest/gtest.h"
#include "reference/cpu_attention.h"

namespace flashjit {
namespace {

Problem tiny(int64_t sq, int64_t sk, int d) {
  Problem p;
  p.batch = 1;
  p.heads_q = p.heads_kv = 1;
  p.seqlen_q = sq;
  p.seqlen_k = sk;
  p.head_dim_qk = p.head_dim_v = d;
  return p;
}

TEST(Rounding, Bf16RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16_bits(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bf16_bits(-2.0f), 0xC000);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to the even mantissa (1).
  EXPECT_EQ(float_to_bf16_bits(1.0f + 0x1p-8f), 0x3F80);
  // 1 + 3*2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: goes up.
  EXPECT_EQ(float_to_bf16_bits(1.0f + 3 * 0x1p-8f), 0x3F82);
  EXPECT_EQ(float_to_bf16_bits(1.0f + 0x1p-8f + 0x1p-20f), 0x3F81);  // above half: up
  EXPECT_EQ(float_to_bf16_bits(3.14159265f), 0x4049);                // pi -> 3.140625
  EXPECT_EQ(bf16_bits_to_float(0x4049), 3.140625f);
  EXPECT_EQ(float_to_bf16_bits(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(NAN))));
  // The largest float rounds up to infinity, as it should.
  EXPECT_EQ(float_to_bf16_bits(std::numeric_limits<float>::max()), 0x7F80);
}

TEST(Rounding, Fp16RoundsToNearestEven) {
  EXPECT_EQ(float_to_fp16_bits(1.0f), 0x3C00);
  EXPECT_EQ(float_to_fp16_bits(-2.0f), 0xC000);
  EXPECT_EQ(float_to_fp16_bits(65504.0f), 0x7BFF);
  EXPECT_EQ(float_to_fp16_bits(65519.0f), 0x7BFF);
  EXPECT_EQ(float_to_fp16_bits(65520.0f), 0x7C00);  // the tie goes to infinity (even)
  EXPECT_EQ(float_to_fp16_bits(1.0f + 0x1p-11f), 0x3C00);      // tie -> even
  EXPECT_EQ(float_to_fp16_bits(1.0f + 3 * 0x1p-11f), 0x3C02);  // tie -> even (up)
  EXPECT_EQ(float_to_fp16_bits(0x1p-24f), 0x0001);             // smallest subnormal
  EXPECT_EQ(float_to_fp16_bits(0x1p-25f), 0x0000);             // tie -> even (zero)
  EXPECT_EQ(float_to_fp16_bits(3 * 0x1p-25f), 0x0002);         // tie -> even (up)
  EXPECT_EQ(float_to_fp16_bits(0x1p-14f), 0x0400);             // smallest normal
  EXPECT_EQ(float_to_fp16_bits(0x1p-14f - 0x1p-26f), 0x0400);  // rounds up into normals
  EXPECT_EQ(fp16_bits_to_float(0x0001), 0x1p-24f);
  EXPECT_EQ(fp16_bits_to_float(0x3555), 0.333251953125f);
  EXPECT_EQ(float_to_fp16_bits(1.0f / 3.0f), 0x3555);
  EXPECT_TRUE(std::isnan(fp16_bits_to_float(float_to_fp16_bits(NAN))));
  EXPECT_EQ(fp16_bits_to_float(0xFC00), -std::numeric_limits<float>::infinity());
}

TEST(Rounding, EveryFp16AndBf16ValueRoundTrips) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const uint16_t b = static_cast<uint16_t>(bits);
    const float h = fp16_bits_to_float(b);
    if (!std::isnan(h)) {
      EXPECT_EQ(float_to_fp16_bits(h), b) << std::hex << bits;
    }
    const float f = bf16_bits_to_float(b);
    if (!std::isnan(f)) {
      EXPECT_EQ(float_to_bf16_bits(f), b) << std::hex << bits;
    }
  }
}

TEST(CpuAttention, OneKeyGivesItsValueRow) {
  Problem p = tiny(3, 1, 8);
  std::vector<float> q(3 * 8, 0.5f), k(8, -1.0f), v(8);
  for (int d = 0; d < 8; ++d) v[d] = float(d) - 3.5f;
  const AttentionOutputs r = cpu_attention(p, q, k, v);
  for (int i = 0; i < 3; ++i)
    for (int d = 0; d < 8; ++d) EXPECT_FLOAT_EQ(r.out[i * 8 + d], v[d]);
  // LSE of one score s is s itself: q.k * scale = -4 / sqrt(8).
  EXPECT_NEAR(r.lse[0], -4.0 / std::sqrt(8.0), 1e-6);
}

TEST(CpuAttention, EqualScoresAverageTheValues) {
  Problem p = tiny(1, 2, 8);
  std::vector<float> q(8, 1.0f), k(16, 0.25f), v(16);
  for (int d = 0; d < 8; ++d) v[d] = 1.0f, v[8 + d] = 3.0f + d;
  const AttentionOutputs r = cpu_attention(p, q, k, v);
  for (int d = 0; d < 8; ++d) EXPECT_FLOAT_EQ(r.out[d], (1.0f + 3.0f + d) / 2);
  EXPECT_NEAR(r.lse[0], 2.0 / std::sqrt(8.0) + std::log(2.0), 1e-6);
}

TEST(CpuAttention, CausalRowZeroSeesOnlyKeyZero) {
  Problem p = tiny(3, 3, 8);
  p.mask = MaskKind::causal;
  std::vector<float> q(24, 0.1f), k(24, 0.2f), v(24);
  for (int j = 0; j < 3; ++j)
    for (int d = 0; d < 8; ++d) v[j * 8 + d] = float(10 * j + d);
  const AttentionOutputs r = cpu_attention(p, q, k, v);
  for (int d = 0; d < 8; ++d) {
    EXPECT_FLOAT_EQ(r.out[d], v[d]);                         // row 0: key 0
    EXPECT_FLOAT_EQ(r.out[8 + d], (v[d] + v[8 + d]) / 2);    // row 1: keys 0, 1
    EXPECT_FLOAT_EQ(r.out[16 + d], float(10 + d));           // row 2: mean of 0, 10, 20
  }
}

TEST(CpuAttention, CausalIsBottomRightAligned) {
  // sq=2, sk=4: row 0 sees keys 0..2, row 1 sees keys 0..3.
  Problem p = tiny(2, 4, 8);
  p.mask = MaskKind::causal;
  EXPECT_TRUE(key_visible(p, 0, 2));
  EXPECT_FALSE(key_visible(p, 0, 3));
  EXPECT_TRUE(key_visible(p, 1, 3));
  p.mask = MaskKind::window;
  p.window_left = 1;
  p.window_right = 0;
  EXPECT_FALSE(key_visible(p, 0, 0));
  EXPECT_TRUE(key_visible(p, 0, 1));
  EXPECT_TRUE(key_visible(p, 0, 2));
  EXPECT_FALSE(key_visible(p, 0, 3));
}

TEST(CpuAttention, FullyMaskedRowIsZeroWithInfiniteLse) {
  // sq=3 > sk=1 under causal: row i sees key j iff j <= i - 2, so rows 0 and 1
  // see nothing.
  Problem p = tiny(3, 1, 8);
  p.mask = MaskKind::causal;
  std::vector<float> q(24, 1.0f), k(8, 1.0f), v(8, 5.0f);
  const AttentionOutputs r = cpu_attention(p, q, k, v);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(r.lse[i], std::numeric_limits<float>::infinity());
    for (int d = 0; d < 8; ++d) EXPECT_EQ(r.out[i * 8 + d], 0.0f);
  }
  EXPECT_FLOAT_EQ(r.out[16], 5.0f);
}

TEST(CpuAttention, GqaMapsQueryHeadsToTheirKvHead) {
  // 4 query heads over 2 kv heads: heads 0, 1 -> kv 0; heads 2, 3 -> kv 1.
  Problem p = tiny(1, 1, 8);
  p.heads_q = 4;
  p.heads_kv = 2;
  std::vector<float> q(4 * 8, 1.0f), k(2 * 8, 1.0f), v(2 * 8);
  for (int d = 0; d < 8; ++d) v[d] = 1.0f, v[8 + d] = 2.0f;
  const AttentionOutputs r = cpu_attention(p, q, k, v);
  for (int h = 0; h < 4; ++h) EXPECT_FLOAT_EQ(r.out[h * 8], h < 2 ? 1.0f : 2.0f) << h;
}

TEST(CpuAttention, SoftcapBoundsTheScores) {
  // Scores 8 and 0 with scale 1; softcap 2 turns them into 2*tanh(4) and 0.
  Problem p = tiny(1, 2, 8);
  p.softmax_scale = 1.0f;
  p.softcap = 2.0f;
  std::vector<float> q(8, 0.0f), k(16, 0.0f), v(16);
  q[0] = 2.0f;
  k[0] = 4.0f;
  for (int d = 0; d < 8; ++d) v[d] = 1.0f, v[8 + d] = 0.0f;
  const AttentionOutputs r = cpu_attention(p, q, k, v);
  const double s0 = 2.0 * std::tanh(4.0);
  const double w0 = std::exp(s0) / (std::exp(s0) + 1.0);
  EXPECT_NEAR(r.out[0], w0, 1e-6);
  EXPECT_NEAR(r.lse[0], std::log(std::exp(s0) + 1.0), 1e-6);
}

TEST(CpuAttention, ElementPrecisionRoundsPAndOutput) {
  // Two keys, scores 0 and -x: P = {1, exp(-x)}; exp(-x) is not a bf16 value.
  Problem p = tiny(1, 2, 8);
  p.softmax_scale = 1.0f;
  std::vector<float> q(8, 0.0f), k(16, 0.0f), v(16, 0.0f);
  q[0] = 1.0f;
  k[8] = -0.3f;
  v[8] = 1.0f;
  const AttentionOutputs exact = cpu_attention(p, q, k, v);
  const AttentionOutputs low = cpu_attention(p, q, k, v, ReferencePrecision::element);
  const double e = std::exp(double(-0.3f));
  EXPECT_NEAR(exact.out[0], e / (1 + e), 1e-7);
  const float expected = round_to(DType::bf16, float(double(round_to(DType::bf16, float(e))) / (1 + e)));
  EXPECT_EQ(low.out[0], expected);
  EXPECT_NE(low.out[0], exact.out[0]);
}

}  // namespace
}  // namespace flashjit
