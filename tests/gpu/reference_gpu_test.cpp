// The fp32 GPU reference (templates/reference_attention.cuh) against the
// float64 CPU reference, on small irregular shapes: the GPU reference is
// what `flashjit run --check` trusts at sizes the CPU cannot do.
#include <chrono>
#include <cmath>
#include <limits>

#include "gpu_environment.h"
#include "reference/accuracy.h"
#include "flashjit/mods.h"
#include "reference/gpu_reference.h"
#include "runtime/device_buffer.h"

namespace flashjit {
namespace {

using testing::random_values;
using testing::upload_values;

struct Shape {
  DType dtype;
  int64_t batch, heads_q, heads_kv, seqlen_q, seqlen_k;
  int dqk, dv;
  MaskKind mask;
  int64_t left, right;
  float softcap;
};

std::string name_of(const Problem &p) { return describe(p); }

void check_shape(const Shape &s, uint64_t seed) {
  Problem p;
  p.dtype = s.dtype;
  p.batch = s.batch;
  p.heads_q = s.heads_q;
  p.heads_kv = s.heads_kv;
  p.seqlen_q = s.seqlen_q;
  p.seqlen_k = s.seqlen_k;
  p.head_dim_qk = s.dqk;
  p.head_dim_v = s.dv;
  p.mask = s.mask;
  p.window_left = s.left;
  p.window_right = s.right;
  p.softcap = s.softcap;
  SCOPED_TRACE(name_of(p));

  const std::vector<float> q = random_values(p.dtype, q_elements(p), seed);
  const std::vector<float> k = random_values(p.dtype, k_elements(p), seed + 1);
  const std::vector<float> v = random_values(p.dtype, v_elements(p), seed + 2);
  auto dq = upload_values(p.dtype, q);
  auto dk = upload_values(p.dtype, k);
  auto dv = upload_values(p.dtype, v);
  ASSERT_TRUE(dq && dk && dv);
  const ForwardArgs args =
      ForwardArgs::packed(p, dq->data(), dk->data(), dv->data(), nullptr, nullptr);

  const AttentionOutputs cpu_exact = cpu_attention(p, q, k, v, ReferencePrecision::exact);
  const AttentionOutputs cpu_low = cpu_attention(p, q, k, v, ReferencePrecision::element);
  auto gpu_exact = gpu_reference_attention(p, args, ReferencePrecision::exact);
  ASSERT_TRUE(bool(gpu_exact)) << llvm::toString(gpu_exact.takeError());
  auto gpu_low = gpu_reference_attention(p, args, ReferencePrecision::element);
  ASSERT_TRUE(bool(gpu_low)) << llvm::toString(gpu_low.takeError());

  // fp32 from the same inputs: off from float64 by accumulation order only.
  EXPECT_EQ(count_nan(gpu_exact->out), 0u);
  EXPECT_LE(max_abs_error(gpu_exact->out, cpu_exact.out), 2e-5);
  EXPECT_LE(max_abs_error(gpu_exact->lse, cpu_exact.lse), 2e-5);
  // The same-precision variant may round a P or an output to the
  // neighbouring 16-bit value where fp32 and float64 straddle a tie, so it
  // is held to the baseline it defines rather than to equality.
  const double cpu_baseline = max_abs_error(cpu_low.out, cpu_exact.out);
  const double gpu_baseline = max_abs_error(gpu_low->out, cpu_exact.out);
  EXPECT_LE(gpu_baseline, 1.5 * cpu_baseline + 1e-5);
  EXPECT_GE(gpu_baseline, 0.5 * cpu_baseline);
  EXPECT_LE(max_abs_error(gpu_low->out, cpu_low.out), 2 * cpu_baseline + 1e-5);
}

TEST(GpuReference, MatchesTheCpuReferenceOnIrregularShapes) {
  FLASHJIT_REQUIRE_GPU();
  const int64_t U = -1;
  const Shape shapes[] = {
      {DType::bf16, 1, 1, 1, 1, 1, 8, 8, MaskKind::none, U, U, 0},
      {DType::bf16, 2, 3, 3, 17, 33, 64, 64, MaskKind::none, U, U, 0},
      {DType::fp16, 1, 4, 2, 113, 77, 128, 128, MaskKind::causal, U, U, 0},
      {DType::bf16, 1, 4, 1, 77, 113, 96, 40, MaskKind::causal, U, U, 0},
      {DType::fp16, 2, 2, 2, 64, 200, 32, 32, MaskKind::window, 16, 3, 0},
      {DType::bf16, 1, 2, 2, 45, 45, 256, 256, MaskKind::window, 7, -1, 0},
      {DType::bf16, 1, 2, 1, 33, 65, 72, 72, MaskKind::none, U, U, 5.0f},
      {DType::bf16, 1, 1, 1, 200, 3, 16, 24, MaskKind::causal, U, U, 0},  // masked rows
  };
  uint64_t seed = 100;
  for (const Shape &s : shapes) {
    check_shape(s, seed);
    seed += 10;
  }
}

TEST(GpuReference, FullyMaskedRowsAreZeroWithInfiniteLse) {
  FLASHJIT_REQUIRE_GPU();
  Problem p;
  p.seqlen_q = 40;
  p.seqlen_k = 5;
  p.head_dim_qk = p.head_dim_v = 32;
  p.mask = MaskKind::causal;  // rows 0..34 see no key
  const std::vector<float> q = random_values(p.dtype, q_elements(p), 1);
  const std::vector<float> k = random_values(p.dtype, k_elements(p), 2);
  const std::vector<float> v = random_values(p.dtype, v_elements(p), 3);
  auto dq = upload_values(p.dtype, q), dk = upload_values(p.dtype, k),
       dv = upload_values(p.dtype, v);
  ASSERT_TRUE(dq && dk && dv);
  auto out = gpu_reference_attention(
      p, ForwardArgs::packed(p, dq->data(), dk->data(), dv->data(), nullptr, nullptr),
      ReferencePrecision::exact);
  ASSERT_TRUE(bool(out)) << llvm::toString(out.takeError());
  for (int i = 0; i < 35; ++i) {
    EXPECT_EQ(out->lse[i], std::numeric_limits<float>::infinity()) << i;
    EXPECT_EQ(out->out[i * 32], 0.0f) << i;
  }
  EXPECT_TRUE(std::isfinite(out->lse[35]));
}

// With a caller's modifiers (ALiBi from flashjit::mods over per-head
// slopes, a mask_mod hiding every third key) and learned sinks, against
// the float64 CPU reference given the same functions.
TEST(GpuReference, AppliesModifiersAndSinksAsTheCpuReference) {
  FLASHJIT_REQUIRE_GPU();
  Problem p;
  p.batch = 2;
  p.heads_q = 4;
  p.heads_kv = 2;
  p.seqlen_q = 70;
  p.seqlen_k = 97;
  p.head_dim_qk = p.head_dim_v = 64;
  p.mask = MaskKind::causal;
  Modifiers m = mods::alibi();
  m.mask_mod =
      "__device__ bool mask_mod(int b, int h, int q, int k, const Aux &aux) {\n"
      "  return (k + b) % 3 != 0;\n"
      "}\n";
  m.sinks = true;
  const std::vector<float> slopes = {-0.5f, -0.25f, -0.125f, -0.0625f};
  const std::vector<float> sinks = {0.3f, -1.4f, 2.0f, 0.0f};
  auto slopes_device = DeviceBuffer::from_host(slopes.data(), slopes.size() * 4);
  auto sinks_device = DeviceBuffer::from_host(sinks.data(), sinks.size() * 4);
  ASSERT_TRUE(slopes_device && sinks_device);
  AuxValues aux(m);
  ASSERT_EQ(aux.set("slopes", slopes_device->data()), "");
  const std::vector<float> q = random_values(p.dtype, q_elements(p), 5);
  const std::vector<float> k = random_values(p.dtype, k_elements(p), 6);
  const std::vector<float> v = random_values(p.dtype, v_elements(p), 7);
  auto dq = upload_values(p.dtype, q), dk = upload_values(p.dtype, k),
       dv = upload_values(p.dtype, v);
  ASSERT_TRUE(dq && dk && dv);
  ForwardArgs args = ForwardArgs::packed(p, dq->data(), dk->data(), dv->data(), nullptr, nullptr);
  args.modifiers = &m;
  args.aux = aux.data();
  args.aux_bytes = aux.size();
  args.sinks = static_cast<const float *>(sinks_device->data());
  ReferenceModifiers ref;
  ref.score = [&](double s, int64_t, int64_t h, int64_t i, int64_t j) {
    return s + double(slopes[h]) * double(j - i);
  };
  ref.visible = [](int64_t b, int64_t, int64_t, int64_t j) { return (j + b) % 3 != 0; };
  ref.sinks = sinks;
  const AttentionOutputs exact = cpu_attention(p, q, k, v, ReferencePrecision::exact, ref);
  auto gpu = gpu_reference_attention(p, args, ReferencePrecision::exact);
  ASSERT_TRUE(bool(gpu)) << llvm::toString(gpu.takeError());
  EXPECT_EQ(count_nan(gpu->out), 0u);
  EXPECT_LE(max_abs_error(gpu->out, exact.out), 2e-5);
  EXPECT_LE(max_abs_error(gpu->lse, exact.lse), 2e-5);
  // Row 0 of batch 0, head 2: causal with 27 more keys than queries sees
  // keys 0..27, a third of them hidden; its LSE includes the sink.
  EXPECT_GT(exact.lse[2 * p.seqlen_q], sinks[2]);
}

// flashjit run --check at the default shape relies on this being quick.
TEST(GpuReference, LongSequenceIsFastEnough) {
  FLASHJIT_REQUIRE_GPU();
  Problem p;
  p.batch = 2;
  p.heads_q = p.heads_kv = 16;
  p.seqlen_q = p.seqlen_k = 8192;
  const size_t n = q_elements(p);
  auto buffer = DeviceBuffer::allocate(n * sizeof(uint16_t));
  ASSERT_TRUE(bool(buffer)) << llvm::toString(buffer.takeError());
  FLASHJIT_ASSERT_OK(buffer->fill_bytes(0x3C));  // 0x3C3C: a small normal in bf16 and fp16
  const ForwardArgs args =
      ForwardArgs::packed(p, buffer->data(), buffer->data(), buffer->data(), nullptr, nullptr);
  auto warm = gpu_reference_attention(p, args, ReferencePrecision::exact);  // compiles
  ASSERT_TRUE(bool(warm)) << llvm::toString(warm.takeError());
  const auto start = std::chrono::steady_clock::now();
  auto out = gpu_reference_attention(p, args, ReferencePrecision::element);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(bool(out)) << llvm::toString(out.takeError());
  EXPECT_EQ(count_nan(out->out), 0u);
  RecordProperty("seconds", std::to_string(seconds));
  EXPECT_LT(seconds, 2.0);
}

}  // namespace
}  // namespace flashjit
