// The forward kernel against the float64 CPU reference (small problems) or
// the fp32 GPU reference (large ones), with the accuracy criterion of
// reference/accuracy.h: max error <= 2 x that of the same reference in the
// kernel's precision + 1e-5.
// Inputs are random, tensors are strided views with NaN in every gap (a read
// outside the view poisons the result), outputs are poisoned before the run
// and the gaps of O must come back untouched.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "forward_check.h"
#include "generator/fwd_sm90_traits.h"
#include "generator/heuristic.h"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit {
namespace {

using testing::Case;
using testing::make_problem;
using testing::random_values;
using testing::run_case;

class ForwardCorrectness : public ::testing::TestWithParam<Case> {};

TEST_P(ForwardCorrectness, MatchesReference) {
  FLASHJIT_REQUIRE_GPU();
  run_case(GetParam(), 1234);
}

std::vector<Case> irregular_cases() {
  std::vector<Case> cases;
  const MaskKind masks[] = {MaskKind::none, MaskKind::causal};
  // seqlen pairs: not multiples of any tile, 1, and seqlen_q != seqlen_k both ways.
  const std::pair<int64_t, int64_t> lengths[] = {{1, 1},     {17, 17},  {113, 203}, {203, 113},
                                                 {1023, 1023}, {1, 1023}, {128, 1},  {300, 77}};
  for (DType dtype : {DType::bf16, DType::fp16})
    for (MaskKind mask : masks)
      for (auto [sq, sk] : lengths)
        cases.push_back({make_problem(dtype, 2, 4, 4, sq, sk, 128, 128, mask)});
  // Sliding windows, GQA/MQA, softcap, distinct qk/v head dims, strides.
  cases.push_back({make_problem(DType::bf16, 1, 8, 2, 517, 517, 64, 64, MaskKind::window, 100, 0)});
  cases.push_back({make_problem(DType::bf16, 1, 8, 8, 333, 700, 64, 64, MaskKind::window, 64, 32)});
  cases.push_back({make_problem(DType::fp16, 2, 4, 4, 257, 129, 96, 96, MaskKind::window, -1, 17)});
  cases.push_back({make_problem(DType::bf16, 2, 4, 4, 129, 257, 128, 128, MaskKind::window, 5, -1)});
  cases.push_back({make_problem(DType::bf16, 2, 6, 1, 257, 257, 128, 128, MaskKind::causal)});
  cases.push_back({make_problem(DType::fp16, 2, 6, 3, 111, 333, 64, 64, MaskKind::none)});
  cases.push_back(
      {make_problem(DType::bf16, 2, 4, 4, 255, 255, 128, 128, MaskKind::causal, -1, -1, 30.f)});
  cases.push_back(
      {make_problem(DType::fp16, 1, 4, 2, 100, 300, 64, 64, MaskKind::none, -1, -1, 5.f)});
  cases.push_back({make_problem(DType::bf16, 2, 4, 4, 200, 200, 128, 64, MaskKind::causal)});
  cases.push_back({make_problem(DType::bf16, 2, 4, 4, 200, 200, 64, 128, MaskKind::none)});
  cases.push_back({make_problem(DType::bf16, 2, 4, 2, 231, 177, 72, 40, MaskKind::causal), {}, true});
  cases.push_back({make_problem(DType::fp16, 2, 4, 4, 333, 333, 128, 128, MaskKind::none), {}, true});
  // A causal mask with seqlen_q > seqlen_k leaves the first rows with no key.
  cases.push_back({make_problem(DType::bf16, 1, 2, 2, 300, 100, 64, 64, MaskKind::causal)});
  return cases;
}

std::vector<Case> head_dim_cases() {
  std::vector<Case> cases;
  for (int d = 8; d <= 256; d += 8)
    cases.push_back({make_problem(d % 16 ? DType::fp16 : DType::bf16, 1, 3, 3, 197, 229, d, d,
                                  d % 24 ? MaskKind::causal : MaskKind::none)});
  return cases;
}

// Every kind of config the tuner can emit: rows per warp 16 and 32, each
// warp count, block_n from 16 to 128, 2 to 4 stages.
std::vector<Case> config_cases() {
  std::vector<Case> cases;
  const KernelConfig configs[] = {{KernelPath::sm80, 64, 64, 4, 2},  {KernelPath::sm80, 128, 32, 4, 3},
                                  {KernelPath::sm80, 128, 128, 8, 2}, {KernelPath::sm80, 64, 16, 2, 4},
                                  {KernelPath::sm80, 32, 64, 1, 2},  {KernelPath::sm80, 256, 64, 8, 2},
                                  {KernelPath::sm80, 128, 64, 4, 4}};
  for (const KernelConfig &c : configs)
    cases.push_back({make_problem(DType::bf16, 2, 3, 3, 301, 405, 64, 64, MaskKind::causal), c});
  cases.push_back({make_problem(DType::fp16, 1, 2, 2, 301, 301, 256, 256, MaskKind::none),
                   {KernelPath::sm80, 64, 32, 4, 3}});
  return cases;
}

std::vector<Case> large_cases() {
  return {{make_problem(DType::bf16, 2, 16, 16, 4096, 4096, 128, 128, MaskKind::causal)},
          {make_problem(DType::bf16, 1, 16, 4, 3000, 5000, 64, 64, MaskKind::none)},
          {make_problem(DType::fp16, 1, 8, 8, 2049, 2049, 256, 256, MaskKind::window, 512, 0)}};
}

std::string case_name(const ::testing::TestParamInfo<Case> &info) {
  return "case" + std::to_string(info.index);
}

INSTANTIATE_TEST_SUITE_P(Irregular, ForwardCorrectness, ::testing::ValuesIn(irregular_cases()),
                         case_name);
INSTANTIATE_TEST_SUITE_P(HeadDims, ForwardCorrectness, ::testing::ValuesIn(head_dim_cases()),
                         case_name);
INSTANTIATE_TEST_SUITE_P(Configs, ForwardCorrectness, ::testing::ValuesIn(config_cases()),
                         case_name);
INSTANTIATE_TEST_SUITE_P(Large, ForwardCorrectness, ::testing::ValuesIn(large_cases()), case_name);

std::vector<Case> chunked_cases(const KernelConfig &config) {
  std::vector<Case> cases;
  for (const Problem &p : testing::chunked_problems()) cases.push_back({p, config});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Chunked, ForwardCorrectness,
                         ::testing::ValuesIn(chunked_cases(KernelConfig{KernelPath::sm80})),
                         case_name);

// ---- the sm90 path (TMA + wgmma, templates/fwd_sm90.cuh) ---------------------
// Runs only on a device whose target is sm_90a (Hopper); skips elsewhere.

KernelConfig sm90_path() {
  KernelConfig c;
  c.path = KernelPath::sm90;  // tiles from FwdSm90Traits::default_config
  return c;
}

std::vector<Case> sm90_cases() {
  std::vector<Case> cases;
  const std::pair<int64_t, int64_t> lengths[] = {{1, 1},       {17, 17},  {113, 203}, {203, 113},
                                                 {1023, 1023}, {1, 1023}, {128, 1},   {300, 77}};
  for (int d : {64, 128, 256})
    for (MaskKind mask : {MaskKind::none, MaskKind::causal})
      for (auto [sq, sk] : lengths)
        cases.push_back({make_problem(d == 128 ? DType::fp16 : DType::bf16, 2, 4, 4, sq, sk, d, d,
                                      mask),
                         sm90_path()});
  // fp16 at d=64/256 and bf16 at d=128 too, on an irregular pair.
  for (int d : {64, 128, 256})
    cases.push_back({make_problem(d == 128 ? DType::bf16 : DType::fp16, 2, 4, 4, 257, 391, d, d,
                                  MaskKind::causal),
                     sm90_path()});
  // Sliding windows, GQA/MQA, softcap, strides, rows that see no key.
  cases.push_back({make_problem(DType::bf16, 1, 8, 2, 517, 517, 64, 64, MaskKind::window, 100, 0), sm90_path()});
  cases.push_back({make_problem(DType::bf16, 1, 8, 8, 333, 700, 128, 128, MaskKind::window, 64, 32), sm90_path()});
  cases.push_back({make_problem(DType::fp16, 2, 4, 4, 257, 129, 256, 256, MaskKind::window, -1, 17), sm90_path()});
  cases.push_back({make_problem(DType::bf16, 2, 4, 4, 129, 257, 128, 128, MaskKind::window, 5, -1), sm90_path()});
  cases.push_back({make_problem(DType::bf16, 2, 6, 1, 257, 257, 128, 128, MaskKind::causal), sm90_path()});
  cases.push_back({make_problem(DType::fp16, 2, 6, 3, 111, 333, 64, 64, MaskKind::none), sm90_path()});
  cases.push_back({make_problem(DType::bf16, 2, 4, 4, 255, 255, 128, 128, MaskKind::causal, -1, -1, 30.f), sm90_path()});
  cases.push_back({make_problem(DType::fp16, 1, 4, 2, 100, 300, 256, 256, MaskKind::none, -1, -1, 5.f), sm90_path()});
  cases.push_back({make_problem(DType::bf16, 2, 4, 2, 231, 177, 64, 64, MaskKind::causal), sm90_path(), true});
  cases.push_back({make_problem(DType::fp16, 2, 4, 4, 333, 333, 128, 128, MaskKind::none), sm90_path(), true});
  cases.push_back({make_problem(DType::bf16, 2, 2, 2, 200, 300, 256, 256, MaskKind::causal), sm90_path(), true});
  cases.push_back({make_problem(DType::bf16, 1, 2, 2, 300, 100, 128, 128, MaskKind::causal), sm90_path()});
  // Head dims between 64, 128, 192 and 256, tiled as the next of them (zero
  // columns past the problem's, never stored): tails, causal rows that see
  // no key, GQA, softcap, windows, both dtypes.
  cases.push_back(
      {make_problem(DType::bf16, 2, 4, 4, 203, 113, 32, 32, MaskKind::causal), sm90_path()});
  cases.push_back(
      {make_problem(DType::fp16, 2, 4, 2, 257, 391, 40, 40, MaskKind::none), sm90_path()});
  cases.push_back(
      {make_problem(DType::bf16, 1, 8, 2, 1023, 1023, 72, 72, MaskKind::causal), sm90_path()});
  cases.push_back(
      {make_problem(DType::fp16, 2, 4, 4, 300, 77, 80, 80, MaskKind::causal, -1, -1, 30.f),
       sm90_path()});
  cases.push_back(
      {make_problem(DType::bf16, 2, 6, 3, 113, 203, 96, 96, MaskKind::window, 40, 8), sm90_path()});
  cases.push_back(
      {make_problem(DType::bf16, 2, 4, 4, 517, 517, 96, 96, MaskKind::none), sm90_path(), true});
  cases.push_back(
      {make_problem(DType::fp16, 1, 4, 1, 333, 333, 160, 160, MaskKind::causal), sm90_path()});
  cases.push_back(
      {make_problem(DType::bf16, 2, 2, 2, 129, 257, 200, 200, MaskKind::none, -1, -1, 5.f),
       sm90_path()});
  cases.push_back(
      {make_problem(DType::bf16, 1, 4, 4, 17, 17, 248, 248, MaskKind::causal), sm90_path()});
  // Tiled as 192 (O 96 registers, 112-key tiles, intra-warpgroup overlap):
  // 192 itself and 136, every mask, softcap, GQA, tails, both dtypes.
  cases.push_back(
      {make_problem(DType::bf16, 2, 4, 2, 391, 391, 192, 192, MaskKind::causal), sm90_path()});
  cases.push_back(
      {make_problem(DType::fp16, 2, 4, 4, 129, 700, 192, 192, MaskKind::none, -1, -1, 30.f),
       sm90_path(), true});
  cases.push_back({make_problem(DType::bf16, 1, 6, 3, 517, 517, 136, 136, MaskKind::window, 100, 0),
                   sm90_path()});
  // Unequal head dims (Q and K tiled apart from V and O):
  // DeepSeek-V3's 192/128, and each side wider.
  cases.push_back(
      {make_problem(DType::bf16, 2, 4, 2, 257, 391, 192, 128, MaskKind::causal), sm90_path()});
  cases.push_back(
      {make_problem(DType::fp16, 1, 8, 8, 1023, 1023, 192, 128, MaskKind::none), sm90_path()});
  cases.push_back(
      {make_problem(DType::bf16, 2, 4, 4, 203, 113, 128, 64, MaskKind::causal, -1, -1, 30.f),
       sm90_path()});
  cases.push_back({make_problem(DType::bf16, 2, 4, 4, 113, 203, 64, 128, MaskKind::window, 40, 8),
                   sm90_path()});
  // Three consumer warpgroups (block_m 192, d=64): windows, GQA, softcap,
  // fp16, rows that see no key.
  const KernelConfig three_wg{KernelPath::sm90, 192, 112, 16, 3};
  cases.push_back({make_problem(DType::fp16, 1, 8, 2, 517, 517, 64, 64, MaskKind::window, 100, 0), three_wg});
  cases.push_back({make_problem(DType::bf16, 2, 6, 3, 111, 333, 64, 64, MaskKind::none, -1, -1, 30.f), three_wg});
  cases.push_back({make_problem(DType::bf16, 1, 2, 2, 300, 100, 64, 64, MaskKind::causal), three_wg});
  // Every config of the search space (block_n, stages), on a causal problem
  // long enough to wrap the stage ring several times.
  for (int d : {64, 128, 256})
    for (const KernelConfig &c : FwdSm90Traits::search_space(d, 227 * 1024))
      cases.push_back({make_problem(DType::bf16, 1, 3, 3, 701, 905, d, d, MaskKind::causal), c});
  // The widest tiles, lean problems' only (FwdSm90Traits::lean): 192x128 at
  // d=64, block_n 144-176 at d=128 (and the head dims tiled as 128); GQA,
  // fp16, key tails, rows that see no key.
  for (int d : {64, 128}) {
    const std::vector<KernelConfig> narrow = FwdSm90Traits::search_space(d, 227 * 1024);
    for (const KernelConfig &c : FwdSm90Traits::search_space(d, 227 * 1024, /*lean=*/true))
      if (std::find(narrow.begin(), narrow.end(), c) == narrow.end())
        cases.push_back({make_problem(DType::bf16, 1, 3, 3, 701, 905, d, d, MaskKind::causal), c});
  }
  const KernelConfig wide_64{KernelPath::sm90, 192, 128, 16, 3};
  cases.push_back({make_problem(DType::fp16, 2, 8, 2, 1517, 1517, 64, 64, MaskKind::none), wide_64});
  cases.push_back({make_problem(DType::bf16, 1, 2, 2, 300, 100, 64, 64, MaskKind::causal), wide_64});
  const KernelConfig wide_128{KernelPath::sm90, 128, 160, 12, 2};
  cases.push_back({make_problem(DType::fp16, 2, 8, 2, 2500, 3001, 128, 128, MaskKind::none), wide_128});
  cases.push_back({make_problem(DType::bf16, 1, 4, 4, 300, 100, 96, 96, MaskKind::causal), wide_128});
  // Large: the fp32 GPU reference.
  cases.push_back({make_problem(DType::bf16, 2, 16, 16, 4096, 4096, 128, 128, MaskKind::causal), sm90_path()});
  cases.push_back({make_problem(DType::bf16, 1, 16, 4, 3000, 5000, 64, 64, MaskKind::none), sm90_path()});
  cases.push_back({make_problem(DType::fp16, 1, 8, 8, 2049, 2049, 256, 256, MaskKind::window, 512, 0), sm90_path()});
  return cases;
}

class ForwardCorrectnessSm90 : public ::testing::TestWithParam<Case> {};

TEST_P(ForwardCorrectnessSm90, MatchesReference) {
  FLASHJIT_REQUIRE_SM90();
  // The heuristic must actually give sm90 (a fallback would test sm80).
  auto spec = resolve_forward_spec(GetParam().problem, GetParam().config);
  FLASHJIT_ASSERT_OK(spec.takeError());
  ASSERT_EQ(spec->config.path, KernelPath::sm90) << spec->id();
  run_case(GetParam(), 4321);
}

INSTANTIATE_TEST_SUITE_P(Sm90, ForwardCorrectnessSm90, ::testing::ValuesIn(sm90_cases()), case_name);

// Past head dim 256 (two consumer warpgroups per 64 rows, half of O's
// columns each, S's halves added through shared memory): Gemma 4's 512,
// MLA's 576/512, the head dims between (tiled in whole 64 columns, V in
// whole 128), each mask, softcap, GQA, both dtypes, key and query tails,
// rows that see no key, strided views, every config of the search space;
// each within the float64 reference's budget (2e8 multiply-adds), as the
// fp32 GPU reference takes head dims up to 256.
std::vector<Case> sm90_wide_cases() {
  std::vector<Case> cases;
  for (auto [sq, sk] : {std::pair<int64_t, int64_t>{1, 1}, {17, 17}, {113, 203}, {203, 113},
                        {300, 77}})
    for (MaskKind mask : {MaskKind::none, MaskKind::causal})
      cases.push_back({make_problem(DType::bf16, 2, 4, 2, sq, sk, 512, 512, mask), sm90_path()});
  cases.push_back({make_problem(DType::fp16, 1, 4, 4, 257, 301, 512, 512, MaskKind::causal),
                   sm90_path(), true});
  cases.push_back({make_problem(DType::bf16, 1, 8, 4, 203, 233, 512, 512, MaskKind::window, 100,
                                0, 30.f),
                   sm90_path()});
  cases.push_back({make_problem(DType::bf16, 1, 4, 1, 129, 257, 576, 512, MaskKind::causal),
                   sm90_path()});
  cases.push_back({make_problem(DType::fp16, 1, 4, 2, 200, 300, 576, 512, MaskKind::none, -1, -1,
                                5.f),
                   sm90_path(), true});
  for (auto [dq, dv] : {std::pair{264, 264}, {320, 320}, {384, 384}, {448, 448}, {512, 256},
                        {256, 512}, {392, 200}})
    cases.push_back({make_problem(DType::bf16, 1, 4, 2, 191, 263, dq, dv, MaskKind::causal),
                     sm90_path()});
  for (const KernelConfig &c : FwdSm90Traits::search_space(512, 227 * 1024))
    cases.push_back({make_problem(DType::bf16, 1, 2, 2, 301, 405, 512, 512, MaskKind::causal), c});
  // Many query tiles (16) against the float64 reference (the GPU reference
  // stops at head dim 256).
  cases.push_back({make_problem(DType::bf16, 1, 2, 2, 1024, 180, 512, 512, MaskKind::causal),
                   sm90_path()});
  return cases;
}
INSTANTIATE_TEST_SUITE_P(Sm90Wide, ForwardCorrectnessSm90, ::testing::ValuesIn(sm90_wide_cases()),
                         case_name);
INSTANTIATE_TEST_SUITE_P(Sm90Chunked, ForwardCorrectnessSm90,
                         ::testing::ValuesIn(chunked_cases(KernelConfig{KernelPath::sm90})),
                         case_name);

// Small shapes for compute-sanitizer (memcheck, racecheck, synccheck):
// --gtest_filter='Sm90Sanitizer*'. One causal GQA shape per head dim, and
// shapes of more work tiles (2 query blocks x 34 heads x 2) than an H200 has
// SMs, so CTAs of the persistent grid run several work tiles: the second Q
// buffer, the K/V ring running on across work tiles.
TEST(Sm90Sanitizer, SmallShapes) {
  FLASHJIT_REQUIRE_SM90();
  for (int d : {64, 128, 256})
    run_case({make_problem(DType::bf16, 1, 2, 1, 150, 200, d, d, MaskKind::causal), sm90_path()},
             99);
  for (int d : {64, 128})
    for (MaskKind mask : {MaskKind::none, MaskKind::causal})
      run_case({make_problem(DType::bf16, 2, 34, 17, 150, 200, d, d, mask), sm90_path()}, 98);
  // Three consumer warpgroups taking turns round robin (1 query block of 192
  // x 34 heads x 2 = 68 work tiles; 3 x 34 x 2 = 204 at 400 rows).
  for (int64_t seqlen_q : {150, 400})
    run_case({make_problem(DType::bf16, 2, 34, 17, seqlen_q, 200, 64, 64, MaskKind::causal),
              KernelConfig{KernelPath::sm90, 192, 112, 16, 3}},
             97);
  // The lean problems' widest tiles.
  run_case({make_problem(DType::bf16, 2, 34, 17, 400, 300, 64, 64, MaskKind::causal),
            KernelConfig{KernelPath::sm90, 192, 128, 16, 3}},
           96);
  run_case({make_problem(DType::bf16, 2, 34, 17, 150, 400, 128, 128, MaskKind::none),
            KernelConfig{KernelPath::sm90, 128, 176, 12, 2}},
           95);
  // Past head dim 256: the two warpgroups' S exchange (shared memory, named
  // barriers), Gemma 4's 512 and MLA's 576/512, over more work tiles than
  // SMs (3 query blocks x 34 heads x 2; few keys: the float64 reference).
  for (auto [dq, dv] : {std::pair{512, 512}, {576, 512}})
    run_case({make_problem(DType::bf16, 2, 34, 17, 130, 33, dq, dv, MaskKind::causal),
              sm90_path()},
             94);
}

// The same inputs give bit-identical outputs run after run: a moving result
// would be a race.
TEST(ForwardDeterminism, RepeatedRunsAreBitIdentical) {
  FLASHJIT_REQUIRE_GPU();
  Problem p = make_problem(DType::bf16, 2, 8, 8, 1000, 1000, 128, 128, MaskKind::causal);
  auto q = testing::upload_values(p.dtype, random_values(p.dtype, q_elements(p), 1));
  auto k = testing::upload_values(p.dtype, random_values(p.dtype, k_elements(p), 2));
  auto v = testing::upload_values(p.dtype, random_values(p.dtype, v_elements(p), 3));
  auto o = DeviceBuffer::allocate(o_elements(p) * 2);
  FLASHJIT_ASSERT_OK(q.takeError());
  FLASHJIT_ASSERT_OK(k.takeError());
  FLASHJIT_ASSERT_OK(v.takeError());
  FLASHJIT_ASSERT_OK(o.takeError());
  ForwardArgs args = ForwardArgs::packed(p, q->data(), k->data(), v->data(), o->data(), nullptr);
  std::vector<uint16_t> first(o_elements(p)), again(o_elements(p));
  for (int run = 0; run < 5; ++run) {
    FLASHJIT_ASSERT_OK(o->fill_bytes(0xff));
    FLASHJIT_ASSERT_OK(launch_forward(p, args, nullptr, {}));
    FLASHJIT_ASSERT_OK(o->download(run == 0 ? first.data() : again.data(), first.size() * 2));
    if (run) {
      ASSERT_EQ(std::memcmp(first.data(), again.data(), first.size() * 2), 0) << "run " << run;
    }
  }
}

}  // namespace
}  // namespace flashjit
