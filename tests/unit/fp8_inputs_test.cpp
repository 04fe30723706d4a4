// The host inputs of fp8 forwards: reference/forward_inputs.h's per-tensor
// builder (what `run --check` and the tuner's winner check upload) and the
// tuner's timing sets (tuner/timing_inputs.h): byte sizes per element type,
// descales, and e4m3 storage of standard-normal values. No GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "reference/cpu_attention.h"
#include "reference/forward_inputs.h"
#include "tuner/timing_inputs.h"

namespace flashjit {
namespace {

Problem fp8_problem() {
  Problem p;
  p.dtype = DType::e4m3;
  p.batch = 2;
  p.heads_q = 8;
  p.heads_kv = 2;
  p.seqlen_q = 37;
  p.seqlen_k = 53;
  p.head_dim_qk = 64;
  p.head_dim_v = 32;
  return p;
}

TEST(Fp8Inputs, E4m3TensorsAreCodesWithPerHeadDescales) {
  const Problem p = fp8_problem();
  const ForwardHostInputs in = make_forward_inputs(p, 5);
  const std::pair<const ForwardHostInput *, size_t> tensors[] = {
      {&in.q, q_elements(p)}, {&in.k, k_elements(p)}, {&in.v, v_elements(p)}};
  for (const auto &[t, n] : tensors) {
    EXPECT_EQ(t->element, DType::e4m3);
    ASSERT_EQ(t->bytes.size(), n);  // one byte an element
    ASSERT_EQ(t->values.size(), n);
    ASSERT_EQ(t->descale.size(), size_t(p.batch * p.heads_kv));
    for (size_t i = 0; i < n; i += 97) {
      const int64_t row_elems = int64_t(n) / p.batch;
      const int64_t b = int64_t(i) / row_elems;
      const int64_t dim = t == &in.v ? p.head_dim_v : p.head_dim_qk;
      const int64_t heads = t == &in.q ? p.heads_q : p.heads_kv;
      const int64_t h = (int64_t(i) / dim) % heads;
      const float descale = t->descale[size_t(b * p.heads_kv + h / (heads / p.heads_kv))];
      EXPECT_EQ(t->values[i], e4m3_bits_to_float(t->bytes[i]) * descale) << i;
    }
  }
  // Each (batch, KV head)'s largest magnitude lands on 448: descale = amax / 448.
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t g = 0; g < p.heads_kv; ++g) {
      float amax = 0;
      for (int64_t s = 0; s < p.seqlen_k; ++s)
        for (int64_t d = 0; d < p.head_dim_qk; ++d) {
          const size_t i = size_t(((b * p.seqlen_k + s) * p.heads_kv + g) * p.head_dim_qk + d);
          amax = std::max(amax, std::fabs(in.k.values[i]));
        }
      EXPECT_FLOAT_EQ(amax, 448.f * in.k.descale[size_t(b * p.heads_kv + g)]);
    }
  // The same seed, the same inputs; another seed, others.
  EXPECT_EQ(make_forward_inputs(p, 5).k.bytes, in.k.bytes);
  EXPECT_NE(make_forward_inputs(p, 6).k.bytes, in.k.bytes);
}

TEST(Fp8Inputs, AnFp8CacheUnder16BitQueries) {
  Problem p = fp8_problem();
  p.dtype = DType::bf16;
  p.kv_dtype = KvDType::e4m3;
  const ForwardHostInputs in = make_forward_inputs(p, 1);
  EXPECT_EQ(in.q.element, DType::bf16);
  EXPECT_EQ(in.q.bytes.size(), 2 * q_elements(p));
  EXPECT_TRUE(in.q.descale.empty());
  EXPECT_EQ(in.k.element, DType::e4m3);
  EXPECT_EQ(in.k.bytes.size(), k_elements(p));
  EXPECT_EQ(in.v.descale.size(), size_t(p.batch * p.heads_kv));
  uint16_t first = 0;
  std::memcpy(&first, in.q.bytes.data(), 2);
  EXPECT_EQ(in.q.values[0], bits_to_float(DType::bf16, first));
}

TEST(TimingInputs, SetBytesFollowEachTensorsElement) {
  Problem p = fp8_problem();
  const TensorElements n{1000, 600, 300, 2000, 50};
  TimingSetBytes bytes = timing_set_bytes(p, n);
  EXPECT_EQ(bytes.q, 1000u);
  EXPECT_EQ(bytes.k, 600u);
  EXPECT_EQ(bytes.v, 300u);
  EXPECT_EQ(bytes.o, 4000u);  // bf16 output
  EXPECT_EQ(bytes.lse, 200u);
  EXPECT_EQ(bytes.descale, 3u * 4 * 4);  // Q, K, V: [2, 2] floats each
  EXPECT_EQ(bytes.total(), 1000u + 600 + 300 + 4000 + 200 + 48);
  p.dtype = DType::fp16;
  p.kv_dtype = KvDType::e4m3;  // an fp8 cache: K and V only
  bytes = timing_set_bytes(p, n);
  EXPECT_EQ(bytes.q, 2000u);
  EXPECT_EQ(bytes.k, 600u);
  EXPECT_EQ(bytes.o, 4000u);
  EXPECT_EQ(bytes.descale, 2u * 4 * 4);
  p.kv_dtype = KvDType::same;
  bytes = timing_set_bytes(p, n);
  EXPECT_EQ(bytes.descale, 0u);
  EXPECT_EQ(bytes.total(), 2 * (1000u + 600 + 300 + 2000) + 200);
}

TEST(TimingInputs, E4m3StorageSpansTheRangeAtItsDescale) {
  constexpr size_t kN = 1 << 16;
  const std::vector<uint8_t> codes = random_storage(DType::e4m3, kN, 3);
  const std::vector<uint8_t> bytes = random_storage(DType::bf16, kN, 3);
  ASSERT_EQ(codes.size(), kN);
  ASSERT_EQ(bytes.size(), 2 * kN);
  const std::vector<uint16_t> bits = random_bits(DType::bf16, kN, 3);
  EXPECT_EQ(std::memcmp(bytes.data(), bits.data(), bytes.size()), 0);
  double sum2 = 0, amax = 0, mismatch = 0;
  for (size_t i = 0; i < kN; ++i) {
    const double x = e4m3_bits_to_float(codes[i]) * double(kTimingE4m3Descale);
    ASSERT_FALSE(std::isnan(x)) << i;
    sum2 += x * x;
    amax = std::max(amax, std::fabs(x));
    // The same value as the 16-bit storage, to e4m3's rounding.
    const double y = bits_to_float(DType::bf16, bits[i]);
    mismatch = std::max(mismatch, std::fabs(x - y) - std::fabs(y) / 16 - 0.02 / 448);
  }
  EXPECT_NEAR(std::sqrt(sum2 / kN), 1.0, 0.02);  // standard normal's variance
  EXPECT_GT(amax, 3.0);                          // close to the bound: codes near 448
  EXPECT_LE(amax, 3.4642);
  EXPECT_LE(mismatch, 1e-6);
}

}  // namespace
}  // namespace flashjit
