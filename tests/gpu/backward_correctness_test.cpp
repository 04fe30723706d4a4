// The backward kernels against float64 CPU reference gradients, with
// DESIGN.md's criterion for gradients: max error <= 3 x that of the same
// reference in the kernel's precision + 1e-5. The forward runs first on the
// GPU (its O and LSE feed the backward, as in training); gradients are
// poisoned with NaN before the run, so an unwritten element fails.
#include <gtest/gtest.h>

#include <cmath>

#include "flashjit/backward.h"
#include "gpu_environment.h"
#include "reference/accuracy.h"
#include "reference/cpu_attention_backward.h"
#include "runtime/cuda_driver.h"
#include "runtime/launch_backward.h"
#include "runtime/launch_forward.h"

namespace flashjit {
namespace {

using testing::random_values;
using testing::upload_values;

struct Case {
  Problem problem;
  KernelConfig config{};  // zeros: the heuristic
};

Problem make_problem(DType dtype, int64_t b, int64_t hq, int64_t hkv, int64_t sq, int64_t sk,
                     int d, int dv, MaskKind mask, int64_t left = -1, int64_t right = -1,
                     float softcap = 0.f) {
  Problem p;
  p.dtype = dtype;
  p.batch = b;
  p.heads_q = hq;
  p.heads_kv = hkv;
  p.seqlen_q = sq;
  p.seqlen_k = sk;
  p.head_dim_qk = d;
  p.head_dim_v = dv;
  p.mask = mask;
  p.window_left = left;
  p.window_right = right;
  p.softcap = softcap;
  return p;
}

llvm::Expected<std::vector<float>> download_values(DType dtype, const DeviceBuffer &buffer,
                                                   size_t n) {
  std::vector<uint16_t> bits(n);
  if (auto e = buffer.download(bits.data(), n * 2)) return e;
  return from_storage(dtype, bits);
}

void run_case(const Case &c, uint64_t seed) {
  const Problem &p = c.problem;
  SCOPED_TRACE(describe(p) + (c.config.block_m ? " | " + describe(c.config) : ""));
  std::vector<float> q = random_values(p.dtype, q_elements(p), seed);
  std::vector<float> k = random_values(p.dtype, k_elements(p), seed + 1);
  std::vector<float> v = random_values(p.dtype, v_elements(p), seed + 2);
  std::vector<float> dout = random_values(p.dtype, o_elements(p), seed + 3);
  auto dq_in = upload_values(p.dtype, q);
  auto dk_in = upload_values(p.dtype, k);
  auto dv_in = upload_values(p.dtype, v);
  auto ddo = upload_values(p.dtype, dout);
  auto o = DeviceBuffer::allocate(o_elements(p) * 2);
  auto lse = DeviceBuffer::allocate(lse_elements(p) * 4);
  auto dq = DeviceBuffer::allocate(q_elements(p) * 2);
  auto dk = DeviceBuffer::allocate(k_elements(p) * 2);
  auto dv = DeviceBuffer::allocate(v_elements(p) * 2);
  auto workspace = DeviceBuffer::allocate(backward_workspace_bytes(p));
  FLASHJIT_ASSERT_OK(dq_in.takeError());
  FLASHJIT_ASSERT_OK(dk_in.takeError());
  FLASHJIT_ASSERT_OK(dv_in.takeError());
  FLASHJIT_ASSERT_OK(ddo.takeError());
  FLASHJIT_ASSERT_OK(o.takeError());
  FLASHJIT_ASSERT_OK(lse.takeError());
  FLASHJIT_ASSERT_OK(dq.takeError());
  FLASHJIT_ASSERT_OK(dk.takeError());
  FLASHJIT_ASSERT_OK(dv.takeError());
  FLASHJIT_ASSERT_OK(workspace.takeError());

  ForwardArgs fwd = ForwardArgs::packed(p, dq_in->data(), dk_in->data(), dv_in->data(), o->data(),
                                        static_cast<float *>(lse->data()));
  FLASHJIT_ASSERT_OK(launch_forward(p, fwd, nullptr, {}));
  for (DeviceBuffer *poisoned : {&*dq, &*dk, &*dv, &*workspace})
    FLASHJIT_ASSERT_OK(poisoned->fill_bytes(0xff));
  BackwardArgs bwd = BackwardArgs::packed(
      p, dq_in->data(), dk_in->data(), dv_in->data(), o->data(), ddo->data(),
      static_cast<const float *>(lse->data()), dq->data(), dk->data(), dv->data(),
      workspace->data(), workspace->size());
  FLASHJIT_ASSERT_OK(launch_backward(p, bwd, nullptr, c.config));

  AttentionGradients kernel;
  auto gq = download_values(p.dtype, *dq, q_elements(p));
  auto gk = download_values(p.dtype, *dk, k_elements(p));
  auto gv = download_values(p.dtype, *dv, v_elements(p));
  FLASHJIT_ASSERT_OK(gq.takeError());
  FLASHJIT_ASSERT_OK(gk.takeError());
  FLASHJIT_ASSERT_OK(gv.takeError());
  kernel.dq = std::move(*gq);
  kernel.dk = std::move(*gk);
  kernel.dv = std::move(*gv);

  AttentionGradients exact = cpu_attention_backward(p, q, k, v, dout, ReferencePrecision::exact);
  AttentionGradients element =
      cpu_attention_backward(p, q, k, v, dout, ReferencePrecision::element);
  GradientAccuracyReport report = check_gradient_accuracy(kernel, exact, element);
  EXPECT_TRUE(report.passed()) << report.describe();
}

class BackwardCorrectness : public ::testing::TestWithParam<Case> {};

TEST_P(BackwardCorrectness, MatchesReferenceGradients) {
  FLASHJIT_REQUIRE_GPU();
  run_case(GetParam(), 4321);
}

std::vector<Case> irregular_cases() {
  std::vector<Case> cases;
  const std::pair<int64_t, int64_t> lengths[] = {{1, 1}, {17, 17}, {113, 203}, {203, 113},
                                                 {300, 77}};
  for (DType dtype : {DType::bf16, DType::fp16})
    for (MaskKind mask : {MaskKind::none, MaskKind::causal})
      for (auto [sq, sk] : lengths)
        cases.push_back({make_problem(dtype, 2, 4, 4, sq, sk, 64, 64, mask)});
  cases.push_back({make_problem(DType::bf16, 1, 8, 2, 257, 257, 64, 64, MaskKind::window, 100, 0)});
  cases.push_back({make_problem(DType::fp16, 1, 4, 4, 200, 333, 128, 128, MaskKind::window, 64, 32)});
  cases.push_back(
      {make_problem(DType::bf16, 1, 4, 4, 190, 190, 128, 128, MaskKind::causal, -1, -1, 30.f)});
  cases.push_back({make_problem(DType::bf16, 1, 6, 1, 150, 150, 128, 128, MaskKind::none)});
  cases.push_back({make_problem(DType::fp16, 1, 4, 4, 140, 140, 128, 64, MaskKind::causal)});
  cases.push_back({make_problem(DType::bf16, 1, 2, 2, 300, 100, 64, 64, MaskKind::causal)});
  return cases;
}

// Every head dim the backward claims, rotating masks and dtypes.
std::vector<Case> head_dim_cases() {
  std::vector<Case> cases;
  const MaskKind masks[] = {MaskKind::none, MaskKind::causal, MaskKind::window};
  int i = 0;
  for (int d = 32; d <= 256; d += 8, ++i)
    cases.push_back({make_problem(i % 2 ? DType::fp16 : DType::bf16, 1, 2, 2, 131, 163, d, d,
                                  masks[i % 3], 48, 16)});
  return cases;
}

std::vector<Case> config_cases() {
  Problem p = make_problem(DType::bf16, 1, 3, 3, 201, 259, 64, 64, MaskKind::causal);
  return {{p, {KernelPath::sm80, 64, 128, 8, 2}},
          {p, {KernelPath::sm80, 64, 64, 4, 2}},
          {p, {KernelPath::sm80, 128, 64, 8, 2}},
          {p, {KernelPath::sm80, 64, 64, 8, 2}},
          {p, {KernelPath::sm80, 64, 64, 8, 1}}};
}

KernelConfig deterministic(KernelConfig c = {}) {
  c.deterministic = true;
  return c;
}

// The deterministic mode: dQ from its own kernel, no atomics.
std::vector<Case> deterministic_cases() {
  return {{make_problem(DType::bf16, 2, 4, 2, 201, 259, 64, 64, MaskKind::causal), deterministic()},
          {make_problem(DType::fp16, 1, 4, 4, 130, 130, 128, 128, MaskKind::window, 40, 8, 25.f),
           deterministic()},
          {make_problem(DType::bf16, 1, 2, 2, 97, 150, 256, 256, MaskKind::none), deterministic()},
          {make_problem(DType::bf16, 1, 2, 2, 97, 150, 72, 72, MaskKind::causal),
           deterministic({KernelPath::sm80, 64, 64, 8, 1})}};
}

std::string case_name(const ::testing::TestParamInfo<Case> &info) {
  return "case" + std::to_string(info.index);
}

INSTANTIATE_TEST_SUITE_P(Irregular, BackwardCorrectness, ::testing::ValuesIn(irregular_cases()),
                         case_name);
INSTANTIATE_TEST_SUITE_P(HeadDims, BackwardCorrectness, ::testing::ValuesIn(head_dim_cases()),
                         case_name);
INSTANTIATE_TEST_SUITE_P(Configs, BackwardCorrectness, ::testing::ValuesIn(config_cases()),
                         case_name);
INSTANTIATE_TEST_SUITE_P(Deterministic, BackwardCorrectness,
                         ::testing::ValuesIn(deterministic_cases()), case_name);

// Deterministic gradients are bit-identical over repeated runs (the default
// mode's atomics may reorder the dQ sums; its dK and dV are always stable).
TEST(BackwardDeterminism, DeterministicModeIsBitIdentical) {
  FLASHJIT_REQUIRE_GPU();
  const Problem p = make_problem(DType::bf16, 2, 8, 2, 1000, 1000, 128, 128, MaskKind::causal);
  auto q = upload_values(p.dtype, random_values(p.dtype, q_elements(p), 11));
  auto k = upload_values(p.dtype, random_values(p.dtype, k_elements(p), 12));
  auto v = upload_values(p.dtype, random_values(p.dtype, v_elements(p), 13));
  auto dout = upload_values(p.dtype, random_values(p.dtype, o_elements(p), 14));
  auto o = DeviceBuffer::allocate(o_elements(p) * 2);
  auto lse = DeviceBuffer::allocate(lse_elements(p) * 4);
  auto dq = DeviceBuffer::allocate(q_elements(p) * 2);
  auto dk = DeviceBuffer::allocate(k_elements(p) * 2);
  auto dv = DeviceBuffer::allocate(v_elements(p) * 2);
  auto workspace = DeviceBuffer::allocate(backward_workspace_bytes(p));
  FLASHJIT_ASSERT_OK(q.takeError());
  FLASHJIT_ASSERT_OK(k.takeError());
  FLASHJIT_ASSERT_OK(v.takeError());
  FLASHJIT_ASSERT_OK(dout.takeError());
  FLASHJIT_ASSERT_OK(o.takeError());
  FLASHJIT_ASSERT_OK(lse.takeError());
  FLASHJIT_ASSERT_OK(dq.takeError());
  FLASHJIT_ASSERT_OK(dk.takeError());
  FLASHJIT_ASSERT_OK(dv.takeError());
  FLASHJIT_ASSERT_OK(workspace.takeError());
  FLASHJIT_ASSERT_OK(launch_forward(
      p,
      ForwardArgs::packed(p, q->data(), k->data(), v->data(), o->data(),
                          static_cast<float *>(lse->data())),
      nullptr, {}));
  const BackwardArgs args = BackwardArgs::packed(
      p, q->data(), k->data(), v->data(), o->data(), dout->data(),
      static_cast<const float *>(lse->data()), dq->data(), dk->data(), dv->data(),
      workspace->data(), workspace->size());
  std::vector<uint16_t> first[3], again[3];
  for (int run = 0; run < 4; ++run) {
    FLASHJIT_ASSERT_OK(launch_backward(p, args, nullptr, deterministic()));
    std::vector<uint16_t> *out = run == 0 ? first : again;
    const DeviceBuffer *buffers[3] = {&*dq, &*dk, &*dv};
    for (int t = 0; t < 3; ++t) {
      out[t].resize(buffers[t]->size() / 2);
      FLASHJIT_ASSERT_OK(buffers[t]->download(out[t].data(), buffers[t]->size()));
    }
    if (run > 0) {
      for (int t = 0; t < 3; ++t) EXPECT_TRUE(first[t] == again[t]) << "tensor " << t << " run " << run;
    }
  }
}

}  // namespace
}  // namespace flashjit
