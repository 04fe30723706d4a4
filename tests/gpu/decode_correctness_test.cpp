// Decode-shaped forward problems (few query rows, long key ranges) on the
// sm90 family with split-KV and packed GQA, against the reference with
// the accuracy criterion of reference/accuracy.h (forward_check.h: strided
// views with NaN gaps, poisoned outputs, untouched gaps). Every case checks first that the spec
// really splits / packs as the case says, so a heuristic change cannot turn
// these into tests of something else.
#include <gtest/gtest.h>

#include "forward_check.h"
#include "generator/fwd_sm90_traits.h"
#include "generator/kernel_spec.h"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit {
namespace {

using testing::Case;
using testing::make_problem;
using testing::run_case;

KernelConfig decode_config(int splits, GqaPacking pack) {
  KernelConfig c;
  c.path = KernelPath::sm90;  // tiles from the heuristic
  c.splits = splits;
  c.pack_gqa = pack;
  return c;
}

struct DecodeCase {
  Case c;
  bool expect_split;  // the spec carries the combine kernel
  int expect_pack;    // packed heads (1: none)
};

std::vector<DecodeCase> decode_cases() {
  std::vector<DecodeCase> cases;
  auto add = [&](Problem p, int splits, GqaPacking pack, bool strided = false) {
    const int64_t ratio = p.heads_q / p.heads_kv;
    const bool packs = pack == GqaPacking::on;
    cases.push_back({{p, decode_config(splits, pack), strided}, splits > 1,
                     packs ? FwdSm90Traits::packed_heads(ratio) : 1});
  };
  // seqlen_q 1..16 and 128 against key lengths from 1 to 8191, GQA ratios
  // 1, 4, 8, 16 and MQA, split counts from 2 to the key tiles, packed and
  // not, both dtypes, the three head dims.
  const int64_t queries[] = {1, 2, 5, 16, 128};
  const int64_t keys[] = {1, 17, 1000, 8191};
  const std::pair<int64_t, int64_t> heads[] = {{8, 8}, {16, 4}, {16, 2}, {32, 2}, {8, 1}};
  int n = 0;
  for (int64_t sq : queries)
    for (int64_t sk : keys)
      for (auto [hq, hkv] : heads) {
        const int d = (int[]){64, 128, 256}[n % 3];
        const DType dtype = n % 2 ? DType::fp16 : DType::bf16;
        const MaskKind mask = n % 4 == 3 ? MaskKind::causal : MaskKind::none;
        const int64_t tiles = (sk + 127) / 128;  // at most: block_n <= 128
        const int splits = tiles >= 2 ? static_cast<int>(1 + n % std::min<int64_t>(tiles, 9)) : 1;
        const bool pack = hq > hkv && sq * (hq / hkv) <= 256 && n % 3 != 1;
        add(make_problem(dtype, 2, hq, hkv, sq, sk, d, d, mask), splits,
            pack ? GqaPacking::on : GqaPacking::off);
        ++n;
      }
  // Split counts at the edges: every key tile its own split, and one less.
  add(make_problem(DType::bf16, 1, 8, 2, 1, 1000, 128, 128, MaskKind::none), 8, GqaPacking::on);
  add(make_problem(DType::bf16, 1, 8, 2, 3, 1000, 128, 128, MaskKind::causal), 7, GqaPacking::on);
  // Windows, softcap, strided views, causal rows that see no key (seqlen_q
  // > seqlen_k), groups that do not divide 64 rows (6 and 12 heads a group).
  add(make_problem(DType::bf16, 2, 16, 4, 9, 3000, 128, 128, MaskKind::window, 700, 0), 5,
      GqaPacking::on);
  add(make_problem(DType::fp16, 2, 16, 4, 4, 3000, 64, 64, MaskKind::window, 100, 20), 6,
      GqaPacking::on);
  add(make_problem(DType::bf16, 2, 16, 2, 1, 5000, 128, 128, MaskKind::none, -1, -1, 30.f), 9,
      GqaPacking::on);
  add(make_problem(DType::fp16, 3, 16, 8, 7, 2000, 256, 256, MaskKind::causal, -1, -1, 5.f), 4,
      GqaPacking::on, true);
  add(make_problem(DType::bf16, 2, 32, 8, 1, 4097, 128, 128, MaskKind::none), 3, GqaPacking::on,
      true);
  add(make_problem(DType::bf16, 1, 8, 2, 40, 20, 128, 128, MaskKind::causal), 1, GqaPacking::on);
  add(make_problem(DType::bf16, 2, 12, 2, 3, 700, 128, 128, MaskKind::causal), 3, GqaPacking::on);
  add(make_problem(DType::fp16, 1, 24, 2, 5, 900, 64, 64, MaskKind::none), 4, GqaPacking::on);
  // Head dims between 64, 128 and 256 (tiled as the next): the split
  // partials and the combine over the problem's columns only.
  add(make_problem(DType::bf16, 2, 32, 8, 1, 3000, 96, 96, MaskKind::none), 4, GqaPacking::on);
  add(make_problem(DType::fp16, 1, 16, 4, 3, 2000, 40, 40, MaskKind::causal), 3, GqaPacking::on);
  add(make_problem(DType::bf16, 1, 16, 2, 1, 1500, 160, 160, MaskKind::none, -1, -1, 30.f), 5,
      GqaPacking::on);
  add(make_problem(DType::fp16, 2, 32, 8, 2, 2500, 192, 192, MaskKind::causal), 3, GqaPacking::on);
  // Unequal head dims (192/128): partials and the combine over V's columns.
  add(make_problem(DType::bf16, 2, 32, 8, 1, 3000, 192, 128, MaskKind::none), 4, GqaPacking::on);
  // MQA with 64 heads on one KV head: a warpgroup holds one position.
  add(make_problem(DType::bf16, 1, 64, 1, 2, 1500, 128, 128, MaskKind::causal), 5,
      GqaPacking::on);
  // Past head dim 256 (two consumer warpgroups per 64 rows): Gemma 4's
  // global layers (8/4 heads, d=512), MLA's 576/512 over one KV head with
  // 64 query heads packed and two speculative positions, partials and the
  // combine over 512 columns.
  add(make_problem(DType::bf16, 2, 8, 4, 1, 3000, 512, 512, MaskKind::none), 4, GqaPacking::on);
  add(make_problem(DType::fp16, 1, 8, 4, 3, 2000, 512, 512, MaskKind::window, 300, 0, 30.f), 5,
      GqaPacking::on);
  add(make_problem(DType::bf16, 1, 64, 1, 2, 1500, 576, 512, MaskKind::causal), 3,
      GqaPacking::on);
  // MLA's 128 query heads on one KV head: packed in two parts of 64 (each
  // tile's KV head is its part's), with and without splits, and a GQA
  // group of 96 (parts of 48) at d=128.
  add(make_problem(DType::bf16, 2, 128, 1, 1, 1300, 576, 512, MaskKind::none), 4, GqaPacking::on);
  add(make_problem(DType::bf16, 1, 128, 1, 2, 700, 576, 512, MaskKind::causal), 1,
      GqaPacking::on);
  add(make_problem(DType::fp16, 1, 192, 2, 1, 1500, 128, 128, MaskKind::none), 3,
      GqaPacking::on);
  // Explicit decode tiles (one consumer warpgroup), split and not, across
  // work tiles of more than one CTA round.
  for (int splits : {1, 4}) {
    KernelConfig c{KernelPath::sm90, 64, 128, 8, 3};
    c.splits = splits;
    c.pack_gqa = GqaPacking::on;
    cases.push_back({{make_problem(DType::bf16, 2, 32, 8, 3, 3000, 128, 128, MaskKind::causal), c},
                     splits > 1, 4});
    c.block_n = 64;
    c.stages = 2;
    cases.push_back({{make_problem(DType::fp16, 40, 32, 8, 1, 777, 128, 128, MaskKind::none), c},
                     splits > 1, 4});
  }
  // Long keys: the fp32 GPU reference; the heuristic's split count.
  add(make_problem(DType::bf16, 1, 32, 8, 1, 131072, 128, 128, MaskKind::none), 0,
      GqaPacking::automatic);
  add(make_problem(DType::bf16, 2, 32, 8, 4, 32768, 128, 128, MaskKind::causal), 0,
      GqaPacking::automatic);
  add(make_problem(DType::fp16, 1, 16, 16, 1, 65536, 64, 64, MaskKind::none), 0,
      GqaPacking::automatic);
  add(make_problem(DType::bf16, 1, 8, 1, 1, 50000, 256, 256, MaskKind::none), 0,
      GqaPacking::automatic);
  return cases;
}

class DecodeCorrectness : public ::testing::TestWithParam<DecodeCase> {};

TEST_P(DecodeCorrectness, MatchesReference) {
  FLASHJIT_REQUIRE_SM90();
  const DecodeCase &dc = GetParam();
  auto spec = resolve_forward_spec(dc.c.problem, dc.c.config);
  FLASHJIT_ASSERT_OK(spec.takeError());
  ASSERT_EQ(spec->config.path, KernelPath::sm90) << spec->id();
  if (dc.c.config.splits != 0) {
    EXPECT_EQ(spec->split_kv, dc.expect_split) << spec->id();
  }
  if (dc.c.config.pack_gqa != GqaPacking::automatic) {
    EXPECT_EQ(spec->pack_gqa, dc.expect_pack) << spec->id();
  }
  run_case(dc.c, 777);
}

std::string decode_case_name(const ::testing::TestParamInfo<DecodeCase> &info) {
  return "case" + std::to_string(info.index);
}

INSTANTIATE_TEST_SUITE_P(Decode, DecodeCorrectness, ::testing::ValuesIn(decode_cases()),
                         decode_case_name);

// The heuristic splits and packs a Llama-3-8B decode step by itself.
TEST(DecodeHeuristic, SplitsAndPacksLlamaDecode) {
  FLASHJIT_REQUIRE_SM90();
  Problem p = make_problem(DType::bf16, 1, 32, 8, 1, 8192, 128, 128, MaskKind::none);
  auto spec = resolve_forward_spec(p, {});
  FLASHJIT_ASSERT_OK(spec.takeError());
  EXPECT_EQ(spec->pack_gqa, 4) << spec->id();
  EXPECT_TRUE(spec->split_kv) << spec->id();
  EXPECT_EQ(spec->config.block_m, 64) << spec->id();
}

// The sm80 family's split-KV (no packing there): split counts from 2 to the
// key tiles, masks, softcap, GQA, both dtypes, head dims off the sm90 set.
TEST(DecodeSm80, SplitKvMatchesReference) {
  FLASHJIT_REQUIRE_GPU();
  struct Sm80Case {
    Problem problem;
    int splits;
  };
  const Sm80Case cases[] = {
      {make_problem(DType::bf16, 2, 32, 8, 1, 8191, 128, 128, MaskKind::none), 8},
      {make_problem(DType::fp16, 1, 16, 2, 5, 3000, 96, 96, MaskKind::causal), 5},
      {make_problem(DType::bf16, 3, 8, 8, 16, 1000, 64, 64, MaskKind::window, 200, 0), 3},
      {make_problem(DType::bf16, 1, 8, 1, 1, 700, 256, 256, MaskKind::none, -1, -1, 20.f), 11},
      {make_problem(DType::fp16, 2, 12, 4, 128, 2000, 72, 72, MaskKind::causal), 2},
  };
  for (const Sm80Case &c : cases) {
    KernelConfig config{KernelPath::sm80, 64, 64, 4, 2};
    config.splits = c.splits;
    config.pack_gqa = GqaPacking::off;
    auto spec = resolve_forward_spec(c.problem, config);
    FLASHJIT_ASSERT_OK(spec.takeError());
    EXPECT_TRUE(spec->split_kv) << spec->id();
    run_case({c.problem, config}, 91);
  }
}

// Small split and packed shapes for compute-sanitizer: --gtest_filter='Sm90Sanitizer*'.
TEST(Sm90SanitizerDecode, SplitAndPackedShapes) {
  FLASHJIT_REQUIRE_SM90();
  run_case({make_problem(DType::bf16, 2, 8, 2, 1, 700, 128, 128, MaskKind::none),
            decode_config(4, GqaPacking::on)},
           55);
  run_case({make_problem(DType::bf16, 2, 12, 2, 5, 500, 64, 64, MaskKind::causal),
            decode_config(3, GqaPacking::on)},
           56);
  run_case({make_problem(DType::bf16, 1, 4, 4, 3, 300, 256, 256, MaskKind::causal),
            decode_config(2, GqaPacking::off)},
           57);
}

}  // namespace
}  // namespace flashjit
