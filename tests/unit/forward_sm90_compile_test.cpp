// The sm90 forward kernel (TMA + wgmma, templates/fwd_sm90.cuh) compiles
// through NVRTC to an sm_90a cubin for every config it claims — each head
// dim x mask x dtype x softcap, and every tile of its search space — with no
// spills in ptxas's report; where cuobjdump is available, the SASS shows the
// Hopper instructions (HGMMA, UTMALDG) and no local-memory traffic.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <set>
#include <string>

#include "cli/ptxas_report.h"
#include "generator/fwd_sm90_traits.h"
#include "generator/heuristic.h"
#include "generator/kernel_spec.h"
#include "generator/source.h"
#include "generator/warp_roles.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/ThreadPool.h"
#include "runtime/nvrtc_compiler.h"
#include "sm90_compile_check.h"

namespace flashjit {
namespace {

const TargetArch kSm90a{9, 0, true};

struct Sm90Case {
  Problem problem;
  KernelConfig config;
  // Its SASS must show the intra-warpgroup overlap: one wgmma group left in
  // flight while the softmax runs (wgmma.wait_group 1), which a kernel in
  // sequence never does. Every head dim, 256 included.
  bool overlaps = false;
};

std::vector<Sm90Case> sm90_cases() {
  std::vector<Sm90Case> cases;
  // Every tiled head dim x mask x dtype x softcap with the default tiles.
  for (int d : {64, 128, 192, 256})
    for (MaskKind mask : {MaskKind::none, MaskKind::causal, MaskKind::window})
      for (DType dtype : {DType::bf16, DType::fp16})
        for (float softcap : {0.f, 30.f}) {
          Problem p;
          p.head_dim_qk = p.head_dim_v = d;
          p.mask = mask;
          p.window_left = 64;
          p.window_right = 0;
          p.dtype = dtype;
          p.softcap = softcap;
          cases.push_back({p, FwdSm90Traits::default_config(d, 0), /*overlaps=*/true});
        }
  // Head dims between, tiled as 64, 128, 192 or 256 (their stores cut at the
  // problem's columns): causal with softcap, packed-GQA decode with splits,
  // a varlen batch.
  for (int d : {32, 40, 72, 96, 160, 200}) {
    Problem p;
    p.head_dim_qk = p.head_dim_v = d;
    p.mask = MaskKind::causal;
    p.softcap = 30.f;
    cases.push_back({p, FwdSm90Traits::default_config(d, 0)});
    Problem decode;
    decode.head_dim_qk = decode.head_dim_v = d;
    decode.heads_q = 32;
    decode.heads_kv = 8;
    decode.seqlen_q = 1;
    decode.seqlen_k = 8192;
    KernelConfig c = FwdSm90Traits::default_config(d, 1, 4);
    c.pack_gqa = GqaPacking::on;
    c.splits = 4;
    cases.push_back({decode, c});
  }
  // Unequal head dims, the wider one's tiles.
  for (auto [dq, dv] : {std::pair{192, 128}, {128, 192}, {64, 128}, {128, 64}}) {
    Problem p;
    p.head_dim_qk = dq;
    p.head_dim_v = dv;
    p.mask = MaskKind::causal;
    p.softcap = 30.f;
    KernelConfig partial;
    partial.path = KernelPath::sm90;
    cases.push_back({p, default_forward_config(p, kSm90a, 0, partial)});
  }
  // Every tile of the search space, with the register-hungriest variant
  // (sliding window + softcap: both mask bounds and the tanh).
  for (int d : {64, 128, 192, 256})
    for (const KernelConfig &c : FwdSm90Traits::search_space(d, max_smem_per_block(kSm90a))) {
      Problem p;
      p.head_dim_qk = p.head_dim_v = d;
      p.mask = MaskKind::window;
      p.window_left = 100;
      p.window_right = 3;
      p.softcap = 5.f;
      cases.push_back({p, c});
    }
  // The tiles only lean problems take (FwdSm90Traits::lean), under a causal
  // mask, the heaviest lean variant.
  for (int d : {64, 128}) {
    const int smem = max_smem_per_block(kSm90a);
    const std::vector<KernelConfig> narrow = FwdSm90Traits::search_space(d, smem);
    for (const KernelConfig &c : FwdSm90Traits::search_space(d, smem, /*lean=*/true)) {
      if (std::find(narrow.begin(), narrow.end(), c) != narrow.end()) continue;
      Problem p;
      p.head_dim_qk = p.head_dim_v = d;
      p.mask = MaskKind::causal;
      cases.push_back({p, c});
    }
  }
  // The heuristic's lean tiles (d=64 192x128, d=128 128x160) and d=128's
  // widest in the lean variants the heuristic pairs them with: split keys,
  // a varlen batch with packed heads, packed heads without a mask, fp16,
  // unequal head dims. Packed heads under a causal mask outside a varlen
  // batch spill 12 bytes at 192x128; the heuristic never packs there
  // (pack_gqa_pays: not beyond 1024 queries), and the tuner times what it
  // offers. A serving batch (varlen over a cache) is not lean.
  const KernelConfig lean_tiles[] = {{KernelPath::sm90, 192, 128, 16, 3},
                                     {KernelPath::sm90, 128, 160, 12, 2},
                                     {KernelPath::sm90, 128, 176, 12, 2}};
  for (const KernelConfig &tiles : lean_tiles) {
    const int d = tiles.block_m == 192 ? 64 : 128;
    auto lean_problem = [&](MaskKind mask) {
      Problem p;
      p.head_dim_qk = p.head_dim_v = d;
      p.mask = mask;
      p.seqlen_q = p.seqlen_k = 2048;
      return p;
    };
    Problem split = lean_problem(MaskKind::causal);
    split.heads_q = split.heads_kv = 4;
    KernelConfig split_tiles = tiles;
    split_tiles.splits = 2;
    cases.push_back({split, split_tiles});
    Problem varlen = lean_problem(MaskKind::causal);
    varlen.varlen = true;
    varlen.batch = 2;
    varlen.heads_q = 32;
    varlen.heads_kv = 8;
    KernelConfig packed = tiles;
    packed.pack_gqa = GqaPacking::on;
    cases.push_back({varlen, packed});
    Problem unmasked = lean_problem(MaskKind::none);
    unmasked.heads_q = 32;
    unmasked.heads_kv = 8;
    cases.push_back({unmasked, packed});
    Problem half = lean_problem(MaskKind::causal);
    half.dtype = DType::fp16;
    cases.push_back({half, tiles});
    if (d == 128) {
      Problem unequal = lean_problem(MaskKind::causal);
      unequal.head_dim_qk = 64;
      cases.push_back({unequal, tiles});
    }
  }
  return cases;
}

struct Compiled {
  std::string id, error, sass_problem;
  cli::PtxasReport report;
  std::optional<Cubin> cubin;
};

// Compiles one case with ptxas's report.
Compiled compile_case(const Sm90Case &c, const std::string &cuobjdump) {
  Compiled r;
  auto spec = make_forward_spec(c.problem, c.config, kSm90a);
  if (!spec) {
    r.error = llvm::toString(spec.takeError());
    return r;
  }
  r.id = spec->id();
  testing::Sm90Compiled compiled =
      testing::compile_sm90_with_report(generate_forward(*spec), kSm90a, cuobjdump);
  r.error = std::move(compiled.error);
  r.report = compiled.report;
  if (r.error.empty()) r.cubin = std::move(compiled.cubin);
  return r;
}

// What is wrong with a compiled case's SASS ("" when nothing is).
std::string sass_problem(const Cubin &cubin, const std::string &cuobjdump, bool overlaps) {
  auto sass = testing::cuobjdump_output(cubin, cuobjdump, "-sass");
  if (!sass) return "cuobjdump -sass failed";
  std::string problem;
  // ACQBULK is griddepcontrol.wait: the host launches the forward as a
  // programmatic dependent, which is only safe if it waits before reading.
  for (const char *needed : {"HGMMA", "UTMALDG", "SYNCS", "USETMAXREG", "ACQBULK"})
    if (sass->find(needed) == std::string::npos)
      problem += std::string("no ") + needed + " in the SASS; ";
  if (overlaps && sass->find("WARPGROUP.DEPBAR.LE gsb0, 0x1") == std::string::npos)
    problem += "no wgmma.wait_group 1 (intra-warpgroup overlap) in the SASS; ";
  for (const char *banned : {" LDL", " STL"})
    if (sass->find(banned) != std::string::npos)
      problem += std::string("local memory (") + banned + ") in the SASS; ";
  return problem;
}

TEST(ForwardSm90Compile, EveryClaimedConfigCompilesWithoutSpills) {
  const std::vector<Sm90Case> cases = sm90_cases();
  ASSERT_GT(cases.size(), 40u);
  const std::string cuobjdump = testing::find_cuobjdump();
  std::vector<Compiled> results(cases.size());
  {
    llvm::ThreadPool pool(llvm::hardware_concurrency());
    for (size_t i = 0; i < cases.size(); ++i)
      pool.async([&, i] { results[i] = compile_case(cases[i], cuobjdump); });
    pool.wait();
    if (!cuobjdump.empty()) {
      for (size_t i = 0; i < cases.size(); ++i)
        if (results[i].cubin)
          pool.async([&, i] {
            results[i].sass_problem = sass_problem(*results[i].cubin, cuobjdump, cases[i].overlaps);
          });
      pool.wait();
    }
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    const Compiled &r = results[i];
    SCOPED_TRACE(describe(cases[i].problem) + " | " + describe(cases[i].config) + " " + r.id);
    EXPECT_EQ(r.error, "");
    EXPECT_EQ(r.report.spill_store_bytes, 0);
    EXPECT_EQ(r.report.spill_load_bytes, 0);
    EXPECT_EQ(r.report.stack_frame_bytes, 0);
    EXPECT_EQ(r.sass_problem, "");
  }
  if (cuobjdump.empty())
    GTEST_SKIP() << "compiled " << cases.size()
                 << " sm90 configs without spills; SASS not checked: no "
                    "cuobjdump on PATH or in "
                    "$FLASHJIT_CUOBJDUMP";
}

// Past head dim 256 (Gemma 4's 512, DeepSeek MLA's 576/512) two consumer
// warpgroups share each 64 rows, half of O's columns each, adding their
// halves of S through shared memory: every such head dim compiles for
// sm_90a at the heuristic's tiles and every tile of the search space, with
// each mask, softcap, both dtypes, packed-GQA decode with splits, a paged
// cache, a varlen batch and sinks; within shared memory, the wgmmas
// asynchronous (no serialisation warning would show as a missing
// wait_group 1), at most a few words in local memory (values live across
// setmaxnreg, reloaded once per work tile), and both
// warpgroups meeting at the exchange's named barrier.
TEST(ForwardSm90Compile, SplitColumnsPastHeadDim256) {
  std::vector<Sm90Case> cases;
  for (auto [dq, dv] : {std::pair{320, 320}, {384, 384}, {448, 448}, {512, 512}, {576, 512},
                        {512, 256}, {264, 264}}) {
    const KernelConfig tiles = FwdSm90Traits::default_config(std::max(dq, dv), 0);
    for (MaskKind mask : {MaskKind::none, MaskKind::causal, MaskKind::window})
      for (DType dtype : {DType::bf16, DType::fp16}) {
        Problem p;
        p.head_dim_qk = dq;
        p.head_dim_v = dv;
        p.mask = mask;
        p.window_left = 64;
        p.window_right = 0;
        p.dtype = dtype;
        p.softcap = mask == MaskKind::window ? 30.f : 0.f;
        cases.push_back({p, tiles, /*overlaps=*/true});
      }
    Problem decode;
    decode.head_dim_qk = dq;
    decode.head_dim_v = dv;
    decode.heads_q = 8;
    decode.heads_kv = 4;
    decode.seqlen_q = 1;
    decode.seqlen_k = 8192;
    KernelConfig split = tiles;
    split.pack_gqa = GqaPacking::on;
    split.splits = 8;
    cases.push_back({decode, split, true});
    Problem paged = decode;
    paged.page_size = 64;
    paged.seqused_k = true;
    cases.push_back({paged, split, true});
    Problem varlen;
    varlen.head_dim_qk = dq;
    varlen.head_dim_v = dv;
    varlen.varlen = true;
    varlen.batch = 3;
    varlen.mask = MaskKind::causal;
    cases.push_back({varlen, tiles, true});
  }
  for (const KernelConfig &c : FwdSm90Traits::search_space(512, max_smem_per_block(kSm90a))) {
    Problem p;
    p.head_dim_qk = p.head_dim_v = 512;
    p.mask = MaskKind::window;
    p.window_left = 100;
    p.window_right = 3;
    p.softcap = 5.f;
    cases.push_back({p, c, true});
  }
  const std::string cuobjdump = testing::find_cuobjdump();
  std::vector<Compiled> results(cases.size());
  std::vector<std::string> sass(cases.size());
  {
    llvm::ThreadPool pool(llvm::hardware_concurrency());
    for (size_t i = 0; i < cases.size(); ++i)
      pool.async([&, i] {
        results[i] = compile_case(cases[i], cuobjdump);
        if (!cuobjdump.empty() && results[i].cubin)
          if (auto text = testing::cuobjdump_output(*results[i].cubin, cuobjdump, "-sass"))
            sass[i] = std::move(*text);
      });
    pool.wait();
  }
  // MLA's V read from K's tiles (KernelSpec::v_in_k): decode with splits,
  // a paged cache, prefill; no V ring in shared memory.
  for (Problem p : {cases[0].problem}) {
    p.head_dim_qk = 576;
    p.head_dim_v = 512;
    for (int variant = 0; variant < 3; ++variant) {
      Problem q = p;
      KernelConfig c = FwdSm90Traits::default_config(576, 0);
      if (variant > 0) {
        q.heads_q = 128;
        q.heads_kv = 1;
        q.seqlen_q = 2;
        q.seqlen_k = 8192;
        c.pack_gqa = GqaPacking::on;
        c.splits = 4;
      }
      if (variant == 2) {
        q.page_size = 64;
        q.seqused_k = true;
      }
      auto spec = make_forward_spec(q, c, kSm90a);
      ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
      spec->v_in_k = true;
      EXPECT_NE(spec->id().find("_vink"), std::string::npos);
      EXPECT_EQ(forward_block_geometry(*spec).dynamic_smem_bytes,
                1024 + 72 * 1024 + 2 * 36 * 1024 + 2 * 16 * 1024 + 8 * (2 + 4 * 2) + 8)
          << spec->id();
      testing::Sm90Compiled compiled =
          testing::compile_sm90_with_report(generate_forward(*spec), kSm90a, cuobjdump);
      EXPECT_EQ(compiled.error, "") << spec->id();
      EXPECT_LE(compiled.report.spill_store_bytes, 96) << spec->id();
    }
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    const Compiled &r = results[i];
    SCOPED_TRACE(describe(cases[i].problem) + " | " + describe(cases[i].config) + " " + r.id);
    ASSERT_EQ(r.error, "");
    EXPECT_EQ(cases[i].config.warps, 12);
    // MLA's 576 (nine K column blocks, eight of V) keeps a few more words of
    // the prologue and the producer's addresses there (ptxas: 48-84 bytes).
    const bool mla = cases[i].problem.head_dim_qk > 512;
    EXPECT_LE(r.report.spill_store_bytes, mla ? 96 : 40);
    EXPECT_LE(r.report.stack_frame_bytes, mla ? 96 : 40);
    if (cuobjdump.empty()) continue;
    ASSERT_FALSE(sass[i].empty());
    for (const char *needed : {"HGMMA", "UTMALDG", "USETMAXREG", "BAR.SYNC",
                               "WARPGROUP.DEPBAR.LE gsb0, 0x1"})
      EXPECT_NE(sass[i].find(needed), std::string::npos) << "no " << needed << " in the SASS";
  }
  // e4m3 and the sm80 forward stop at 256, each saying so.
  Problem wide;
  wide.head_dim_qk = wide.head_dim_v = 512;
  const TargetArch sm80_arch{8, 0, false};
  auto sm80 = make_forward_spec(wide, default_forward_config(wide, sm80_arch), sm80_arch);
  ASSERT_FALSE(bool(sm80));
  EXPECT_NE(llvm::toString(sm80.takeError())
                .find("head_dim_qk=512 is not a multiple of 8 in [8, 256] (past 256: the sm90 "
                      "kernel, on sm_90a)"),
            std::string::npos);
  auto fp8 = FwdSm90Traits::make(512, 512, 64, 128, 12, 2, max_smem_per_block(kSm90a), false, 1);
  ASSERT_FALSE(bool(fp8));
  EXPECT_NE(llvm::toString(fp8.takeError()).find("e4m3 serves head dims up to 256"),
            std::string::npos);
  auto rows = FwdSm90Traits::make(512, 512, 128, 32, 12, 2, max_smem_per_block(kSm90a));
  ASSERT_FALSE(bool(rows));
  EXPECT_NE(llvm::toString(rows.takeError()).find("block_m=128 is not 64 (past head dim 256"),
            std::string::npos);
  // Shared memory: d=512 at 64 x 32 x 2 stages is Q 64 KB, K and V 32 KB a
  // stage each, two S exchange buffers of 16 KB; MLA's 576/512 one.
  FwdSm90Traits d512{512, 64, 32, 12, 2};
  EXPECT_EQ(d512.layout().column_split(), 2);
  EXPECT_EQ(d512.layout().s_exchange_buffers(), 2);
  EXPECT_EQ(d512.layout().consumer_warpgroups(), 2);
  EXPECT_EQ(d512.layout().q_rows_per_tile(), 64);
  FwdSm90Traits mla{576, 64, 32, 12, 2};
  mla.head_dim_v = 512;
  EXPECT_EQ(mla.layout().s_exchange_buffers(), 1);
  EXPECT_LE(mla.smem_bytes(), max_smem_per_block(kSm90a));
}

TEST(ForwardSm90Source, PreludeIncludesTheSm90Template) {
  Problem p;
  p.head_dim_qk = p.head_dim_v = 128;
  p.mask = MaskKind::causal;
  auto spec = make_forward_spec(p, FwdSm90Traits::default_config(128, 0), kSm90a);
  ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
  GeneratedSource s = generate_forward(*spec);
  EXPECT_EQ(s.entry, "flashjit_fwd_sm90");
  EXPECT_NE(s.source.find("#include \"fwd_sm90.cuh\""), std::string::npos);
  EXPECT_EQ(s.source.find("fwd_sm80.cuh"), std::string::npos);
  // The warp roles' register budgets come from the host (generator/warp_roles).
  EXPECT_NE(s.source.find("constexpr int kProducerRegisters = 24;\n"
                          "constexpr int kConsumerRegisters = 240;\n"),
            std::string::npos)
      << s.source;
  EXPECT_NE(s.program_name.find("fwd_sm90_bf16_hdqk128_hdv128_causal_nocap_bm128_bn128_w12_s2"),
            std::string::npos)
      << s.program_name;
}

TEST(ForwardSm90Spec, OnlySm90aAndItsHeadDims) {
  Problem p;
  p.head_dim_qk = p.head_dim_v = 128;
  const KernelConfig c = FwdSm90Traits::default_config(128, 0);
  EXPECT_TRUE(bool(make_forward_spec(p, c, kSm90a)));
  for (TargetArch arch : {TargetArch{8, 0, false}, TargetArch{9, 0, false}}) {
    auto spec = make_forward_spec(p, c, arch);
    ASSERT_FALSE(bool(spec));
    EXPECT_NE(llvm::toString(spec.takeError()).find("needs an sm_90a target"), std::string::npos);
  }
  // Head dims it does not serve: a config naming the path, whole or
  // partial, is an error that says why (never an sm80 kernel in its place);
  // with the path left automatic the heuristic takes sm80.
  p.head_dim_qk = p.head_dim_v = 24;
  auto full = make_forward_spec(p, {KernelPath::sm90, 128, 64, 12, 2}, kSm90a);
  ASSERT_FALSE(bool(full));
  EXPECT_EQ(llvm::toString(full.takeError()),
            "kernel path sm90 is not available: head_dim=24: the sm90 kernel serves head dims "
            "that are multiples of 8 from 32 to 576 (16-byte TMA rows, tiled as 64, 128, 192, "
            "256, then whole 64 columns); use sm80");
  KernelConfig partial;
  partial.path = KernelPath::sm90;
  const KernelConfig kept = default_forward_config(p, kSm90a, 0, partial);
  EXPECT_EQ(kept.path, KernelPath::sm90);
  auto named = make_forward_spec(p, kept, kSm90a);
  ASSERT_FALSE(bool(named));
  EXPECT_NE(llvm::toString(named.takeError()).find("head_dim=24"), std::string::npos);
  EXPECT_EQ(default_forward_config(p, kSm90a).path, KernelPath::sm80);
  // Unequal head dims (DeepSeek-V3's 192/128: Q and K tiled as 192, V and
  // O as 128), with the wider one's tiles, chosen on their own as by path.
  p.head_dim_qk = 192;
  p.head_dim_v = 128;
  EXPECT_EQ(sm90_fallback_reason(p, kSm90a), "");
  EXPECT_EQ(default_forward_config(p, kSm90a), default_forward_config(p, kSm90a, 0, partial));
  const KernelConfig unequal = default_forward_config(p, kSm90a, 0, partial);
  EXPECT_EQ(unequal.path, KernelPath::sm90);
  Problem wider = p;
  wider.head_dim_v = 192;
  EXPECT_EQ(unequal, default_forward_config(wider, kSm90a));
  ASSERT_TRUE(bool(make_forward_spec(p, unequal, kSm90a)));
  // K tiles of 192 columns, V tiles of 128: K n x 384 B, V n x 256 B a stage.
  FwdSm90Traits t{192, unequal.block_m, unequal.block_n, unequal.warps, unequal.stages};
  t.head_dim_v = 128;
  EXPECT_EQ(t.layout().k_tile_bytes(), unequal.block_n * 384);
  EXPECT_EQ(t.layout().v_tile_bytes(), unequal.block_n * 256);
  EXPECT_EQ(t.layout().offset_v() - t.layout().offset_k(), unequal.stages * unequal.block_n * 384);
  p.head_dim_qk = 24;
  EXPECT_NE(sm90_fallback_reason(p, kSm90a).find("head_dim=24"), std::string::npos);
  p.head_dim_qk = 128;
  p.head_dim_v = 584;
  EXPECT_NE(sm90_fallback_reason(p, kSm90a).find("head_dim_v=584"), std::string::npos);
  // Head dims between 64, 128, 192 and 256: tiled as the next of them, with
  // its tiles and shared memory.
  for (auto [d, tiled] :
       {std::pair{40, 64}, {72, 128}, {96, 128}, {136, 192}, {160, 192}, {200, 256}}) {
    p.head_dim_qk = p.head_dim_v = d;
    EXPECT_EQ(sm90_fallback_reason(p, kSm90a), "") << d;
    const KernelConfig c = default_forward_config(p, kSm90a);
    EXPECT_EQ(c.path, KernelPath::sm90) << d;
    Problem t = p;
    t.head_dim_qk = t.head_dim_v = tiled;
    EXPECT_EQ(c, default_forward_config(t, kSm90a)) << d;
    auto traits = FwdSm90Traits::make(d, d, c.block_m, c.block_n, c.warps, c.stages, 0);
    auto tiled_traits =
        FwdSm90Traits::make(tiled, tiled, c.block_m, c.block_n, c.warps, c.stages, 0);
    ASSERT_TRUE(bool(traits) && bool(tiled_traits)) << d;
    EXPECT_EQ(traits->smem_bytes(), tiled_traits->smem_bytes()) << d;
  }
  // Nor on a target without wgmma.
  p.head_dim_qk = p.head_dim_v = 128;
  const KernelConfig on_sm80 = default_forward_config(p, TargetArch{8, 0, false}, 0, partial);
  EXPECT_EQ(on_sm80.path, KernelPath::sm90);
  auto wrong_target = make_forward_spec(p, on_sm80, TargetArch{8, 0, false});
  ASSERT_FALSE(bool(wrong_target));
  EXPECT_NE(llvm::toString(wrong_target.takeError()).find("needs an sm_90a target"),
            std::string::npos);
  p.head_dim_qk = p.head_dim_v = 256;
  // A training shape (enough work tiles: no split, nothing to pack).
  p.batch = 8;
  p.heads_q = p.heads_kv = 16;
  p.seqlen_q = p.seqlen_k = 1024;
  KernelConfig training = FwdSm90Traits::default_config(256, 0);
  training.splits = 1;
  training.pack_gqa = GqaPacking::off;
  EXPECT_EQ(default_forward_config(p, kSm90a, 0, partial), training);
  EXPECT_EQ(sm90_fallback_reason(p, kSm90a), "");
  // With no path asked for, the heuristic takes sm90 on sm_90a where it
  // serves the problem, sm80 elsewhere and when the caller fixed a tile.
  EXPECT_EQ(default_forward_config(p, kSm90a), training);
  EXPECT_EQ(default_forward_config(p, TargetArch{8, 0, false}).path, KernelPath::sm80);
  KernelConfig tile;
  tile.block_n = 32;
  EXPECT_EQ(default_forward_config(p, kSm90a, 0, tile).path, KernelPath::sm80);
  KernelConfig sm80_only;
  sm80_only.path = KernelPath::sm80;
  EXPECT_EQ(default_forward_config(p, kSm90a, 0, sm80_only).path, KernelPath::sm80);
}

// One CTA per SM (at most one per work tile) where every work tile costs the
// same (no mask) or the rotation has enough rounds to balance masked tiles;
// otherwise one CTA per work tile, in x (the kernel decodes query block,
// head and batch).
TEST(FwdSm90LaunchGeometry, PersistentWithoutMaskOrWhenRoundsCoverQueryBlocks) {
  auto geometry = [](int d, MaskKind mask, int64_t seqlen, int64_t heads, int64_t batch,
                     int sm_count) {
    Problem p;
    p.head_dim_qk = p.head_dim_v = d;
    p.mask = mask;
    p.window_left = 100;
    p.window_right = 3;
    p.seqlen_q = p.seqlen_k = seqlen;
    p.heads_q = p.heads_kv = heads;
    p.batch = batch;
    auto spec = make_forward_spec(p, default_forward_config(p, kSm90a), kSm90a);
    EXPECT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
    EXPECT_EQ(spec->config.path, KernelPath::sm90);
    return forward_launch_geometry(*spec, p, sm_count);
  };
  // 4 query blocks x 16 heads x 32 batch = 2048 work tiles.
  LaunchGeometry g = geometry(128, MaskKind::none, 512, 16, 32, 132);
  EXPECT_EQ(g.grid.x, 132u);
  EXPECT_EQ(g.grid.y, 1u);
  EXPECT_EQ(g.grid.z, 1u);
  EXPECT_EQ(g.block.x, 384u);
  EXPECT_EQ(geometry(64, MaskKind::none, 512, 16, 32, 132).grid.x, 132u);
  EXPECT_EQ(geometry(128, MaskKind::none, 300, 1, 2, 132).grid.x, 6u);  // fewer tiles than SMs
  EXPECT_EQ(geometry(128, MaskKind::none, 512, 16, 32, 0).grid.x, 2048u);  // SM count unknown
  EXPECT_EQ(geometry(256, MaskKind::none, 8192, 8, 2, 132).grid.x, 132u);
  EXPECT_EQ(geometry(256, MaskKind::none, 512, 16, 32, 132).grid.x, 132u);
  // Masked: one CTA per SM once the rounds (work tiles / SMs) reach the
  // query blocks less one. 8 blocks x 16 heads x 16 batch = 2048 tiles,
  // 15.5 rounds.
  EXPECT_EQ(geometry(128, MaskKind::causal, 1024, 16, 16, 132).grid.x, 132u);
  // 16 blocks, 2048 tiles: 15.5 rounds >= 15.
  EXPECT_EQ(geometry(128, MaskKind::causal, 2048, 16, 8, 132).grid.x, 132u);
  // 17 blocks x 16 x 8 = 2176 tiles: 16.5 rounds >= 16.
  EXPECT_EQ(geometry(128, MaskKind::causal, 2049, 16, 8, 132).grid.x, 132u);
  // 16 blocks x 8 heads x 8 = 1024 tiles: 7.75 rounds < 15.
  EXPECT_EQ(geometry(256, MaskKind::causal, 2048, 8, 8, 132).grid.x, 1024u);
  // 64 blocks, 2048 tiles: 15.5 rounds < 63.
  EXPECT_EQ(geometry(128, MaskKind::causal, 8192, 16, 2, 132).grid.x, 2048u);
  EXPECT_EQ(geometry(128, MaskKind::window, 8192, 16, 2, 132).grid.x, 2048u);
  // Exactly at the bound: 4 blocks x 99 x 4 = 1584 tiles = 3 x 528 SMs.
  EXPECT_EQ(geometry(128, MaskKind::causal, 512, 99, 4, 528).grid.x, 528u);
  EXPECT_EQ(geometry(128, MaskKind::causal, 512, 99, 4, 529).grid.x, 1584u);
}

// Whether a launch is persistent decides whether a masked packed batch gets a
// tile counter (runtime/launch_forward.cpp): it must agree with the grid.
TEST(ForwardSm90Launch, PersistentExactlyWhenTheGridHasFewerCtasThanWorkTiles) {
  auto persistent = [](MaskKind mask, int64_t seqlen, int64_t batch, int sm_count) {
    Problem p;
    p.head_dim_qk = p.head_dim_v = 128;
    p.mask = mask;
    p.seqlen_q = p.seqlen_k = seqlen;
    p.heads_q = p.heads_kv = 16;
    p.batch = batch;
    p.varlen = true;
    auto spec = make_forward_spec(p, default_forward_config(p, kSm90a), kSm90a);
    EXPECT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
    return forward_grid_is_persistent(*spec, p, sm_count);
  };
  EXPECT_TRUE(persistent(MaskKind::causal, 2048, 8, 132));    // 2048 tiles, 15.5 rounds >= 15
  EXPECT_FALSE(persistent(MaskKind::causal, 4096, 5, 132));   // 2560 tiles, 19.4 rounds < 31
  EXPECT_TRUE(persistent(MaskKind::none, 4096, 5, 132));      // unmasked: always, past one wave
  EXPECT_FALSE(persistent(MaskKind::none, 300, 1, 132));      // 48 tiles: one CTA each
  EXPECT_FALSE(persistent(MaskKind::causal, 2048, 8, 0));     // SM count unknown
}

// A config the traits accept, with its threads, Q buffers and shared memory.
void expect_layout(int d, int block_m, int block_n, int warps, int stages, int threads,
                   int q_stages, int smem_bytes) {
  SCOPED_TRACE(::testing::Message() << "d=" << d << " " << block_m << "x" << block_n << " w"
                                  << warps << " s" << stages);
  auto t = FwdSm90Traits::make(d, d, block_m, block_n, warps, stages, 232448);
  ASSERT_TRUE(bool(t)) << llvm::toString(t.takeError());
  EXPECT_EQ(t->threads(), threads);
  EXPECT_EQ(t->q_stages(), q_stages);
  EXPECT_EQ(t->smem_bytes(), smem_bytes);
}

// A config the traits refuse, saying `why`.
void expect_rejected(int d, int block_m, int block_n, int warps, int stages,
                     const std::string &why) {
  auto t = FwdSm90Traits::make(d, d, block_m, block_n, warps, stages, 232448);
  ASSERT_FALSE(bool(t));
  const std::string message = llvm::toString(t.takeError());
  EXPECT_NE(message.find(why), std::string::npos) << message;
}

TEST(FwdSm90Traits, SharedMemoryAndRejections) {
  // Two Q buffers 128x128, 2 x (K + V) 128x128, 2 x 2 Q + 4 x 2 K/V
  // barriers, a tile slot per Q buffer, 1024 alignment slack.
  expect_layout(128, 128, 128, 12, 2, 384, 2, 2 * 32768 + 2 * 2 * 32768 + 12 * 8 + 2 * 8 + 1024);
  // Three stages leave room for one Q buffer only.
  expect_layout(128, 128, 128, 12, 3, 384, 1, 32768 + 3 * 2 * 32768 + 14 * 8 + 8 + 1024);
  // Head dim 256 at block_n 48: two Q buffers of 128x256 fit.
  expect_layout(256, 128, 48, 12, 2, 384, 2, 2 * 65536 + 2 * 2 * 24576 + 12 * 8 + 2 * 8 + 1024);
  expect_rejected(256, 128, 96, 12, 2, "the device allows 232448");
  expect_rejected(128, 128, 144, 12, 2,
                  "block_n=144 exceeds 128 at head dim 128, block_m 128 (the kernel spills; wider "
                  "only without a softcap, a window, a KV cache or modifiers)");
  // Lean problems (FwdSm90Traits::lean) take block_n up to 176 at d=128.
  EXPECT_TRUE(bool(FwdSm90Traits::make(128, 128, 128, 176, 12, 2, 232448, /*lean=*/true)));
  auto too_wide = FwdSm90Traits::make(128, 128, 128, 192, 12, 2, 232448, /*lean=*/true);
  ASSERT_FALSE(bool(too_wide));
  EXPECT_NE(llvm::toString(too_wide.takeError())
                .find("block_n=192 exceeds 176 at head dim 128, block_m 128 (the kernel spills)"),
            std::string::npos);
  for (int d : {64, 128, 256}) EXPECT_FALSE(FwdSm90Traits::search_space(d, 232448).empty());
}

// Three consumer warpgroups (block_m 192, 16 warps) at head dim 64 only,
// block_n up to 112 (128 for lean problems), with FlashAttention-3's 32/160
// register split.
TEST(FwdSm90Traits, ThreeConsumerWarpgroupsAtHeadDim64) {
  // Two Q buffers 192x64, 3 x (K + V) 112x64, 2 x 2 Q + 4 x 3 K/V barriers,
  // 2 tile slots.
  expect_layout(64, 192, 112, 16, 3, 512, 2, 2 * 24576 + 3 * 2 * 14336 + 16 * 8 + 2 * 8 + 1024);
  expect_rejected(64, 192, 128, 16, 2, "block_n=128 exceeds 112 at head dim 64, block_m 192");
  expect_rejected(128, 192, 64, 16, 2, "block_m=192 is not 64 or 128");
  expect_rejected(64, 192, 64, 12, 2,
                  "warps=12 is not 16 (one producer and 3 consumer warpgroups");
  int with_192 = 0;
  for (const KernelConfig &c : FwdSm90Traits::search_space(64, 232448))
    if (c.block_m == 192) {
      ++with_192;
      EXPECT_EQ(c.warps, 16);
      EXPECT_LE(c.block_n, 112);
    }
  EXPECT_EQ(with_192, 5 * 3);  // block_n 48..112 x stages 2..4
  int lean_192 = 0;
  for (const KernelConfig &c : FwdSm90Traits::search_space(64, 232448, /*lean=*/true))
    lean_192 += c.block_m == 192;
  EXPECT_EQ(lean_192, 6 * 3);  // block_n 48..128
  // d=128: block_n 144-176 at 128 rows for lean problems only; decode's
  // 64-row tiles stay block_n 64 and 128 for both.
  auto tiles_of = [](bool lean) {
    std::set<std::pair<int, int>> tiles;
    for (const KernelConfig &c : FwdSm90Traits::search_space(128, 232448, lean))
      tiles.insert({c.block_m, c.block_n});
    return tiles;
  };
  const std::set<std::pair<int, int>> narrow128 = tiles_of(false), lean128 = tiles_of(true);
  for (int block_n : {144, 160, 176}) {
    EXPECT_TRUE(lean128.count({128, block_n})) << block_n;
    EXPECT_FALSE(narrow128.count({128, block_n})) << block_n;
  }
  for (const auto &tiles : {narrow128, lean128}) {
    std::set<int> decode;
    for (const auto &[block_m, block_n] : tiles)
      if (block_m == 64) decode.insert(block_n);
    EXPECT_EQ(decode, (std::set<int>{64, 128}));
  }
  // A caller's modifiers take registers: the widest tiles are refused for a
  // modified kernel, as under a softcap.
  Problem lean;
  lean.head_dim_qk = lean.head_dim_v = 64;
  lean.mask = MaskKind::causal;
  const KernelConfig widest{KernelPath::sm90, 192, 128, 16, 3};
  EXPECT_TRUE(bool(make_forward_spec(lean, widest, kSm90a)));
  auto refused = make_forward_spec(lean, widest, kSm90a, 0, /*modified=*/true);
  ASSERT_FALSE(bool(refused));
  EXPECT_NE(llvm::toString(refused.takeError())
                .find("block_n=128 exceeds 112 at head dim 64, block_m 192 (the kernel spills; "
                      "wider only without a softcap, a window, a KV cache or modifiers)"),
            std::string::npos);
  for (int d : {128, 256})
    for (const KernelConfig &c : FwdSm90Traits::search_space(d, 232448))
      EXPECT_NE(c.block_m, 192) << d;

  // The heuristic takes them beyond 1024 queries (a whole size bucket,
  // ceil(log2)), where 192-row tiles pad little, and without a mask beyond
  // 512 (lean problems: 256); on problems of enough work tiles that nothing
  // splits (nor packs: no GQA). block_n 128 for lean problems, else 112 (96
  // up to 1024).
  auto unsplit = [](KernelConfig c) {
    c.splits = 1;
    c.pack_gqa = GqaPacking::off;
    return c;
  };
  // A caller's block_n 128 keeps them for a lean problem; under a softcap
  // it rules them out: the 128-row tile, still sm90. d=128: 128x160 for
  // lean problems without a mask beyond 2048 queries.
  struct Row {
    int head_dim;
    int64_t seqlen;
    MaskKind mask;
    float softcap;
    bool modified;
    int caller_block_n;  // 0: none
    KernelConfig expected;
  };
  const MaskKind none = MaskKind::none, causal = MaskKind::causal, window = MaskKind::window;
  const KernelConfig k128x128s3{KernelPath::sm90, 128, 128, 12, 3},
      k192x128{KernelPath::sm90, 192, 128, 16, 3}, k192x96{KernelPath::sm90, 192, 96, 16, 3},
      k192x112{KernelPath::sm90, 192, 112, 16, 3}, k128x128s2{KernelPath::sm90, 128, 128, 12, 2},
      k128x160{KernelPath::sm90, 128, 160, 12, 2};
  const Row rows[] = {
      {64, 256, none, 0.f, false, 0, k128x128s3},
      {64, 257, none, 0.f, false, 0, k192x128},
      {64, 512, none, 0.f, false, 0, k192x128},
      {64, 512, none, 0.f, true, 0, k128x128s3},
      {64, 512, none, 30.f, false, 0, k128x128s3},
      {64, 513, none, 0.f, false, 0, k192x128},
      {64, 513, none, 30.f, false, 0, k192x96},
      {64, 1024, none, 0.f, false, 0, k192x128},
      {64, 1024, none, 0.f, true, 0, k192x96},
      {64, 1024, none, 30.f, false, 0, k192x96},
      {64, 1024, causal, 0.f, false, 0, k128x128s3},
      {64, 1024, window, 0.f, false, 0, k128x128s3},
      {64, 1025, window, 0.f, false, 0, k192x112},  // a window: not lean
      {64, 1025, causal, 0.f, false, 0, k192x128},
      {64, 1025, none, 0.f, false, 0, k192x128},
      {64, 1025, none, 0.f, false, 128, k192x128},
      {64, 1025, none, 30.f, false, 128, k128x128s3},
      {128, 8192, none, 0.f, false, 0, k128x160},
      {128, 2048, none, 0.f, false, 0, k128x128s2},
      {128, 8192, causal, 0.f, false, 0, k128x128s2},
      {128, 8192, none, 0.f, true, 0, k128x128s2},
  };
  for (const Row &row : rows) {
    Problem p;
    p.batch = 8;
    p.heads_q = p.heads_kv = 16;
    p.head_dim_qk = p.head_dim_v = row.head_dim;
    p.seqlen_q = p.seqlen_k = row.seqlen;
    p.mask = row.mask;
    p.window_left = 256;
    p.window_right = 0;
    p.softcap = row.softcap;
    KernelConfig caller;
    if (row.caller_block_n) {
      caller.block_n = row.caller_block_n;
      caller.path = KernelPath::sm90;
    }
    EXPECT_EQ(default_forward_config(p, kSm90a, 0, caller, 0, row.modified), unsplit(row.expected))
        << describe(p) << (row.modified ? " modified" : "") << " block_n " << row.caller_block_n;
  }
  // A window that is the causal mask or none (window(-1, 0), window(-1, -1))
  // compiles that kernel, and is lean as it is: the same tiles.
  for (auto [right, seqlen, expected] :
       {std::tuple{int64_t(0), int64_t(1025), k192x128}, {int64_t(-1), int64_t(512), k192x128}}) {
    Problem p;
    p.batch = 8;
    p.heads_q = p.heads_kv = 16;
    p.head_dim_qk = p.head_dim_v = 64;
    p.seqlen_q = p.seqlen_k = seqlen;
    p.mask = MaskKind::window;
    p.window_left = -1;
    p.window_right = right;
    EXPECT_TRUE(FwdSm90Traits::lean(p, false)) << right;
    EXPECT_EQ(default_forward_config(p, kSm90a, 0), unsplit(expected)) << right;
    EXPECT_TRUE(bool(make_forward_spec(p, expected, kSm90a))) << right;
  }
  // K/V in a cache with per-sequence key counts is not lean: a causal
  // serving batch (varlen, packed heads) spilled 16-44 bytes at d=128
  // 128x160-176. The heuristic's d=64 tiles there are 192x112.
  {
    Problem serving;
    serving.batch = 2;
    serving.heads_q = 32;
    serving.heads_kv = 8;
    serving.head_dim_qk = serving.head_dim_v = 64;
    serving.seqlen_q = serving.seqlen_k = 2048;
    serving.mask = MaskKind::causal;
    serving.varlen = serving.seqused_k = true;
    EXPECT_FALSE(FwdSm90Traits::lean(serving, false));
    KernelConfig tiles = default_forward_config(serving, kSm90a, 0);
    EXPECT_EQ(tiles.block_m, 192);
    EXPECT_EQ(tiles.block_n, 112);
    serving.head_dim_qk = serving.head_dim_v = 128;
    KernelConfig wide{KernelPath::sm90, 128, 160, 12, 2};
    wide.pack_gqa = GqaPacking::on;
    auto refused = make_forward_spec(serving, wide, kSm90a);
    ASSERT_FALSE(bool(refused));
    EXPECT_NE(llvm::toString(refused.takeError())
                  .find("block_n=160 exceeds 128 at head dim 128, block_m 128 (the kernel spills; "
                        "wider only without a softcap, a window, a KV cache or modifiers)"),
              std::string::npos);
  }
  Problem p;
  p.batch = 8;
  p.heads_q = p.heads_kv = 16;
  p.head_dim_qk = p.head_dim_v = 64;
  p.seqlen_q = p.seqlen_k = 8192;
  auto spec = make_forward_spec(p, KernelConfig{KernelPath::sm90, 192, 112, 16, 3}, kSm90a);
  ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
  std::optional<WarpRoleRegisters> roles = warp_role_registers(*spec);
  ASSERT_TRUE(roles.has_value());
  EXPECT_EQ(roles->producer, 32);
  EXPECT_EQ(roles->consumer, 160);
  EXPECT_EQ(roles->consumer_warpgroups, 3);
}

}  // namespace
}  // namespace flashjit

namespace flashjit {

// The stand-in for ptxas's report agrees with it (registers, stack).
TEST(ForwardSm90Compile, CuobjdumpResourcesAgreeWithPtxasReport) {
  const std::string cuobjdump = testing::find_cuobjdump();
  if (cuobjdump.empty()) GTEST_SKIP() << "no cuobjdump on PATH or in $FLASHJIT_CUOBJDUMP";
  Problem p;
  p.head_dim_qk = p.head_dim_v = 128;
  p.mask = MaskKind::causal;
  auto spec = make_forward_spec(p, FwdSm90Traits::default_config(128, 0), kSm90a);
  ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
  testing::Sm90Compiled c = testing::compile_sm90_with_report(generate_forward(*spec), kSm90a, "");
  if (c.error.starts_with("no ptxas report"))
    GTEST_SKIP() << "NVRTC's log has no ptxas report for this program here (as on the GPU "
                    "machine): nothing to compare the stand-in with";
  ASSERT_EQ(c.error, "");
  auto stand_in = testing::report_from_cuobjdump(*c.cubin, cuobjdump);
  ASSERT_TRUE(stand_in.has_value());
  EXPECT_EQ(stand_in->registers, c.report.registers);
  EXPECT_EQ(stand_in->stack_frame_bytes, c.report.stack_frame_bytes);
  EXPECT_EQ(stand_in->spill_store_bytes, 0);
}

}  // namespace flashjit
