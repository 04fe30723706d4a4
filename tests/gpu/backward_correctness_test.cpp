// The backward kernels against float64 CPU reference gradients, with
// the gradient criterion of reference/accuracy.h: max error <= 3 x that of the same
// reference in the kernel's precision + 1e-5. The forward runs first on the
// GPU (its O and LSE feed the backward, as in training); gradients are
// poisoned with NaN before the run, so an unwritten element fails.
#include <gtest/gtest.h>

#include <cmath>

#include "flashjit/backward.h"
#include "generator/bwd_sm90_traits.h"
#include "gpu_environment.h"
#include "reference/accuracy.h"
#include "reference/backward_check.h"
#include "reference/cpu_attention_backward.h"
#include "runtime/cuda_driver.h"
#include "runtime/launch_backward.h"
#include "runtime/launch_forward.h"

namespace flashjit {
namespace {

using testing::download_values;
using testing::make_problem;
using testing::random_values;
using testing::upload_values;

struct Case {
  Problem problem;
  KernelConfig config{};  // zeros: the heuristic
};

// Everything one forward + backward run touches: the inputs (uploaded), O and
// LSE (the forward writes them), the gradients and the workspace.
struct BackwardBuffers {
  DeviceBuffer q, k, v, dout, o, lse, dq, dk, dv, workspace;

  static llvm::Expected<BackwardBuffers> allocate(const Problem &p, const std::vector<float> &q,
                                                  const std::vector<float> &k,
                                                  const std::vector<float> &v,
                                                  const std::vector<float> &dout) {
    BackwardBuffers b;
    auto take = [](DeviceBuffer &into, llvm::Expected<DeviceBuffer> buffer) -> llvm::Error {
      if (!buffer) return buffer.takeError();
      into = std::move(*buffer);
      return llvm::Error::success();
    };
    if (auto e = take(b.q, upload_values(p.dtype, q))) return e;
    if (auto e = take(b.k, upload_values(p.dtype, k))) return e;
    if (auto e = take(b.v, upload_values(p.dtype, v))) return e;
    if (auto e = take(b.dout, upload_values(p.dtype, dout))) return e;
    if (auto e = take(b.o, DeviceBuffer::allocate(o_elements(p) * 2))) return e;
    if (auto e = take(b.lse, DeviceBuffer::allocate(lse_elements(p) * 4))) return e;
    if (auto e = take(b.dq, DeviceBuffer::allocate(q_elements(p) * 2))) return e;
    if (auto e = take(b.dk, DeviceBuffer::allocate(k_elements(p) * 2))) return e;
    if (auto e = take(b.dv, DeviceBuffer::allocate(v_elements(p) * 2))) return e;
    if (auto e = take(b.workspace, DeviceBuffer::allocate(backward_workspace_bytes(p))))
      return e;
    return b;
  }

  ForwardArgs forward_args(const Problem &p) const {
    return ForwardArgs::packed(p, q.data(), k.data(), v.data(), o.data(),
                               static_cast<float *>(lse.data()));
  }
  BackwardArgs backward_args(const Problem &p) const {
    return BackwardArgs::packed(p, q.data(), k.data(), v.data(), o.data(), dout.data(),
                                static_cast<const float *>(lse.data()), dq.data(), dk.data(),
                                dv.data(), workspace.data(), workspace.size());
  }
};

void run_case(const Case &c, uint64_t seed) {
  const Problem &p = c.problem;
  SCOPED_TRACE(describe(p) + (c.config.block_m ? " | " + describe(c.config) : ""));
  std::vector<float> q = random_values(p.dtype, q_elements(p), seed);
  std::vector<float> k = random_values(p.dtype, k_elements(p), seed + 1);
  std::vector<float> v = random_values(p.dtype, v_elements(p), seed + 2);
  std::vector<float> dout = random_values(p.dtype, o_elements(p), seed + 3);
  auto buffers = BackwardBuffers::allocate(p, q, k, v, dout);
  FLASHJIT_ASSERT_OK(buffers.takeError());

  FLASHJIT_ASSERT_OK(launch_forward(p, buffers->forward_args(p), nullptr, {}));
  for (DeviceBuffer *poisoned : {&buffers->dq, &buffers->dk, &buffers->dv, &buffers->workspace})
    FLASHJIT_ASSERT_OK(poisoned->fill_bytes(0xff));
  FLASHJIT_ASSERT_OK(launch_backward(p, buffers->backward_args(p), nullptr, c.config));

  AttentionGradients kernel;
  auto gq = download_values(p.dtype, buffers->dq, q_elements(p));
  auto gk = download_values(p.dtype, buffers->dk, k_elements(p));
  auto gv = download_values(p.dtype, buffers->dv, v_elements(p));
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

// The deterministic mode: on sm_90a the sm90 family's (dQ's reduce-adds in
// key-block order) where its tiles stage dQ, else sm80's (dQ from its own
// kernel, no atomics), which the first and last cases ask for.
std::vector<Case> deterministic_cases() {
  return {{make_problem(DType::bf16, 2, 4, 2, 201, 259, 64, 64, MaskKind::causal),
           deterministic(KernelConfig{KernelPath::sm80})},
          {make_problem(DType::fp16, 1, 4, 4, 130, 130, 128, 128, MaskKind::window, 40, 8, 25.f),
           deterministic()},
          {make_problem(DType::bf16, 1, 2, 2, 97, 150, 256, 256, MaskKind::none), deterministic()},
          {make_problem(DType::bf16, 1, 2, 2, 97, 150, 72, 72, MaskKind::causal),
           deterministic({KernelPath::sm80, 64, 64, 8, 1})}};
}

// The sm90 family (TMA + wgmma), asked for by path: head dims 64, 128 and
// 256 (the head-dim split), every mask, both dtypes, tails on both sides,
// GQA, softcap, every stage count of its search space. The GPU tests run on
// sm_90a only for these.
std::vector<Case> sm90_cases() {
  std::vector<Case> cases;
  const KernelConfig sm90{KernelPath::sm90};
  const std::pair<int64_t, int64_t> lengths[] = {{1, 1}, {17, 17}, {113, 203}, {203, 113},
                                                 {300, 77}, {257, 513}};
  int i = 0;
  for (int d : {64, 128, 256})
    for (MaskKind mask : {MaskKind::none, MaskKind::causal, MaskKind::window})
      for (auto [sq, sk] : lengths) {
        const DType dtype = i++ % 2 ? DType::fp16 : DType::bf16;
        cases.push_back({make_problem(dtype, 2, 4, 2, sq, sk, d, d, mask, 70, 9), sm90});
      }
  for (int d : {64, 128, 256}) {
    cases.push_back(
        {make_problem(DType::bf16, 1, 4, 4, 190, 190, d, d, MaskKind::causal, -1, -1, 30.f), sm90});
    cases.push_back(
        {make_problem(DType::fp16, 1, 2, 2, 150, 250, d, d, MaskKind::none, -1, -1, 20.f), sm90});
    cases.push_back({make_problem(DType::bf16, 2, 8, 1, 1000, 1000, d, d, MaskKind::causal), sm90});
    for (int stages = 1; stages <= (d == 256 ? 2 : 3); ++stages) {
      KernelConfig c = sm90;
      c.stages = stages;
      cases.push_back({make_problem(DType::bf16, 1, 6, 2, 333, 333, d, d, MaskKind::none), c});
    }
  }
  // d=64 with 64-query tiles: dQ over each warpgroup's own keys.
  const KernelConfig own_keys{KernelPath::sm90, 64, 128, 12, 2};
  for (MaskKind mask : {MaskKind::none, MaskKind::causal, MaskKind::window})
    for (auto [sq, sk] : {std::pair<int64_t, int64_t>{113, 203}, {300, 77}, {257, 513}}) {
      const DType dtype = i++ % 2 ? DType::fp16 : DType::bf16;
      cases.push_back({make_problem(dtype, 2, 4, 2, sq, sk, 64, 64, mask, 70, 9), own_keys});
    }
  cases.push_back(
      {make_problem(DType::bf16, 1, 4, 4, 190, 190, 64, 64, MaskKind::causal, -1, -1, 30.f),
       own_keys});
  cases.push_back({make_problem(DType::bf16, 2, 8, 1, 1000, 1000, 64, 64, MaskKind::causal),
                   own_keys});
  // Head dims between 64, 128 and 256 (tiled as the next;
  // dK, dV and dQ cut at the problem's columns): every tiling (128-query
  // tiles at 64, column-split dQ at 128, the head-dim split at 256), masks,
  // GQA, softcap, tails, both dtypes.
  cases.push_back({make_problem(DType::bf16, 2, 4, 2, 113, 203, 40, 40, MaskKind::causal), sm90});
  cases.push_back({make_problem(DType::fp16, 1, 4, 4, 257, 513, 32, 32, MaskKind::none), sm90});
  cases.push_back(
      {make_problem(DType::bf16, 2, 4, 2, 300, 77, 72, 72, MaskKind::window, 70, 9), sm90});
  cases.push_back({make_problem(DType::fp16, 2, 8, 1, 1000, 1000, 96, 96, MaskKind::causal), sm90});
  cases.push_back(
      {make_problem(DType::bf16, 1, 4, 4, 190, 190, 80, 80, MaskKind::causal, -1, -1, 30.f), sm90});
  cases.push_back({make_problem(DType::bf16, 2, 4, 2, 203, 113, 160, 160, MaskKind::none), sm90});
  cases.push_back({make_problem(DType::fp16, 1, 6, 2, 333, 333, 200, 200, MaskKind::causal), sm90});
  cases.push_back({make_problem(DType::bf16, 1, 2, 2, 17, 17, 248, 248, MaskKind::causal), sm90});
  // Dispatch sections that do not divide the (KV head, batch) pairs: 15
  // pairs in sections of 8 (BwdSm90Traits::dispatch_order), GQA.
  cases.push_back(
      {make_problem(DType::bf16, 3, 10, 5, 300, 300, 128, 128, MaskKind::causal), sm90});
  cases.push_back(
      {make_problem(DType::fp16, 5, 6, 3, 200, 450, 64, 64, MaskKind::window, 50, 20), sm90});
  // The deterministic mode (dQ added in key-block order through per-tile
  // semaphores): every dQ tiling that stages dQ (rows
  // at 64, columns at 128, the head-dim split at 256 with one stage),
  // GQA, masks, dispatch sections, 192/128.
  const KernelConfig sm90_det = deterministic(sm90);
  cases.push_back(
      {make_problem(DType::bf16, 2, 6, 2, 333, 333, 64, 64, MaskKind::causal), sm90_det});
  cases.push_back(
      {make_problem(DType::fp16, 3, 4, 4, 300, 517, 128, 128, MaskKind::window, 90, 7, 25.f),
       sm90_det});
  cases.push_back(
      {make_problem(DType::bf16, 1, 4, 2, 200, 300, 256, 256, MaskKind::none), sm90_det});
  cases.push_back(
      {make_problem(DType::bf16, 2, 4, 2, 257, 257, 192, 128, MaskKind::causal), sm90_det});
  // Without GQA under a built-in mask, with too few work items for
  // shortest first (BwdSm90Traits::dispatch_order; it has a test of its
  // own below): the head-dim split at 256 and 192, own keys at 64, more
  // keys than queries (bottom-right aligned).
  cases.push_back(
      {make_problem(DType::bf16, 2, 4, 4, 333, 333, 256, 256, MaskKind::causal), sm90_det});
  cases.push_back(
      {make_problem(DType::fp16, 1, 6, 6, 257, 257, 192, 192, MaskKind::causal), sm90_det});
  cases.push_back(
      {make_problem(DType::fp16, 2, 4, 4, 203, 450, 64, 64, MaskKind::causal), sm90_det});
  cases.push_back(
      {make_problem(DType::bf16, 2, 4, 4, 250, 600, 128, 128, MaskKind::window, 100, 20),
       sm90_det});
  // Unequal head dims (Q/K tiled apart from V/dO): DeepSeek-V3's 192/128
  // (the head-dim split, staged dQ: 64 keys a CTA, named, the default
  // being 128), each side wider, both below 256.
  const KernelConfig split_192{KernelPath::sm90, 64, 64, 12, 2};
  cases.push_back(
      {make_problem(DType::bf16, 2, 4, 2, 391, 391, 192, 128, MaskKind::causal), split_192});
  cases.push_back(
      {make_problem(DType::fp16, 1, 4, 4, 257, 700, 192, 128, MaskKind::none, -1, -1, 30.f),
       split_192});
  cases.push_back(
      {make_problem(DType::bf16, 2, 4, 4, 203, 113, 128, 256, MaskKind::window, 70, 9), sm90});
  cases.push_back({make_problem(DType::bf16, 2, 6, 2, 300, 300, 64, 128, MaskKind::causal), sm90});
  cases.push_back({make_problem(DType::fp16, 1, 4, 4, 190, 257, 96, 40, MaskKind::none), sm90});
  // Tiles 192 wide (the head-dim split over 64-byte swizzle rows): equal,
  // either side, beside 256, between on both sides; two stages (staged dQ),
  // three (dQ by atomics), deterministic.
  cases.push_back(
      {make_problem(DType::bf16, 2, 6, 2, 333, 333, 192, 192, MaskKind::window, 90, 7), sm90});
  cases.push_back(
      {make_problem(DType::fp16, 1, 4, 4, 257, 400, 136, 136, MaskKind::causal, -1, -1, 30.f),
       sm90});
  cases.push_back({make_problem(DType::bf16, 2, 4, 2, 300, 77, 128, 192, MaskKind::causal), sm90});
  cases.push_back({make_problem(DType::bf16, 1, 4, 2, 200, 300, 256, 192, MaskKind::none), sm90});
  cases.push_back(
      {make_problem(DType::fp16, 2, 4, 2, 190, 257, 176, 104, MaskKind::causal), split_192});
  cases.push_back({make_problem(DType::bf16, 2, 4, 2, 391, 391, 192, 192, MaskKind::causal),
                   KernelConfig{KernelPath::sm90, 64, 64, 12, 2}});
  cases.push_back({make_problem(DType::fp16, 1, 4, 4, 257, 513, 184, 184, MaskKind::none),
                   KernelConfig{KernelPath::sm90, 64, 64, 12, 3}});
  cases.push_back({make_problem(DType::bf16, 2, 4, 2, 333, 333, 160, 160, MaskKind::causal),
                   deterministic(sm90)});
  // Tiles 96 wide (three 64-byte swizzle rows, dQ over each warpgroup's own
  // keys): beside 128 and 64, two stages, GQA.
  cases.push_back({make_problem(DType::bf16, 2, 6, 2, 300, 300, 128, 96, MaskKind::causal), sm90});
  cases.push_back({make_problem(DType::fp16, 2, 4, 2, 203, 113, 88, 64, MaskKind::none),
                   KernelConfig{KernelPath::sm90, 64, 128, 12, 2}});
  // d=32's own tile (one 64-byte swizzle row): 128-query tiles (dQ split by
  // rows), 64-query tiles (dQ over each warpgroup's own keys), beside a 64,
  // masks, softcap, GQA, deterministic.
  cases.push_back({make_problem(DType::bf16, 2, 6, 2, 333, 333, 32, 32, MaskKind::causal), sm90});
  cases.push_back(
      {make_problem(DType::fp16, 2, 4, 2, 300, 77, 32, 32, MaskKind::window, 70, 9, 30.f), sm90});
  cases.push_back({make_problem(DType::bf16, 2, 4, 2, 203, 113, 32, 32, MaskKind::causal),
                   KernelConfig{KernelPath::sm90, 64, 128, 12, 2}});
  cases.push_back({make_problem(DType::bf16, 2, 4, 2, 257, 257, 32, 64, MaskKind::none), sm90});
  cases.push_back({make_problem(DType::fp16, 2, 4, 4, 257, 190, 64, 32, MaskKind::causal), sm90});
  cases.push_back({make_problem(DType::bf16, 2, 4, 2, 333, 333, 32, 32, MaskKind::causal),
                   deterministic(sm90)});
  // 192/128 with 128 keys a CTA (each warpgroup its own 64, S^T and dP^T in
  // two passes, the first's dV and dK under the second's element-wise work;
  // the default without a caller's modifiers): causal, a window with
  // softcap, GQA, both dtypes, tails.
  const KernelConfig wide_keys{KernelPath::sm90, 64, 128, 12, 1};
  cases.push_back(
      {make_problem(DType::bf16, 2, 4, 2, 391, 391, 192, 128, MaskKind::causal), wide_keys});
  cases.push_back(
      {make_problem(DType::fp16, 1, 4, 4, 300, 517, 192, 128, MaskKind::window, 90, 7, 25.f),
       wide_keys});
  cases.push_back(
      {make_problem(DType::bf16, 2, 6, 2, 203, 113, 176, 104, MaskKind::none), wide_keys});
  // With two Q/dO stages (a caller's config: no room for the staged dQ,
  // which then goes by atomics; the passes one after the other).
  cases.push_back({make_problem(DType::bf16, 2, 4, 2, 391, 391, 192, 128, MaskKind::causal),
                   KernelConfig{KernelPath::sm90, 64, 128, 12, 2}});
  return cases;
}

std::string case_name(const ::testing::TestParamInfo<Case> &info) {
  return "case" + std::to_string(info.index);
}

std::vector<Case> chunked_cases(const KernelConfig &config) {
  std::vector<Case> cases;
  for (const Problem &p : testing::chunked_problems()) cases.push_back({p, config});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Irregular, BackwardCorrectness, ::testing::ValuesIn(irregular_cases()),
                         case_name);
INSTANTIATE_TEST_SUITE_P(HeadDims, BackwardCorrectness, ::testing::ValuesIn(head_dim_cases()),
                         case_name);
INSTANTIATE_TEST_SUITE_P(Configs, BackwardCorrectness, ::testing::ValuesIn(config_cases()),
                         case_name);
INSTANTIATE_TEST_SUITE_P(Chunked, BackwardCorrectness,
                         ::testing::ValuesIn(chunked_cases(KernelConfig{KernelPath::sm80})),
                         case_name);
class BackwardSm90Correctness : public ::testing::TestWithParam<Case> {};

TEST_P(BackwardSm90Correctness, MatchesReferenceGradients) {
  FLASHJIT_REQUIRE_SM90();
  run_case(GetParam(), 8765);
}

INSTANTIATE_TEST_SUITE_P(Sm90, BackwardSm90Correctness, ::testing::ValuesIn(sm90_cases()),
                         case_name);
// Past head dim 256 (the forward on the sm90 kernel, the backward on the
// sm80 family's 32-key tiles, dQ in column chunks): Gemma 4's 512 and MLA's
// 576/512, the masks, softcap, GQA and MQA, odd lengths.
std::vector<Case> wide_cases() {
  std::vector<Case> cases;
  int i = 0;
  for (auto [dqk, dv] : {std::pair{512, 512}, {576, 512}, {320, 320}, {448, 448}})
    for (MaskKind mask : {MaskKind::none, MaskKind::causal, MaskKind::window})
      for (auto [sq, sk] : {std::pair<int64_t, int64_t>{1, 1}, {113, 203}, {300, 77}}) {
        const DType dtype = i++ % 2 ? DType::fp16 : DType::bf16;
        cases.push_back({make_problem(dtype, 2, 4, dqk == 576 ? 1 : 2, sq, sk, dqk, dv, mask, 70,
                                      9)});
      }
  cases.push_back({make_problem(DType::bf16, 1, 8, 4, 515, 515, 512, 512, MaskKind::causal, -1,
                                -1, 30.f)});
  return cases;
}
INSTANTIATE_TEST_SUITE_P(Sm90Wide, BackwardSm90Correctness, ::testing::ValuesIn(wide_cases()),
                         case_name);
INSTANTIATE_TEST_SUITE_P(Sm90Chunked, BackwardSm90Correctness,
                         ::testing::ValuesIn(chunked_cases(KernelConfig{KernelPath::sm90})),
                         case_name);
INSTANTIATE_TEST_SUITE_P(Deterministic, BackwardCorrectness,
                         ::testing::ValuesIn(deterministic_cases()), case_name);

// Deterministic gradients are bit-identical over repeated runs (the default
// mode's atomics may reorder the dQ sums; its dK and dV are always stable).
// Four runs of the deterministic backward give the same bits, on `config`'s
// family.
void expect_bit_identical_runs(
    const KernelConfig &config,
    const Problem &p = make_problem(DType::bf16, 2, 8, 2, 1000, 1000, 128, 128, MaskKind::causal)) {
  auto buffers = BackwardBuffers::allocate(p, random_values(p.dtype, q_elements(p), 11),
                                           random_values(p.dtype, k_elements(p), 12),
                                           random_values(p.dtype, v_elements(p), 13),
                                           random_values(p.dtype, o_elements(p), 14));
  FLASHJIT_ASSERT_OK(buffers.takeError());
  FLASHJIT_ASSERT_OK(launch_forward(p, buffers->forward_args(p), nullptr, {}));
  const BackwardArgs args = buffers->backward_args(p);
  std::vector<uint16_t> first[3], again[3];
  for (int run = 0; run < 4; ++run) {
    FLASHJIT_ASSERT_OK(launch_backward(p, args, nullptr, config));
    std::vector<uint16_t> *out = run == 0 ? first : again;
    const DeviceBuffer *tensors[3] = {&buffers->dq, &buffers->dk, &buffers->dv};
    for (int t = 0; t < 3; ++t) {
      out[t].resize(tensors[t]->size() / 2);
      FLASHJIT_ASSERT_OK(tensors[t]->download(out[t].data(), tensors[t]->size()));
    }
    if (run > 0) {
      for (int t = 0; t < 3; ++t) EXPECT_TRUE(first[t] == again[t]) << "tensor " << t << " run " << run;
    }
  }
}

TEST(BackwardDeterminism, DeterministicModeIsBitIdentical) {
  FLASHJIT_REQUIRE_GPU();
  expect_bit_identical_runs(deterministic());
}

// The sm80 family's (the default on sm_90a is sm90's): dQ from its own kernel.
TEST(BackwardDeterminism, Sm80DeterministicModeIsBitIdentical) {
  FLASHJIT_REQUIRE_GPU();
  expect_bit_identical_runs(deterministic(KernelConfig{KernelPath::sm80}));
}

// The sm90 family's: dQ's TMA reduce-adds in key-block order.
TEST(BackwardDeterminism, Sm90DeterministicModeIsBitIdentical) {
  FLASHJIT_REQUIRE_SM90();
  expect_bit_identical_runs(deterministic(KernelConfig{KernelPath::sm90}));
}

// The sm90 tiling where both consumer warpgroups add dQ over their own keys
// into the same rows (64-query tiles at head dim 64; 64/128 takes it by
// default): one warpgroup's adds performed before the other's.
TEST(BackwardDeterminism, Sm90DeterministicOwnKeysIsBitIdentical) {
  FLASHJIT_REQUIRE_SM90();
  expect_bit_identical_runs(
      deterministic(KernelConfig{KernelPath::sm90, 64, 128, 12, 1}),
      make_problem(DType::bf16, 2, 8, 2, 1000, 1000, 64, 64, MaskKind::causal));
  expect_bit_identical_runs(
      deterministic(KernelConfig{KernelPath::sm90}),
      make_problem(DType::fp16, 2, 8, 4, 700, 700, 64, 128, MaskKind::none));
  expect_bit_identical_runs(
      deterministic(KernelConfig{KernelPath::sm90, 64, 128, 12, 1}),
      make_problem(DType::bf16, 2, 8, 2, 1000, 1000, 32, 32, MaskKind::causal));
}

// Shortest first (BwdSm90Traits::dispatch_order: without GQA under a
// built-in mask, at least 12 work items an SM), on problems too large for
// the float64 CPU gradients: against the GPU backward reference (fp32, in
// exact and element precision), and bit-identical runs. A causal mask over
// the head-dim split, a window over more keys than queries at 64.
TEST(BackwardDeterminism, Sm90ShortestFirstMatchesGpuReferenceBitIdentically) {
  FLASHJIT_REQUIRE_SM90();
  const KernelConfig det = deterministic(KernelConfig{KernelPath::sm90});
  const Problem problems[] = {
      make_problem(DType::bf16, 4, 16, 16, 2048, 2048, 256, 256, MaskKind::causal),
      make_problem(DType::fp16, 8, 16, 16, 1500, 2048, 64, 64, MaskKind::window, 700, 30)};
  uint64_t seed = 60;
  for (const Problem &p : problems) {
    const KernelConfig tile = BwdSm90Traits::default_config(p.head_dim_qk, p.head_dim_v);
    ASSERT_TRUE(BwdSm90Traits::dispatch_order(p, tile.block_n, false, true).shortest_first)
        << "d=" << p.head_dim_qk;
    auto report = check_modified_backward(
        p, ModifierArgs{},
        [&](const Problem &q, const BackwardArgs &args, CUstream stream) {
          return launch_backward(q, args, stream, det);
        },
        nullptr, nullptr, seed++);
    ASSERT_TRUE(bool(report)) << llvm::toString(report.takeError());
    EXPECT_TRUE(report->passed()) << "d=" << p.head_dim_qk << ": " << report->describe();
    expect_bit_identical_runs(det, p);
  }
}

// The head-dim split at a 192-wide tile (each warpgroup's dQ half its own
// three boxes): DeepSeek-V3's 192/128 on 64 keys a CTA, named.
TEST(BackwardDeterminism, Sm90DeterministicSplit192IsBitIdentical) {
  FLASHJIT_REQUIRE_SM90();
  expect_bit_identical_runs(
      deterministic(KernelConfig{KernelPath::sm90, 64, 64, 12, 2}),
      make_problem(DType::bf16, 2, 8, 2, 1000, 1000, 192, 128, MaskKind::causal));
}

// 192/128's default, 128 keys a CTA (each warpgroup's dQ over its own keys,
// two writers taking the tiles in turn).
TEST(BackwardDeterminism, Sm90Deterministic192With128KeysIsBitIdentical) {
  FLASHJIT_REQUIRE_SM90();
  expect_bit_identical_runs(
      deterministic(KernelConfig{KernelPath::sm90}),
      make_problem(DType::bf16, 2, 8, 2, 1000, 1000, 192, 128, MaskKind::causal));
}

}  // namespace
}  // namespace flashjit
