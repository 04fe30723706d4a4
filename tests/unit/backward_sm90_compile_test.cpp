// The sm90 backward (templates/bwd_sm90.cuh) compiles through NVRTC for
// sm_90a for every config it claims, with its wgmmas asynchronous (ptxas did
// not serialise them) and at most a few spilled registers; the host traits
// and the spec refuse what the kernel cannot serve, saying why.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "cli/ptxas_report.h"
#include "generator/backward_params.h"
#include "generator/backward_spec.h"
#include "generator/bwd_sm90_traits.h"
#include "generator/heuristic.h"
#include "generator/source.h"
#include "llvm/Support/ThreadPool.h"
#include "runtime/nvrtc_compiler.h"
#include "sm90_compile_check.h"

namespace flashjit {
namespace {

const TargetArch kSm80{8, 0, false}, kSm90a{9, 0, true};

struct Compiled {
  std::string id, error;
  cli::PtxasReport report;
};

Compiled compile(const Problem &problem, const KernelConfig &config) {
  Compiled r;
  auto spec = make_backward_spec(problem, config, kSm90a);
  if (!spec) {
    r.error = llvm::toString(spec.takeError());
    return r;
  }
  r.id = spec->id();
  testing::Sm90Compiled c = testing::compile_sm90_with_report(generate_backward(*spec), kSm90a,
                                                              testing::find_cuobjdump());
  r.error = std::move(c.error);
  r.report = c.report;
  return r;
}

TEST(BackwardSm90Compile, EveryClaimedConfigCompiles) {
  struct Case {
    Problem problem;
    KernelConfig config;
  };
  std::vector<Case> cases;
  int i = 0;
  for (int d : {64, 128, 256})
    for (const KernelConfig &c : BwdSm90Traits::search_space(d, d, max_smem_per_block(kSm90a)))
      for (MaskKind mask : {MaskKind::none, MaskKind::causal, MaskKind::window})
        for (bool softcap : {false, true}) {
          Problem p;
          p.head_dim_qk = p.head_dim_v = d;
          p.dtype = i++ % 2 ? DType::fp16 : DType::bf16;
          p.mask = mask;
          p.window_left = 100;
          p.window_right = 3;
          p.softcap = softcap ? 30.f : 0.f;
          cases.push_back({p, c});
        }
  // d=64: two query tiles; d=256: two stages.
  ASSERT_EQ(cases.size(), (6u + 3 + 2) * 3 * 2);
  // The 64-byte-swizzled tiles (32 and 192 wide; CI's time): every config
  // under the costliest mask, a window with the softcap's tanh live.
  for (int d : {32, 192})
    for (const KernelConfig &c : BwdSm90Traits::search_space(d, d, max_smem_per_block(kSm90a))) {
      Problem p;
      p.head_dim_qk = p.head_dim_v = d;
      p.dtype = i++ % 2 ? DType::fp16 : DType::bf16;
      p.mask = MaskKind::window;
      p.window_left = 100;
      p.window_right = 3;
      p.softcap = 30.f;
      cases.push_back({p, c});
    }
  // d=32: two query tiles x three stages; d=192: three stages.
  ASSERT_EQ(cases.size(), (6u + 3 + 2) * 3 * 2 + 6 + 3);
  // Head dims between 64, 128 and 256 (tiled as the next; dK, dV and dQ cut
  // at the problem's columns), causal with softcap, their default tiles.
  for (int d : {32, 40, 72, 96, 160, 200}) {
    Problem p;
    p.head_dim_qk = p.head_dim_v = d;
    p.mask = MaskKind::causal;
    p.softcap = 30.f;
    cases.push_back({p, BwdSm90Traits::default_config(d, d)});
  }
  // Unequal head dims (Q/K tiled apart from V/dO): DeepSeek-V3's 192/128
  // (the split over 64-byte swizzle rows, dV's halves two rows each), each
  // side wider, 192 beside 256, and both below 256.
  for (auto [dq, dv] : {std::pair{192, 128}, {128, 192}, {256, 128}, {256, 192}, {192, 256},
                        {176, 104}, {64, 128}, {128, 64}, {96, 40}}) {
    Problem p;
    p.head_dim_qk = dq;
    p.head_dim_v = dv;
    p.mask = MaskKind::causal;
    p.softcap = dq == 192 ? 30.f : 0.f;
    cases.push_back({p, BwdSm90Traits::default_config(dq, dv)});
  }
  // The deterministic mode (dQ's reduce-adds in key-block order, staged dQ
  // only): every tiling that stages dQ, masks, softcap.
  for (auto [dq, dv, mask] : {std::tuple{64, 64, MaskKind::causal},
                              {128, 128, MaskKind::none},
                              {96, 96, MaskKind::window},
                              {192, 128, MaskKind::causal},
                              {256, 256, MaskKind::causal}}) {
    Problem p;
    p.head_dim_qk = dq;
    p.head_dim_v = dv;
    p.mask = mask;
    p.window_left = 100;
    p.window_right = 3;
    p.softcap = dq == 96 ? 30.f : 0.f;
    KernelConfig c = BwdSm90Traits::default_config(dq, dv);
    c.deterministic = true;
    cases.push_back({p, c});
  }
  std::vector<Compiled> results(cases.size());
  {
    llvm::ThreadPool pool(llvm::hardware_concurrency());
    for (size_t j = 0; j < cases.size(); ++j)
      pool.async([&, j] { results[j] = compile(cases[j].problem, cases[j].config); });
    pool.wait();
  }
  for (size_t j = 0; j < cases.size(); ++j) {
    const Compiled &r = results[j];
    SCOPED_TRACE(describe(cases[j].problem) + " | " + describe(cases[j].config) + " " + r.id);
    EXPECT_EQ(r.error, "");
    // Known spills (ptxas -v): up to 20 bytes in a few configs, up to 128
    // with the softcap's tanh live next to the tiles, up to 256 at d=64 with
    // 128-query tiles (64-wide S^T and dP^T: measured faster than 64-query
    // tiles all the same), and at d=256 (2026-11-30) up to 24 bytes with one
    // Q/dO stage and 72 with two. More means a change grew the tiles. Beyond
    // those, the resident loop's (testing::kResidentLoopSpillBytes).
    const int tiled =
        BwdSm90Traits::widest_tile(cases[j].problem.head_dim_qk, cases[j].problem.head_dim_v);
    const bool wide = tiled <= 64 && cases[j].config.block_m == 128;
    const bool split = tiled >= 192;
    const bool two_pass = split && cases[j].config.block_n == 128;  // 192/128, 128 keys
    const int allowed = (two_pass                        ? BwdSm90Traits::kTwoPassSpillBytes
                         : wide                          ? 256
                         : cases[j].problem.softcap > 0 ? 128
                         : split                         ? 80
                                                         : 24) +
                        testing::kResidentLoopSpillBytes;
    EXPECT_LE(r.report.spill_store_bytes, allowed);
    EXPECT_LE(r.report.spill_load_bytes, allowed);
  }
}

// Every pair of tile classes (32, 64, 96, 128, 192, 256 for Q/K and for
// V/dO, at head dims between them): what the host serves compiles with the
// default tiles, what it refuses is a narrow tile beside the head-dim split
// (a 96 there is tiled as 128: its halves would not be whole swizzle rows).
TEST(BackwardSm90Compile, EveryTilePairTheHostServesCompiles) {
  const int dims[] = {32, 56, 88, 120, 176, 248};
  std::vector<Problem> served;
  for (int dq : dims)
    for (int dv : dims) {
      const std::string why = BwdSm90Traits::unsupported_reason(dq, dv);
      const bool narrow_beside_split = std::min(dq, dv) <= 64 && std::max(dq, dv) > 128;
      EXPECT_EQ(why.empty(), !narrow_beside_split) << dq << "/" << dv << ": " << why;
      if (!why.empty()) continue;
      Problem p;
      p.head_dim_qk = dq;
      p.head_dim_v = dv;
      p.mask = MaskKind::causal;
      served.push_back(p);
    }
  ASSERT_EQ(served.size(), 28u);
  std::vector<Compiled> results(served.size());
  {
    llvm::ThreadPool pool(llvm::hardware_concurrency());
    for (size_t j = 0; j < served.size(); ++j)
      pool.async([&, j] {
        results[j] = compile(served[j], BwdSm90Traits::default_config(served[j].head_dim_qk,
                                                                      served[j].head_dim_v));
      });
    pool.wait();
  }
  for (size_t j = 0; j < served.size(); ++j) {
    SCOPED_TRACE(describe(served[j]) + " " + results[j].id);
    EXPECT_EQ(results[j].error, "");
    // 128 keys a CTA at 192/128 (here 176/120): its two passes' scalars.
    const bool two_pass = BwdSm90Traits::widest_tile(served[j].head_dim_qk,
                                                     served[j].head_dim_v) >= 192 &&
                          BwdSm90Traits::default_config(served[j].head_dim_qk,
                                                        served[j].head_dim_v)
                                  .block_n == 128;
    EXPECT_LE(results[j].report.spill_store_bytes,
              (two_pass ? BwdSm90Traits::kTwoPassSpillBytes : 32) +
                  testing::kResidentLoopSpillBytes);
  }
}

// Why make_backward_spec refuses (empty: it does not).
std::string refusal(const Problem &problem, const KernelConfig &config, const TargetArch &arch) {
  auto spec = make_backward_spec(problem, config, arch);
  return spec ? std::string() : llvm::toString(spec.takeError());
}

TEST(BackwardSm90Spec, ChoosesAndRefuses) {
  Problem p;
  p.head_dim_qk = p.head_dim_v = 128;
  // Asked for by path: the family's tiles.
  const KernelConfig c = default_backward_config(p, kSm90a, 0, KernelConfig{KernelPath::sm90});
  EXPECT_EQ(c, (KernelConfig{KernelPath::sm90, 64, 128, 12, 2}));
  auto spec = make_backward_spec(p, c, kSm90a);
  ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
  EXPECT_EQ(spec->id(), "bwd_sm90_bf16_hdqk128_hdv128_none_nocap_bm64_bn128_w12_s2_sm_90a");
  const GeneratedSource source = generate_backward(*spec);
  EXPECT_EQ(source.entry, "flashjit_bwd_sm90");
  EXPECT_EQ(source.entries,
            (std::vector<std::string>{"flashjit_bwd_sm90", "flashjit_bwd_preprocess",
                                      "flashjit_bwd_convert_dq"}));
  EXPECT_NE(source.source.find("#include \"bwd_sm90.cuh\""), std::string::npos);
  p.head_dim_qk = p.head_dim_v = 64;
  EXPECT_EQ(default_backward_config(p, kSm90a, 0, KernelConfig{KernelPath::sm90}),
            (KernelConfig{KernelPath::sm90, 128, 128, 12, 2}));

  // d=256: 64 keys shared by the two consumer warpgroups (head dim split).
  Problem wide;
  wide.head_dim_qk = wide.head_dim_v = 256;
  EXPECT_EQ(default_backward_config(wide, kSm90a, 0, KernelConfig{KernelPath::sm90}),
            (KernelConfig{KernelPath::sm90, 64, 64, 12, 1}));
  EXPECT_EQ(refusal(wide, {KernelPath::sm90, 64, 128, 12, 1}, kSm90a),
            "sm90 backward config (block_m=64 block_n=128 warps=12 stages=1, d=256 dv=256) is "
            "invalid: block_n=128 is not 64 at head dim 256 (64 keys shared by two consumer "
            "warpgroups)");

  // What it cannot serve: with the path left automatic the heuristic takes
  // the sm80 family; named, whole or partial, sm90 is refused with the
  // reason (never an sm80 kernel in its place).
  Problem odd;
  odd.head_dim_qk = odd.head_dim_v = 24;
  EXPECT_EQ(default_backward_config(odd, kSm90a).path, KernelPath::sm80);
  const KernelConfig kept = default_backward_config(odd, kSm90a, 0, KernelConfig{KernelPath::sm90});
  EXPECT_EQ(kept.path, KernelPath::sm90);
  EXPECT_EQ(refusal(odd, kept, kSm90a),
            "backward kernel path sm90 is not available: head_dim=24: the sm90 backward serves "
            "head dims that are multiples of 8 from 32 to 256 (16-byte TMA rows, tiled as 32, 64, "
            "96, 128, 192 or 256); use sm80");
  // Head dims between 64, 128 and 256: the tiled dim's tiles, taken on
  // their own (checked on the H200, 2026-12-01).
  Problem between;
  between.head_dim_qk = between.head_dim_v = 192;
  EXPECT_EQ(default_backward_config(between, kSm90a),
            (KernelConfig{KernelPath::sm90, 64, 64, 12, 2}));
  EXPECT_EQ(default_backward_config(between, kSm90a, 0, KernelConfig{KernelPath::sm90}),
            (KernelConfig{KernelPath::sm90, 64, 64, 12, 2}));
  EXPECT_EQ(refusal(between, {KernelPath::sm90, 64, 64, 12, 2}, kSm90a), "");
  between.head_dim_qk = between.head_dim_v = 40;
  EXPECT_EQ(default_backward_config(between, kSm90a, 0, KernelConfig{KernelPath::sm90}),
            (KernelConfig{KernelPath::sm90, 128, 128, 12, 2}));
  // A caller's modifiers with 128-query tiles: one stage.
  EXPECT_EQ(default_backward_config(between, kSm90a, 0, KernelConfig{KernelPath::sm90},
                                    /*modified=*/true),
            (KernelConfig{KernelPath::sm90, 128, 128, 12, 1}));
  EXPECT_EQ(refusal(p, {KernelPath::sm90, 128, 128, 12, 2}, kSm80),
            "backward kernel path sm90 is not available: the sm90 backward needs an sm_90a "
            "target (wgmma, setmaxnreg, TMA), not sm_80; use sm80");
  // Deterministic (dQ's reduce-adds in key-block order): where dQ is staged,
  // chosen automatically as the default mode is.
  KernelConfig det{KernelPath::sm90, 128, 128, 12, 2};
  det.deterministic = true;
  EXPECT_EQ(refusal(p, det, kSm90a), "");
  KernelConfig det_partial;
  det_partial.deterministic = true;
  EXPECT_EQ(default_backward_config(p, kSm90a, 0, det_partial).path, KernelPath::sm90);
  EXPECT_EQ(sm90_backward_automatic_reason(p, kSm90a, true), "");
  det_partial.path = KernelPath::sm90;
  EXPECT_EQ(default_backward_config(p, kSm90a, 0, det_partial).path, KernelPath::sm90);
  Problem d256;
  d256.head_dim_qk = d256.head_dim_v = 256;
  KernelConfig det256{KernelPath::sm90, 64, 64, 12, 2};  // two stages: dQ not staged
  det256.deterministic = true;
  EXPECT_NE(refusal(d256, det256, kSm90a).find("has no room for the staged dQ"), std::string::npos);
  Problem d128;
  d128.head_dim_qk = d128.head_dim_v = 128;
  EXPECT_EQ(refusal(d128, {KernelPath::sm90, 128, 128, 12, 4}, kSm90a),
            "sm90 backward config (block_m=128 block_n=128 warps=12 stages=4, d=128 dv=128) is "
            "invalid: block_m=128 is not 64 at head dim 128 (registers: S^T, dP^T, dK and dV of "
            "a warpgroup); stages=4 is not in [1, 3] (Q/dO buffers)");
}

// The tiles each head dim takes; their shared memory is BwdSm90Layout's
// (kernel_layout_test.cpp).
TEST(BwdSm90Traits, TilesOfEachHeadDim) {
  auto t = BwdSm90Traits::make(128, 128, 64, 128, 12, 2, 0);
  ASSERT_TRUE(bool(t)) << llvm::toString(t.takeError());
  EXPECT_TRUE(t->dq_staged());
  // Three stages leave no room for the staged parts: dQ by atomics.
  auto deep = BwdSm90Traits::make(128, 128, 64, 128, 12, 3, 0);
  ASSERT_TRUE(bool(deep)) << llvm::toString(deep.takeError());
  EXPECT_FALSE(deep->dq_staged());
  EXPECT_EQ(t->threads(), 384);
  EXPECT_EQ(BwdSm90Traits::search_space(128, 128, 232448).size(), 3u);
  EXPECT_EQ(BwdSm90Traits::search_space(64, 64, 232448).size(), 6u);

  // d=256: no room for dQ's staged parts (64 x 128 fp32 each).
  auto split = BwdSm90Traits::make(256, 256, 64, 64, 12, 2, 0);
  ASSERT_TRUE(bool(split)) << llvm::toString(split.takeError());
  EXPECT_TRUE(split->splits_head_dim());
  EXPECT_FALSE(split->dq_staged());
  EXPECT_EQ(BwdSm90Traits::search_space(256, 256, 232448).size(), 2u);

  // 192/128 (Q/K tiled as 192, V/dO as 128): the split, dQ staged.
  auto unequal = BwdSm90Traits::make(192, 128, 64, 64, 12, 2, 0);
  ASSERT_TRUE(bool(unequal)) << llvm::toString(unequal.takeError());
  EXPECT_TRUE(unequal->splits_head_dim());
  EXPECT_TRUE(unequal->dq_staged());
  // 192/128 with 128 keys a CTA: each warpgroup its own 64 (no split); two
  // stages leave no room for the staged dQ.
  auto wide = BwdSm90Traits::make(192, 128, 64, 128, 12, 1, 0);
  ASSERT_TRUE(bool(wide)) << llvm::toString(wide.takeError());
  EXPECT_FALSE(wide->splits_head_dim());
  EXPECT_TRUE(wide->dq_staged());
  EXPECT_FALSE(BwdSm90Traits::make(192, 128, 64, 128, 12, 2, 0)->dq_staged());
  EXPECT_TRUE(bool(BwdSm90Traits::make(176, 104, 64, 128, 12, 1, 0)));
  // Three stages of 64 keys fit, and one or two of 128.
  EXPECT_EQ(BwdSm90Traits::search_space(192, 128, 232448).size(), 5u);
  for (auto [qk, v] : {std::pair{192, 192}, std::pair{256, 128}, std::pair{128, 192}}) {
    auto no = BwdSm90Traits::make(qk, v, 64, 128, 12, 1, 0);
    ASSERT_FALSE(bool(no)) << qk << "/" << v;
    EXPECT_NE(llvm::toString(no.takeError()).find("block_n=128 is not 64 at head dim"),
              std::string::npos);
  }
  {
    auto no = BwdSm90Traits::make(192, 128, 64, 32, 12, 1, 0);
    ASSERT_FALSE(bool(no));
    EXPECT_NE(llvm::toString(no.takeError())
                  .find("block_n=32 is not 64 or 128 at head dim 192/128 (64 keys shared by two "
                        "consumer warpgroups, or 64 each)"),
              std::string::npos);
  }
  // 192 (and 136..184): the split as at 256 over 192 columns; two stages
  // still stage dQ, three do not.
  auto d192 = BwdSm90Traits::make(160, 160, 64, 64, 12, 2, 0);
  ASSERT_TRUE(bool(d192)) << llvm::toString(d192.takeError());
  EXPECT_EQ(d192->tiled_head_dim(), 192);
  EXPECT_TRUE(d192->dq_staged());
  EXPECT_EQ(BwdSm90Traits::search_space(192, 192, 232448).size(), 3u);
  EXPECT_FALSE(BwdSm90Traits::make(192, 192, 64, 64, 12, 3, 0)->dq_staged());
  // Swizzle rows of 32 columns (64 bytes) wherever a tile is 32 (one row),
  // 96 (three; dQ over each warpgroup's own keys) or 192 wide (each
  // warpgroup's 96 columns start on one); else 64 (128 bytes).
  const struct {
    int qk, v, columns;
  } rows[] = {{192, 128, 32}, {128, 152, 32}, {256, 192, 32}, {256, 256, 64},
              {104, 128, 64}, {64, 256, 64},  {96, 128, 32},  {128, 72, 32},
              {32, 32, 32},   {24, 64, 32}};
  for (const auto &r : rows)
    EXPECT_EQ(sm90_backward_swizzle_columns(r.qk, r.v), r.columns) << r.qk << "/" << r.v;
  EXPECT_TRUE(sm90_backward_dq_own_keys(80, 80, 64));
  EXPECT_FALSE(sm90_backward_dq_own_keys(128, 128, 64));
  EXPECT_FALSE(sm90_backward_dq_own_keys(64, 64, 128));
  // A 96 beside a 192 or 256 (the head-dim split) is tiled as 128.
  EXPECT_EQ(sm90_backward_tile_head_dim(96, 192), 128);
  EXPECT_EQ(sm90_backward_tile_head_dim(72, 256), 128);
  EXPECT_EQ(sm90_backward_tile_head_dim(96, 128), 96);
  EXPECT_EQ(sm90_backward_swizzle_columns(96, 256), 64);
  EXPECT_FALSE(sm90_backward_dq_own_keys(96, 200, 64));
  auto d96 = BwdSm90Traits::make(96, 96, 64, 128, 12, 1, 0);
  ASSERT_TRUE(bool(d96)) << llvm::toString(d96.takeError());
  EXPECT_EQ(d96->tiled_head_dim(), 96);
  // d=32's own tile: 128-query tiles by default, dQ whole per warpgroup
  // (split by rows).
  auto d32 = BwdSm90Traits::make(32, 32, 128, 128, 12, 1, 0);
  ASSERT_TRUE(bool(d32)) << llvm::toString(d32.takeError());
  EXPECT_EQ(d32->tiled_head_dim(), 32);
  EXPECT_TRUE(d32->dq_staged());
  EXPECT_EQ(BwdSm90Traits::default_config(32, 32),
            (KernelConfig{KernelPath::sm90, 128, 128, 12, 2}));
  EXPECT_EQ(BwdSm90Traits::search_space(32, 32, 232448).size(), 6u);
  EXPECT_EQ(BwdSm90Traits::unsupported_reason(32, 192),
            "head_dim_qk=32, head_dim_v=192: the sm90 backward splits a head dim tiled as 192 "
            "between its warpgroups, and then needs the other tiled as 128 or more (over 64)");
  // Two Q/dO stages where they leave room for the staged dQ, else one; a
  // caller's modifiers keep one with 128-query tiles.
  // 192/128: 128 keys a CTA (one stage: room for the staged dQ), the
  // head-dim split's 64 (two stages) with a caller's modifiers; a key tile
  // the caller names brings its own stages.
  EXPECT_EQ(BwdSm90Traits::default_config(192, 128),
            (KernelConfig{KernelPath::sm90, 64, 128, 12, 1}));
  EXPECT_EQ(BwdSm90Traits::default_config(176, 104),
            (KernelConfig{KernelPath::sm90, 64, 128, 12, 1}));
  EXPECT_EQ(BwdSm90Traits::default_config(176, 104, /*modified=*/true),
            (KernelConfig{KernelPath::sm90, 64, 64, 12, 2}));
  EXPECT_EQ(BwdSm90Traits::default_config(192, 128, /*modified=*/true),
            (KernelConfig{KernelPath::sm90, 64, 64, 12, 2}));
  EXPECT_EQ(BwdSm90Traits::default_config(192, 128, false, /*block_n=*/64),
            (KernelConfig{KernelPath::sm90, 64, 64, 12, 2}));
  EXPECT_EQ(BwdSm90Traits::default_config(192, 128, /*modified=*/true, /*block_n=*/128),
            (KernelConfig{KernelPath::sm90, 64, 128, 12, 1}));
  EXPECT_EQ(BwdSm90Traits::default_config(64, 128),
            (KernelConfig{KernelPath::sm90, 64, 128, 12, 2}));
  EXPECT_EQ(BwdSm90Traits::default_config(192, 192),
            (KernelConfig{KernelPath::sm90, 64, 64, 12, 2}));
  EXPECT_EQ(BwdSm90Traits::default_config(256, 256),
            (KernelConfig{KernelPath::sm90, 64, 64, 12, 1}));
  EXPECT_EQ(BwdSm90Traits::default_config(128, 128, /*modified=*/true),
            (KernelConfig{KernelPath::sm90, 64, 128, 12, 2}));
  EXPECT_EQ(BwdSm90Traits::default_config(64, 64, /*modified=*/true),
            (KernelConfig{KernelPath::sm90, 128, 128, 12, 1}));
  // Under the split each warpgroup takes whole swizzle rows of both, and dQ
  // by halves of the Q/K head dim.
  EXPECT_EQ(BwdSm90Traits::unsupported_reason(256, 64),
            "head_dim_qk=256, head_dim_v=64: the sm90 backward splits a head dim tiled as 256 "
            "between its warpgroups, and then needs the other tiled as 128 or more (over 64)");
  EXPECT_EQ(BwdSm90Traits::unsupported_reason(48, 184),
            "head_dim_qk=48, head_dim_v=184: the sm90 backward splits a head dim tiled as 192 "
            "between its warpgroups, and then needs the other tiled as 128 or more (over 64)");
  EXPECT_EQ(BwdSm90Traits::unsupported_reason(192, 128), "");
}

// A causal problem with as many KV heads as query heads, for the dispatch
// sections' arithmetic.
Problem causal_problem(int head_dim, int64_t batch, int64_t heads, int64_t seqlen) {
  Problem p;
  p.head_dim_qk = p.head_dim_v = head_dim;
  p.mask = MaskKind::causal;
  p.batch = batch;
  p.heads_q = p.heads_kv = heads;
  p.seqlen_q = p.seqlen_k = seqlen;
  return p;
}

// The consumers' ldmatrix reads of K and V (A fragments from registers)
// find the chunks where TMA's swizzle put them. The TMA unit's pattern, as
// the CUDA driver documents it: the 16-byte chunk's address bits 4-6 (128-
// byte swizzle) or 4-5 (64-byte) XORed with bits 7-9 (or 7-8).
TEST(BwdSm90Layout, SwizzledChunksAreWhereTmaPutsThem) {
  for (int row_bytes : {64, 128}) {
    const int chunks = row_bytes / 16;
    for (int row = 0; row < 64; ++row) {
      std::vector<bool> seen(chunks, false);
      for (int chunk = 0; chunk < chunks; ++chunk) {
        const int linear = row * row_bytes + chunk * 16;
        const int tma = linear ^ (((linear >> 7) & (chunks - 1)) << 4);
        const int offset = swizzled_chunk_offset(row, chunk, row_bytes);
        EXPECT_EQ(offset, tma) << row_bytes << "-byte rows, row " << row << " chunk " << chunk;
        // Each chunk stays in its row, and the row's chunks are a permutation.
        ASSERT_GE(offset, row * row_bytes);
        ASSERT_LT(offset, (row + 1) * row_bytes);
        seen[(offset - row * row_bytes) / 16] = true;
      }
      EXPECT_EQ(std::count(seen.begin(), seen.end(), true), chunks);
    }
  }
  EXPECT_EQ(swizzled_chunk_offset(3, 0, 64), 3 * 64 + 16);     // (3 / 2) % 4 = 1
  EXPECT_EQ(swizzled_chunk_offset(3, 0, 128), 3 * 128 + 48);   // 3 % 8 = 3
  EXPECT_EQ(swizzled_chunk_offset(13, 5, 128), 13 * 128 + 0);  // 5 ^ 5
  EXPECT_EQ(swizzled_chunk_offset(6, 2, 64), 6 * 64 + 16);     // 2 ^ 3
}

TEST(BwdSm90Traits, DispatchSectionsFitOneQueryHeadPerPairInL2) {
  // Per query head: seqlen_q x (Q + dO in 16 bits + the fp32 dQ accumulator).
  Problem p = causal_problem(128, 2, 16, 8192);  // 8 MB a head: 4 pairs in 40 MB
  EXPECT_EQ(BwdSm90Traits::dispatch_order(p, 128).section, 4);
  p.seqlen_q = p.seqlen_k = 2048;  // 2 MB: 16
  EXPECT_EQ(BwdSm90Traits::dispatch_order(p, 128).section, 16);
  p.heads_q = 28;  // GQA 28/4 at 6000: 6 MB a head, 4 of the 8 pairs
  p.heads_kv = 4;
  p.seqlen_q = p.seqlen_k = 6000;
  EXPECT_EQ(BwdSm90Traits::dispatch_order(p, 128).section, 4);
  p.batch = 4;
  EXPECT_EQ(BwdSm90Traits::dispatch_order(p, 128).section, 4);
  // Sections that divide the pairs where one of half the size or more does:
  // 40 pairs at 1500 (16 in L2) in sections of 10, 20 at 3000 (8) of 5.
  p.seqlen_q = p.seqlen_k = 1500;
  p.batch = 10;
  EXPECT_EQ(BwdSm90Traits::dispatch_order(p, 128).section, 10);
  p.seqlen_q = p.seqlen_k = 3000;
  p.batch = 5;
  EXPECT_EQ(BwdSm90Traits::dispatch_order(p, 128).section, 5);
  // 7 pairs (8 would fit): none from 4 down, so 4 and a last of 3.
  p.heads_q = p.heads_kv = 7;
  p.batch = 1;
  EXPECT_EQ(BwdSm90Traits::dispatch_order(p, 128).section, 4);
  // The deterministic mode keeps its sections: 20 pairs at 3000, 8.
  p.heads_q = 28;
  p.heads_kv = 4;
  p.batch = 5;
  EXPECT_EQ(BwdSm90Traits::dispatch_order(p, 128, false, /*deterministic=*/true).section, 8);
  p.batch = 4;
  p.seqlen_q = p.seqlen_k = 1 << 20;  // more than L2 a head: pair by pair
  EXPECT_EQ(BwdSm90Traits::dispatch_order(p, 128).section, 1);
  // Without a mask every CTA costs the same: pair by pair.
  p.seqlen_q = p.seqlen_k = 2048;
  p.mask = MaskKind::none;
  EXPECT_EQ(BwdSm90Traits::dispatch_order(p, 128).section, 1);
  // Unless a caller's mask_mod makes them uneven: as a mask.
  EXPECT_EQ(BwdSm90Traits::dispatch_order(p, 128, /*mask_mod=*/true).section, 16);
  // The kernel orders its CTAs itself: a one-dimensional grid.
  p.mask = MaskKind::causal;
  auto spec = make_backward_spec(p, BwdSm90Traits::default_config(128, 128), kSm90a);
  ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
  const LaunchGeometry g = backward_launch_geometry(*spec, p);
  EXPECT_EQ(g.grid.x, 2048u / 128 * 4 * 4);
  EXPECT_EQ(g.grid.y, 1u);
  EXPECT_EQ(g.grid.z, 1u);
  EXPECT_EQ(make_backward_params(p, BackwardArgs{}, false, 128).dispatch_section, 16);
}

TEST(BwdSm90Traits, ResidentCtasOnePerSmOrACtaPerItem) {
  // 16 heads x 2048: 16 key blocks of 128 a pair, items of 32 query tiles.
  Problem p = causal_problem(128, 4, 16, 2048);
  auto spec = make_backward_spec(p, BwdSm90Traits::default_config(128, 128), kSm90a);
  ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
  EXPECT_EQ(BwdSm90Traits::work_items(p, 128), 16 * 16 * 4);
  EXPECT_EQ(make_backward_params(p, BackwardArgs{}, false, 128).work_items, 16 * 16 * 4);
  EXPECT_EQ(backward_launch_geometry(*spec, p, 132).grid.x, 132u);
  EXPECT_EQ(backward_launch_geometry(*spec, p, 0).grid.x, 1024u);  // SMs unknown
  // Fewer items than SMs: one CTA each.
  Problem small = causal_problem(128, 1, 2, 2048);
  EXPECT_EQ(backward_launch_geometry(*spec, small, 132).grid.x, 32u);
  // A caller's mask_mod: a CTA per item (its consumers' registers).
  KernelSpec masked = *spec;
  masked.modifiers.mask_mod = "__device__ bool mask_mod(int b, int h, int q, int k) { return true; }";
  EXPECT_EQ(backward_launch_geometry(masked, p, 132).grid.x, 1024u);
  // GQA 64/8 at 3000: 24 key blocks x 8 KV heads x 5.
  Problem gqa = causal_problem(128, 5, 64, 3000);
  gqa.heads_kv = 8;
  EXPECT_EQ(BwdSm90Traits::work_items(gqa, 128), (3000 + 127) / 128 * 8 * 5);
  EXPECT_EQ(backward_launch_geometry(*spec, gqa, 132).grid.x, 132u);
}

TEST(BwdSm90Traits, DeterministicShortestFirstUnderAMaskWithinL2) {
  // Under a built-in mask without GQA, one head's Q, dO and dQ accumulator
  // within 32 MB, at least 12 work items an SM of 132: shortest first, in
  // sections of a power of two of pairs within 24 MB (d=256: 2 KB a
  // query).
  auto det = [](const Problem &p, int block_n, bool mask_mod = false) {
    return BwdSm90Traits::dispatch_order(p, block_n, mask_mod, /*deterministic=*/true);
  };
  auto expect_order = [](BwdSm90Traits::DispatchOrder order, int section, bool shortest_first) {
    EXPECT_EQ(order.section, section);
    EXPECT_EQ(order.shortest_first, shortest_first);
  };
  expect_order(det(causal_problem(256, 16, 8, 1024), 64), 8, true);   // 2 MB a head
  expect_order(det(causal_problem(256, 8, 8, 2048), 64), 4, true);    // 4 MB
  expect_order(det(causal_problem(256, 4, 8, 4096), 64), 2, true);    // 8 MB
  expect_order(det(causal_problem(256, 2, 8, 8192), 64), 1, true);    // 16 MB
  expect_order(det(causal_problem(256, 1, 8, 16384), 64), 1, true);   // 32 MB
  expect_order(det(causal_problem(256, 1, 8, 32768), 64), 8, false);  // 64 MB: longest first
  expect_order(det(causal_problem(256, 16, 8, 1023), 64), 8, true);
  // 12 x 132 items: 12 heads of 132 key blocks; 11 heads fall short.
  expect_order(det(causal_problem(256, 1, 12, 8448), 64), 1, true);
  expect_order(det(causal_problem(256, 1, 11, 8448), 64), 8, false);
  expect_order(det(causal_problem(256, 1, 8, 8192), 64), 8, false);  // 1024 items
  expect_order(det(causal_problem(192, 8, 10, 2048), 64), 8, true);  // 3 MB
  expect_order(det(causal_problem(192, 2, 10, 8192), 64), 2, true);  // 12 MB
  expect_order(det(causal_problem(128, 8, 16, 2048), 128), 8, true);
  expect_order(det(causal_problem(64, 2, 32, 8192), 128), 4, true);
  Problem window = causal_problem(256, 8, 8, 2048);
  window.mask = MaskKind::window;
  window.window_left = 512;
  window.window_right = 0;
  expect_order(det(window, 64), 4, true);
  // A window without bounds is no mask (normalized_mask): longest first.
  window.window_left = window.window_right = -1;
  expect_order(det(window, 64), 8, false);
  // Longest first: GQA (its longest items would start last), a caller's
  // mask_mod, no mask, 192/128, and the default mode's order.
  Problem gqa = causal_problem(256, 4, 16, 2048);
  gqa.heads_kv = 4;
  expect_order(det(gqa, 64), 16, false);
  Problem p = causal_problem(256, 8, 8, 2048);
  expect_order(det(p, 64, /*mask_mod=*/true), 16, false);
  expect_order(BwdSm90Traits::dispatch_order(p, 64), 8, false);
  Problem split = causal_problem(192, 2, 16, 8192);
  split.head_dim_v = 128;
  EXPECT_FALSE(det(split, 128).shortest_first);
  p.mask = MaskKind::none;
  EXPECT_FALSE(det(p, 64).shortest_first);
  // The kernel's parameters carry it.
  p.mask = MaskKind::causal;
  const BwdParams params = make_backward_params(p, BackwardArgs{}, true, 64);
  EXPECT_EQ(params.dispatch_section, 4);
  EXPECT_EQ(params.shortest_first, 1);
  EXPECT_EQ(make_backward_params(p, BackwardArgs{}, false, 64).shortest_first, 0);
}

TEST(BwdSm90Traits, DeterministicLongestFirstSectionsTradeChainsForL2) {
  // Longest first (here: GQA, or no mask), each pair's key blocks running
  // at once form one chain of dQ adds: at least 8 pairs per section keep
  // it short, with or without a mask; with the head-dim split's 64-key
  // blocks 16 under a mask while a pair has at most 32 key blocks, and
  // without a mask the L2's sections, 2 to 8. (Two query heads a KV head:
  // the pairs and a head's bytes as in causal_problem's.)
  auto grouped = [](Problem p) {
    p.heads_q = 2 * p.heads_kv;
    return p;
  };
  auto det_section = [](const Problem &p, int block_n, bool mask_mod = false) {
    const auto order =
        BwdSm90Traits::dispatch_order(p, block_n, mask_mod, /*deterministic=*/true);
    EXPECT_FALSE(order.shortest_first);
    return order.section;
  };
  Problem p = grouped(causal_problem(256, 2, 8, 8192));  // 16 MB a head: 2 pairs in L2
  EXPECT_EQ(BwdSm90Traits::dispatch_order(p, 64).section, 2);
  EXPECT_EQ(det_section(p, 64), 8);  // 128 key blocks a pair
  EXPECT_EQ(make_backward_params(p, BackwardArgs{}, true, 64).dispatch_section, 8);
  EXPECT_EQ(det_section(grouped(causal_problem(256, 16, 8, 1024)), 64), 16);
  EXPECT_EQ(det_section(grouped(causal_problem(256, 8, 8, 2048)), 64), 16);  // 32 key blocks
  EXPECT_EQ(det_section(grouped(causal_problem(256, 8, 8, 2049)), 64), 8);   // 33
  EXPECT_EQ(det_section(grouped(causal_problem(256, 64, 8, 512)), 64), 32);  // 1 MB: 32 in L2
  EXPECT_EQ(det_section(grouped(causal_problem(256, 4, 8, 4096)), 64), 8);
  Problem d128 = grouped(causal_problem(128, 2, 16, 8192));  // 8 MB a head: 4 pairs in L2
  EXPECT_EQ(BwdSm90Traits::dispatch_order(d128, 128).section, 4);
  EXPECT_EQ(det_section(d128, 128), 8);
  d128.mask = MaskKind::none;
  EXPECT_EQ(det_section(d128, 128), 8);
  p = causal_problem(256, 2, 8, 8192);
  p.mask = MaskKind::none;
  EXPECT_EQ(det_section(p, 64), 2);                     // 16 MB a head: 2 in L2
  EXPECT_EQ(det_section(p, 64, /*mask_mod=*/true), 8);  // a mask too
  EXPECT_EQ(make_backward_params(p, BackwardArgs{}, true, 64).dispatch_section, 2);
  EXPECT_EQ(make_backward_params(p, BackwardArgs{}, false, 64).dispatch_section, 1);
  p.seqlen_q = p.seqlen_k = 4096;  // 8 MB: 4
  EXPECT_EQ(det_section(p, 64), 4);
  p.seqlen_q = p.seqlen_k = 1024;  // 2 MB: 16 in L2, at most 8
  EXPECT_EQ(det_section(p, 64), 8);
  p.seqlen_q = p.seqlen_k = 16384;  // 32 MB: 1, at least 2
  EXPECT_EQ(det_section(p, 64), 2);
  // Fewer pairs than 8: all of them; more L2 room than 8: the L2's.
  p.heads_q = 4;
  p.heads_kv = 2;
  p.batch = 1;
  p.seqlen_q = p.seqlen_k = 8192;
  p.mask = MaskKind::causal;
  EXPECT_EQ(det_section(p, 64), 2);
  p.heads_q = p.heads_kv = 1;
  p.mask = MaskKind::none;
  EXPECT_EQ(det_section(p, 64), 1);
  p.heads_q = 64;
  p.heads_kv = 32;
  p.mask = MaskKind::causal;
  p.seqlen_q = p.seqlen_k = 2048;  // 2 MB a head at d=128: 16 of the 32 pairs
  p.head_dim_qk = p.head_dim_v = 128;
  EXPECT_EQ(det_section(p, 128), 16);
}

}  // namespace
}  // namespace flashjit
