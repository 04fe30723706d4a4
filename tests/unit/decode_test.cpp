// Split-KV and packed GQA without a GPU: the heuristic's choices, config
// validation and its messages, the layout arithmetic host and kernel share,
// the generated program, the split merge against float64, and NVRTC
// compiles of the decode kernels for sm_90a with no spills.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "generator/fwd_sm90_traits.h"
#include "generator/heuristic.h"
#include "generator/kernel_spec.h"
#include "generator/source.h"
#include "llvm/Support/ThreadPool.h"
#include "sm90_compile_check.h"
#include "templates/common/split_merge.cuh"

namespace flashjit {
namespace {

const TargetArch kSm90a{9, 0, true};
const TargetArch kSm80{8, 0, false};

Problem decode_problem(int64_t batch, int64_t heads_q, int64_t heads_kv, int64_t seqlen_q,
                       int64_t seqlen_k, int d = 128) {
  Problem p;
  p.batch = batch;
  p.heads_q = heads_q;
  p.heads_kv = heads_kv;
  p.seqlen_q = seqlen_q;
  p.seqlen_k = seqlen_k;
  p.head_dim_qk = p.head_dim_v = d;
  return p;
}

std::string error_of(llvm::Expected<KernelSpec> spec) {
  if (spec) return "";
  return llvm::toString(spec.takeError());
}

// ---- the heuristic ---------------------------------------------------------------

TEST(DecodeHeuristic, LlamaDecodePacksSplitsAndTakesOneWarpgroup) {
  // 1 x 8k, 32/8 heads: 8 packed work tiles on 132 SMs.
  const Problem p = decode_problem(1, 32, 8, 1, 8192);
  const KernelConfig c = default_forward_config(p, kSm90a, 0, {}, 132);
  EXPECT_EQ(c.path, KernelPath::sm90);
  EXPECT_EQ(c.block_m, 64);
  EXPECT_EQ(c.block_n, 64);
  EXPECT_EQ(c.stages, 2);
  EXPECT_EQ(c.warps, 8);
  EXPECT_EQ(c.pack_gqa, GqaPacking::on);
  // 128 key tiles over 8 x 16 = 128 CTAs, 8 tiles each (15 splits leave
  // one CTA 9; 32 need two waves).
  EXPECT_EQ(c.splits, 16);
}

TEST(DecodeHeuristic, SplitsOnlyWhenTheWorkTilesLeaveSmsIdle) {
  KernelConfig c{KernelPath::sm90, 64, 128, 8, 3};
  c.pack_gqa = GqaPacking::on;
  // 64 x 8 = 512 work tiles, 16 x 8 = 128 (97% of 132): no split.
  EXPECT_EQ(forward_splits_heuristic(decode_problem(64, 32, 8, 1, 4096), c, 132), 1);
  EXPECT_EQ(forward_splits_heuristic(decode_problem(16, 32, 8, 1, 32768), c, 132), 1);
  // 8 x 8 = 64 tiles: 2 splits fill 128.
  EXPECT_EQ(forward_splits_heuristic(decode_problem(8, 32, 8, 1, 8192), c, 132), 2);
  // Never more splits than key tiles: 3 keys tiles of 128.
  EXPECT_EQ(forward_splits_heuristic(decode_problem(1, 32, 8, 1, 300), c, 132), 3);
  // Training shapes fill the SMs: never split, whatever the last wave
  // leaves idle (2 x 16 heads x 43 blocks of 192 rows at d = 64: 1376 tiles).
  KernelConfig d64{KernelPath::sm90, 192, 112, 16, 3};
  d64.pack_gqa = GqaPacking::off;
  EXPECT_EQ(forward_splits_heuristic(decode_problem(2, 16, 16, 8192, 8192), d64, 132), 1);
  // 48 tiles (1 x 8 heads x 6 blocks) leave SMs idle: 2 splits of 5 key
  // tiles fill 96 in one wave.
  EXPECT_EQ(forward_splits_heuristic(decode_problem(1, 8, 8, 1024, 1024), d64, 132), 2);
  // The sm80 family splits the same way: 32 unpacked work tiles, 4 splits
  // fill 128 of 132 SMs.
  KernelConfig sm80{KernelPath::sm80, 128, 64, 4, 2};
  EXPECT_EQ(forward_splits_heuristic(decode_problem(1, 32, 8, 1, 8192), sm80, 132), 4);
  // Unknown SM count: an H100/H200's 132.
  EXPECT_EQ(forward_splits_heuristic(decode_problem(1, 32, 8, 1, 8192), c, 0), 16);
  // A GPU of 108 SMs: 8 x 13 = 104 CTAs, 5 of the 64 key tiles each.
  EXPECT_EQ(forward_splits_heuristic(decode_problem(1, 32, 8, 1, 8192), c, 108), 13);
  // 2 x 8 = 16 work tiles: 8 splits fill 128 SMs with 8 key tiles each.
  EXPECT_EQ(forward_splits_heuristic(decode_problem(2, 32, 8, 1, 8192), c, 132), 8);
}

TEST(DecodeHeuristic, PacksWhenItFillsTheTiles) {
  EXPECT_TRUE(pack_gqa_pays(decode_problem(1, 32, 8, 1, 100)));
  EXPECT_TRUE(pack_gqa_pays(decode_problem(1, 32, 8, 16, 100)));
  EXPECT_FALSE(pack_gqa_pays(decode_problem(1, 32, 8, 128, 100)));  // tiles full already
  EXPECT_FALSE(pack_gqa_pays(decode_problem(1, 32, 32, 1, 100)));   // no group
  // A group wider than 64 rows packs in parts that divide it (MLA's 128
  // heads: two of 64); a prime group past 64 has none.
  EXPECT_TRUE(pack_gqa_pays(decode_problem(1, 128, 1, 1, 100)));
  EXPECT_FALSE(pack_gqa_pays(decode_problem(1, 67, 1, 1, 100)));
  EXPECT_EQ(FwdSm90Traits::packed_heads(128), 64);
  EXPECT_EQ(FwdSm90Traits::packed_heads(96), 48);
  EXPECT_EQ(FwdSm90Traits::packed_heads(8), 8);
  EXPECT_EQ(FwdSm90Traits::packed_heads(67), 1);
  EXPECT_TRUE(pack_gqa_pays(decode_problem(1, 64, 1, 1, 100)));
  // The serving call packs whatever its longest chunk: its decode steps
  // would otherwise read their cache once per query head.
  Problem serving = decode_problem(4, 32, 8, 2048, 4096);
  serving.varlen = true;
  serving.page_size = 64;
  EXPECT_TRUE(pack_gqa_pays(serving));
  serving.heads_kv = 32;
  EXPECT_FALSE(pack_gqa_pays(serving));  // no group
}

TEST(DecodeHeuristic, TrainingShapesKeepTheirConfigs) {
  const Problem p = decode_problem(2, 16, 16, 8192, 8192);
  const KernelConfig c = default_forward_config(p, kSm90a, 0, {}, 132);
  EXPECT_EQ(c.block_m, 128);
  EXPECT_EQ(c.splits, 1);
  EXPECT_EQ(c.pack_gqa, GqaPacking::off);
  auto spec = make_forward_spec(p, c, kSm90a);
  ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
  EXPECT_FALSE(spec->split_kv);
  EXPECT_EQ(spec->pack_gqa, 1);
  EXPECT_EQ(spec->id(), "fwd_sm90_bf16_hdqk128_hdv128_none_nocap_bm128_bn160_w12_s2_sm_90a");
}

// ---- validation ------------------------------------------------------------------

TEST(DecodeValidation, ExplainsEveryRefusal) {
  const Problem p = decode_problem(1, 32, 8, 1, 1000);
  KernelConfig c{KernelPath::sm90, 64, 128, 8, 3};
  c.splits = 300;
  EXPECT_EQ(error_of(make_forward_spec(p, c, kSm90a)),
            "splits=300 is out of range: expected 0 (heuristic), 1 (off) or up to 256");
  c.splits = 9;  // 1000 keys are 8 tiles of 128
  EXPECT_EQ(error_of(make_forward_spec(p, c, kSm90a)),
            "splits=9 exceeds the 8 key tiles of block_n=128 keys (seqlen_k=1000): each split "
            "needs at least one; use splits <= 8");
  c.splits = 8;
  EXPECT_EQ(error_of(make_forward_spec(p, c, kSm90a)), "");
  // Work tiles beyond 32 bits: 65535 batches x 512 heads x 256 splits.
  c.splits = 256;
  EXPECT_NE(error_of(make_forward_spec(decode_problem(65535, 512, 512, 1, 32768), c, kSm90a))
                .find("work tiles (query blocks x splits x heads x batch), more than"),
            std::string::npos);

  // The sm80 family splits too (it has the combine kernel), but does not pack.
  KernelConfig sm80{KernelPath::sm80, 128, 64, 4, 2};
  sm80.splits = 4;
  auto split80 = make_forward_spec(p, sm80, kSm80);
  ASSERT_TRUE(bool(split80)) << llvm::toString(split80.takeError());
  EXPECT_TRUE(split80->split_kv);
  EXPECT_EQ(generate_forward(*split80).entries,
            (std::vector<std::string>{"flashjit_fwd_sm80", "flashjit_fwd_combine"}));
  sm80.splits = 1;
  sm80.pack_gqa = GqaPacking::on;
  EXPECT_EQ(error_of(make_forward_spec(p, sm80, kSm80)),
            "pack_gqa=on: GQA packing is implemented in the sm90 family only; use pack_gqa=off "
            "(or auto) with the sm80 family");

  KernelConfig packed{KernelPath::sm90, 64, 128, 8, 3};
  packed.pack_gqa = GqaPacking::on;
  EXPECT_EQ(error_of(make_forward_spec(decode_problem(1, 67, 1, 1, 1000), packed, kSm90a)),
            "pack_gqa=on with heads_q/heads_kv=67: at most 64 query heads pack into a tile's "
            "64-row warpgroup, a part of the group that divides it (none does); use pack_gqa=off");
  auto parts = make_forward_spec(decode_problem(1, 128, 1, 1, 1000), packed, kSm90a);
  ASSERT_TRUE(bool(parts)) << llvm::toString(parts.takeError());
  EXPECT_EQ(parts->pack_gqa, 64);
  EXPECT_EQ(error_of(make_forward_spec(decode_problem(1, 64, 1, 1, 1000), packed, kSm90a)), "");

  // block_m 64 is one consumer warpgroup: 8 warps.
  KernelConfig wrong_warps{KernelPath::sm90, 64, 128, 12, 3};
  EXPECT_NE(error_of(make_forward_spec(p, wrong_warps, kSm90a)).find("warps=12 is not 8"),
            std::string::npos);
}

// ---- layout and launch -------------------------------------------------------------

TEST(DecodeLayout, HostTwinComputesTheKernelsLayout) {
  // By hand: d=128, 64 rows: Q 16 KiB, a K or V tile of 128 keys 32 KiB;
  // 3 stages and two Q buffers: 32 + 192 KiB + 16 barriers of 8 bytes + 2
  // tile slots of 8 + 1024 of alignment slack.
  const FwdSm90Traits t{128, 64, 128, 8, 3, 4};
  EXPECT_EQ(t.q_stages(), 2);
  EXPECT_EQ(t.smem_bytes(), 2 * 16384 + 6 * 32768 + 8 * (2 * 2 + 4 * 3) + 8 * 2 + 1024);
  EXPECT_EQ(t.layout().offset_tile_slots(), 2 * 16384 + 6 * 32768 + 8 * (2 * 2 + 4 * 3));
  const FwdSm90Layout l = t.layout();
  EXPECT_EQ(l.q_rows_per_warpgroup(), 16);  // 64 rows / 4 heads
  EXPECT_EQ(l.q_loaded_bytes(), 2 * 64 * 128);
  // A group of 6 heads fills 60 of the 64 rows: 10 positions.
  const FwdSm90Layout six{128, 128, 128, 2, 6};
  EXPECT_EQ(six.q_rows_per_warpgroup(), 10);
  EXPECT_EQ(six.loaded_rows_per_warpgroup(), 60);
  EXPECT_EQ(six.q_rows_per_tile(), 20);
  EXPECT_EQ(six.q_loaded_bytes(), 2 * 2 * 60 * 128);
  // The training tile is what it was: 128 x 128, 2 stages at d=128.
  EXPECT_EQ((FwdSm90Traits{128, 128, 128, 12, 2}.smem_bytes()),
            2 * 32768 + 4 * 32768 + 8 * (2 * 2 + 4 * 2) + 8 * 2 + 1024);
}

TEST(DecodeLayout, GridCountsSplitsAndPackedHeads) {
  const Problem p = decode_problem(2, 32, 8, 3, 4096);
  KernelConfig c{KernelPath::sm90, 64, 128, 8, 3};
  c.pack_gqa = GqaPacking::on;
  c.splits = 5;
  auto spec = make_forward_spec(p, c, kSm90a);
  ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
  EXPECT_EQ(spec->id(), "fwd_sm90_bf16_hdqk128_hdv128_none_nocap_bm64_bn128_w8_s3_gqa4_split_sm_90a");
  // 1 query block (3 positions x 4 heads <= 64 rows) x 5 splits x 8 KV
  // heads x 2 batches; persistent without a mask at 132 SMs: 80 CTAs.
  EXPECT_EQ(forward_launch_geometry(*spec, p, 0, 5).grid.x, 80u);
  EXPECT_EQ(forward_launch_geometry(*spec, p, 132, 5).grid.x, 80u);
  EXPECT_EQ(forward_launch_geometry(*spec, p, 40, 5).grid.x, 40u);
  EXPECT_EQ(forward_num_splits(*spec, p, 5, 132), 5);
  EXPECT_EQ(forward_num_splits(*spec, p, 100, 132), 32);  // clamped to the key tiles
  EXPECT_EQ(forward_split_workspace_bytes(p, 5), 5ull * 2 * 32 * 3 * (128 + 1) * 4);
  EXPECT_EQ(forward_split_workspace_bytes(p, 1), 0u);
  // The combine kernel: one warp per row, 8 per CTA.
  EXPECT_EQ(forward_combine_geometry(p).grid.x, (2u * 32 * 3 + 7) / 8);
  EXPECT_EQ(forward_combine_geometry(p).block.x, 256u);
}

TEST(DecodeSource, PreludeAndEntriesNameThePartsUsed) {
  const Problem p = decode_problem(1, 32, 8, 1, 4096);
  KernelConfig c{KernelPath::sm90, 64, 128, 8, 3};
  c.pack_gqa = GqaPacking::on;
  c.splits = 4;
  auto spec = make_forward_spec(p, c, kSm90a);
  ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
  const GeneratedSource src = generate_forward(*spec);
  EXPECT_NE(src.source.find("constexpr int kPackGqa = 4;\n"), std::string::npos);
  EXPECT_NE(src.source.find("constexpr bool kSplitKv = true;\n"), std::string::npos);
  EXPECT_NE(src.source.find("#include \"fwd_combine.cuh\"\n"), std::string::npos);
  EXPECT_EQ(src.entries, (std::vector<std::string>{"flashjit_fwd_sm90", "flashjit_fwd_combine"}));
  c.splits = 1;
  auto unsplit = make_forward_spec(p, c, kSm90a);
  ASSERT_TRUE(bool(unsplit));
  EXPECT_EQ(generate_forward(*unsplit).entries, (std::vector<std::string>{"flashjit_fwd_sm90"}));
}

// ---- the split merge against float64 ---------------------------------------------------

// Merges `lse` / `o` (splits x dim) the way fwd_combine.cuh does, in fp32.
void merge(const std::vector<float> &lse, const std::vector<std::vector<float>> &o, int dim,
           float *out_lse, std::vector<float> *out) {
  float m = -std::numeric_limits<float>::infinity();
  for (float l : lse) m = std::max(m, l);
  float sum = 0.f;
  for (float l : lse) sum += split_merge::sum_term(l, m);
  *out_lse = split_merge::merged_lse(m, sum);
  out->assign(dim, 0.f);
  if (m == -std::numeric_limits<float>::infinity()) return;
  for (size_t s = 0; s < lse.size(); ++s) {
    const float w = split_merge::weight(lse[s], *out_lse);
    for (int d = 0; d < dim; ++d) (*out)[d] += w * o[s][d];
  }
}

TEST(SplitMerge, MatchesFloat64AttentionOverTheWholeRow) {
  std::mt19937 rng(7);
  std::normal_distribution<double> normal(0.0, 1.0);
  constexpr int kDim = 16;
  for (int keys : {1, 5, 64, 1000})
    for (int splits : {1, 2, 3, 7, 40}) {
      SCOPED_TRACE(std::to_string(keys) + " keys, " + std::to_string(splits) + " splits");
      std::vector<double> score(keys);
      std::vector<std::vector<double>> value(keys, std::vector<double>(kDim));
      for (int j = 0; j < keys; ++j) {
        score[j] = 3 * normal(rng);
        for (double &x : value[j]) x = normal(rng);
      }
      // The whole row in float64.
      double max = -INFINITY, sum = 0;
      for (double s : score) max = std::max(max, s);
      for (double s : score) sum += std::exp(s - max);
      const double lse = max + std::log(sum);
      std::vector<double> exact(kDim, 0.0);
      for (int j = 0; j < keys; ++j)
        for (int d = 0; d < kDim; ++d) exact[d] += std::exp(score[j] - lse) * value[j][d];
      // Each split's partial as a kernel writes it (fp32; -inf and zeros when
      // it sees no key), contiguous shares as the scheduler cuts them.
      const int per = (keys + splits - 1) / splits;
      std::vector<float> part_lse(splits);
      std::vector<std::vector<float>> part_o(splits, std::vector<float>(kDim, 0.f));
      for (int s = 0; s < splits; ++s) {
        const int begin = std::min(keys, s * per), end = std::min(keys, begin + per);
        if (begin == end) {
          part_lse[s] = -std::numeric_limits<float>::infinity();
          continue;
        }
        double m = -INFINITY, z = 0;
        for (int j = begin; j < end; ++j) m = std::max(m, score[j]);
        for (int j = begin; j < end; ++j) z += std::exp(score[j] - m);
        part_lse[s] = static_cast<float>(m + std::log(z));
        for (int j = begin; j < end; ++j)
          for (int d = 0; d < kDim; ++d)
            part_o[s][d] += static_cast<float>(std::exp(score[j] - m) / z * value[j][d]);
      }
      float got_lse;
      std::vector<float> got;
      merge(part_lse, part_o, kDim, &got_lse, &got);
      EXPECT_NEAR(got_lse, lse, 1e-5 * std::max(1.0, std::abs(lse)));
      for (int d = 0; d < kDim; ++d) EXPECT_NEAR(got[d], exact[d], 2e-5) << "column " << d;
    }
}

TEST(SplitMerge, RowThatNoSplitSawIsZeroWithInfiniteLse) {
  const float inf = std::numeric_limits<float>::infinity();
  float lse;
  std::vector<float> out;
  merge({-inf, -inf, -inf}, {{1.f, 2.f}, {3.f, 4.f}, {5.f, 6.f}}, 2, &lse, &out);
  EXPECT_EQ(lse, inf);
  EXPECT_EQ(out, (std::vector<float>{0.f, 0.f}));
  // An empty split beside a full one weighs nothing.
  merge({-inf, 0.5f}, {{100.f, 100.f}, {3.f, 4.f}}, 2, &lse, &out);
  EXPECT_FLOAT_EQ(lse, 0.5f);
  EXPECT_FLOAT_EQ(out[0], 3.f);
  EXPECT_FLOAT_EQ(out[1], 4.f);
}

// ---- NVRTC ---------------------------------------------------------------------------

TEST(DecodeCompile, SplitAndPackedKernelsCompileWithoutSpills) {
  struct Variant {
    int d;
    int64_t heads_q, heads_kv;
    MaskKind mask;
    float softcap;
    int block_m, block_n, stages, splits;
    GqaPacking pack;
  };
  const Variant variants[] = {
      {64, 32, 8, MaskKind::none, 0.f, 64, 128, 4, 4, GqaPacking::on},
      {128, 32, 8, MaskKind::causal, 0.f, 64, 128, 3, 4, GqaPacking::on},
      {128, 48, 8, MaskKind::window, 30.f, 64, 112, 3, 4, GqaPacking::on},   // 6 a group
      {256, 32, 2, MaskKind::causal, 30.f, 64, 80, 2, 4, GqaPacking::on},   // 16 a group
      {128, 64, 1, MaskKind::none, 0.f, 64, 128, 3, 2, GqaPacking::on},     // 64 a group
      {128, 16, 16, MaskKind::causal, 0.f, 128, 128, 2, 3, GqaPacking::off},
      {64, 32, 4, MaskKind::window, 0.f, 192, 112, 3, 2, GqaPacking::on},
      {256, 8, 8, MaskKind::none, 0.f, 128, 80, 2, 2, GqaPacking::off},
  };
  const auto compiled = testing::compile_forward_variants(
      std::size(variants),
      [&](size_t i) {
        const Variant &v = variants[i];
        Problem p = decode_problem(2, v.heads_q, v.heads_kv, 1, 4096, v.d);
        p.mask = v.mask;
        p.window_left = 100;
        p.window_right = 0;
        p.softcap = v.softcap;
        KernelConfig c{KernelPath::sm90, v.block_m, v.block_n,
                       FwdSm90Traits::warps_for(v.block_m), v.stages};
        c.splits = v.splits;
        c.pack_gqa = v.pack;
        return make_forward_spec(p, c, kSm90a);
      },
      kSm90a);
  // Both entries are in the cubin.
  for (const testing::CompiledVariant &v : compiled)
    testing::expect_clean(v, {"flashjit_fwd_sm90", "flashjit_fwd_combine"});
}

}  // namespace
}  // namespace flashjit
