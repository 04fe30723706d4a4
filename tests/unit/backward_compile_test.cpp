// The backward program (preprocess, main, dQ conversion) compiles through
// NVRTC for sm_80 and sm_90a for every head dim and config kind the
// heuristic emits, and the host traits accept exactly what the kernel's
// static_asserts accept.
#include <gtest/gtest.h>

#include <cstring>

#include "generator/backward_spec.h"
#include "generator/source.h"
#include "runtime/nvrtc_compiler.h"
#include "llvm/Support/ThreadPool.h"
#include "sm90_compile_check.h"

namespace flashjit {
namespace {

const TargetArch kSm80{8, 0, false}, kSm90a{9, 0, true};

TEST(BackwardCompile, EveryHeadDimAndConfigCompiles) {
  struct Item {
    Problem problem;
    KernelConfig config;
    TargetArch arch;
  };
  std::vector<Item> items;
  int i = 0;
  for (int d = 32; d <= 256; d += 8, ++i) {
    Problem p;
    p.head_dim_qk = p.head_dim_v = d;
    p.dtype = i % 2 ? DType::fp16 : DType::bf16;
    p.mask = i % 3 == 0 ? MaskKind::none : i % 3 == 1 ? MaskKind::causal : MaskKind::window;
    p.window_left = 16;
    p.softcap = i % 4 == 0 ? 20.f : 0.f;
    const TargetArch arch = i % 5 == 0 ? kSm80 : kSm90a;
    items.push_back({p, default_backward_config(p, arch), arch});
  }
  Problem p;
  p.head_dim_qk = p.head_dim_v = 64;
  for (KernelConfig c : {KernelConfig{KernelPath::sm80, 64, 64, 4, 2},
                         KernelConfig{KernelPath::sm80, 128, 64, 8, 2},
                         KernelConfig{KernelPath::sm80, 64, 64, 8, 1}})
    items.push_back({p, c, kSm90a});
  p.head_dim_qk = 128;
  p.head_dim_v = 64;
  items.push_back({p, default_backward_config(p, kSm90a), kSm90a});
  // Deterministic programs (dQ kernel instead of the conversion).
  for (int d : {64, 136, 256}) {
    Problem dp;
    dp.head_dim_qk = dp.head_dim_v = d;
    dp.mask = MaskKind::causal;
    KernelConfig det;
    det.deterministic = true;
    items.push_back({dp, default_backward_config(dp, kSm90a, 0, det), kSm90a});
  }

  std::vector<std::string> failures(items.size());
  {
    llvm::ThreadPool pool(llvm::hardware_concurrency());
    for (size_t j = 0; j < items.size(); ++j)
      pool.async([&, j] {
        auto spec = make_backward_spec(items[j].problem, items[j].config, items[j].arch);
        if (!spec) {
          failures[j] = llvm::toString(spec.takeError());
          return;
        }
        GeneratedSource source = generate_backward(*spec);
        auto cubin = compile_to_cubin(source, items[j].arch);
        if (!cubin) {
          failures[j] = spec->id() + ": " + llvm::toString(cubin.takeError());
          return;
        }
        for (const std::string &entry : source.entries)
          if (std::search(cubin->bytes.begin(), cubin->bytes.end(), entry.begin(), entry.end()) ==
              cubin->bytes.end())
            failures[j] = spec->id() + ": entry " + entry + " missing";
      });
    pool.wait();
  }
  for (size_t j = 0; j < items.size(); ++j)
    EXPECT_EQ(failures[j], "") << describe(items[j].problem) << " " << describe(items[j].config);
}

// Past head dim 256 (Gemma 4's 512, MLA's 576/512) the sm80 family's
// backward serves sm_90a too: 32 keys a CTA, 8 warps, one Q/dO buffer; dQ in
// chunks of 64 columns. ptxas spills at most a few words there; on an A100
// (163 KB) shared memory refuses it by name.
TEST(BackwardCompile, PastHeadDim256) {
  const std::string cuobjdump = testing::find_cuobjdump();
  std::vector<Problem> problems;
  for (auto [dqk, dv] : {std::pair{320, 320}, {384, 384}, {448, 448}, {512, 512}, {576, 512}}) {
    Problem p;
    p.head_dim_qk = dqk;
    p.head_dim_v = dv;
    p.heads_q = 8;
    p.heads_kv = dqk == 576 ? 1 : 4;
    p.mask = MaskKind::causal;
    p.softcap = dqk == 512 ? 30.f : 0.f;
    problems.push_back(p);
  }
  std::vector<testing::Sm90Compiled> results(problems.size());
  std::vector<std::string> ids(problems.size());
  {
    llvm::ThreadPool pool(llvm::hardware_concurrency());
    for (size_t i = 0; i < problems.size(); ++i)
      pool.async([&, i] {
        const KernelConfig config = default_backward_config(problems[i], kSm90a);
        auto spec = make_backward_spec(problems[i], config, kSm90a);
        if (!spec) {
          results[i].error = llvm::toString(spec.takeError());
          return;
        }
        ids[i] = spec->id();
        results[i] = testing::compile_sm90_with_report(generate_backward(*spec), kSm90a, cuobjdump);
      });
    pool.wait();
  }
  for (size_t i = 0; i < problems.size(); ++i) {
    SCOPED_TRACE(describe(problems[i]) + " " + ids[i]);
    ASSERT_EQ(results[i].error, "");
    EXPECT_NE(ids[i].find("bwd_sm80_"), std::string::npos);
    EXPECT_NE(ids[i].find("_bm64_bn32_w8_s1_"), std::string::npos);
    EXPECT_LE(results[i].report.spill_store_bytes, 32);
  }
  auto on_a100 = make_backward_spec(problems[3], default_backward_config(problems[3], kSm80), kSm80);
  ASSERT_FALSE(bool(on_a100));
  EXPECT_NE(llvm::toString(on_a100.takeError()).find("shared memory"), std::string::npos);
}

TEST(BackwardSpec, ValidatesConfigs) {
  Problem p;
  // On sm_90a the heuristic takes the sm90 family (its own tests:
  // backward_sm90_compile_test.cpp), in the deterministic mode too.
  auto ok = make_backward_spec(p, default_backward_config(p, kSm90a), kSm90a);
  ASSERT_TRUE(bool(ok)) << llvm::toString(ok.takeError());
  EXPECT_EQ(ok->id(), "bwd_sm90_bf16_hdqk128_hdv128_none_nocap_bm64_bn128_w12_s2_sm_90a");
  auto on_a100 = make_backward_spec(p, default_backward_config(p, kSm80), kSm80);
  ASSERT_TRUE(bool(on_a100)) << llvm::toString(on_a100.takeError());
  EXPECT_EQ(on_a100->id(), "bwd_sm80_bf16_hdqk128_hdv128_none_nocap_bm64_bn128_w8_s2_sm_80");
  KernelConfig det_request;
  det_request.deterministic = true;
  KernelConfig det90 = default_backward_config(p, kSm90a, 0, det_request);
  auto det90_spec = make_backward_spec(p, det90, kSm90a);
  ASSERT_TRUE(bool(det90_spec));
  EXPECT_EQ(det90_spec->id(),
            "bwd_sm90_bf16_hdqk128_hdv128_none_nocap_bm64_bn128_w12_s2_det_sm_90a");
  // Its dQ reduce-adds are ordered in the main kernel, which the usual
  // conversion follows: no dQ kernel.
  const GeneratedSource det90_source = generate_backward(*det90_spec);
  EXPECT_EQ(det90_source.entries.back(), "flashjit_bwd_convert_dq");
  EXPECT_NE(det90_source.source.find("constexpr bool kDeterministic = true;"), std::string::npos);
  // On an A100 the sm80 family's: dQ from its own kernel.
  KernelConfig det = default_backward_config(p, kSm80, 0, det_request);
  auto det_spec = make_backward_spec(p, det, kSm80);
  ASSERT_TRUE(bool(det_spec));
  EXPECT_EQ(det_spec->id(), "bwd_sm80_bf16_hdqk128_hdv128_none_nocap_bm64_bn128_w8_s2_det_sm_80");
  const GeneratedSource det_source = generate_backward(*det_spec);
  EXPECT_EQ(det_source.entries.back(), "flashjit_bwd_dq");
  EXPECT_NE(det_source.source.find("#include \"bwd_dq_sm80.cuh\""), std::string::npos);
  EXPECT_NE(det_source.source.find("constexpr bool kDeterministic = true;"), std::string::npos);
  auto stages = make_backward_spec(p, {KernelPath::sm80, 64, 128, 8, 3}, kSm90a);
  ASSERT_FALSE(bool(stages));
  EXPECT_EQ(llvm::toString(stages.takeError()),
            "sm80 backward config (block_m=64 block_n=128 warps=8 stages=3, d=128 dv=128) is "
            "invalid: stages=3 is not 1 or 2 (Q/dO buffers)");
  // d=256 on an A100 (163 KB) single-buffers Q and dO.
  Problem wide;
  wide.head_dim_qk = wide.head_dim_v = 256;
  EXPECT_EQ(default_backward_config(wide, kSm80).stages, 1);
  EXPECT_EQ(default_backward_config(wide, kSm90a, 0, KernelConfig{KernelPath::sm80}).stages, 2);
  // 32 keys over 8 warps: only past head dim 256 (PastHeadDim256).
  auto tiny = make_backward_spec(p, {KernelPath::sm80, 64, 32, 8, 2}, kSm90a);
  ASSERT_FALSE(bool(tiny));
  EXPECT_NE(llvm::toString(tiny.takeError()).find("block_n=32 leaves a warp less than 16 keys"),
            std::string::npos);
  // Past 256, 64 keys would take 256 fp32 accumulators a thread for dK and
  // dV (and 32 for S^T and dP^T).
  Problem d512;
  d512.head_dim_qk = d512.head_dim_v = 512;
  auto too_many = make_backward_spec(d512, {KernelPath::sm80, 64, 64, 8, 1}, kSm90a);
  ASSERT_FALSE(bool(too_many));
  EXPECT_EQ(llvm::toString(too_many.takeError()),
            "sm80 backward config (block_m=64 block_n=64 warps=8 stages=1, d=512 dv=512) is "
            "invalid: 288 fp32 accumulators per thread exceed 200; use more warps or smaller "
            "tiles; needs 279040 bytes of shared memory, the device allows 232448");
  // 192/128: 128 keys (one stage) in either mode, with a mask or without,
  // the head-dim split (two stages) with a caller's modifiers; a key tile
  // the caller names brings its own stages.
  Problem ds;
  ds.head_dim_qk = 192;
  ds.head_dim_v = 128;
  const KernelConfig wide_keys{KernelPath::sm90, 64, 128, 12, 1};
  const KernelConfig split{KernelPath::sm90, 64, 64, 12, 2};
  auto deterministic = [](KernelConfig c) {
    c.deterministic = true;
    return c;
  };
  EXPECT_EQ(default_backward_config(ds, kSm90a), wide_keys);
  ds.mask = MaskKind::causal;
  EXPECT_EQ(default_backward_config(ds, kSm90a), wide_keys);
  EXPECT_EQ(default_backward_config(ds, kSm90a, 0, det_request),
            deterministic(wide_keys));
  EXPECT_EQ(default_backward_config(ds, kSm90a, 0, det_request, /*modified=*/true),
            deterministic(split));
  ds.mask = MaskKind::none;
  EXPECT_EQ(default_backward_config(ds, kSm90a, 0, {}, /*modified=*/true), split);
  ds.mask = MaskKind::causal;
  EXPECT_EQ(default_backward_config(ds, kSm90a, 0, {}, /*modified=*/true), split);
  KernelConfig named;
  named.path = KernelPath::sm90;
  named.block_n = 128;
  EXPECT_EQ(default_backward_config(ds, kSm90a, 0, named, /*modified=*/true), wide_keys);
  named.block_n = 64;
  ds.mask = MaskKind::none;
  EXPECT_EQ(default_backward_config(ds, kSm90a, 0, named), split);
  // d=256 at 64x128 needs 256 KB of shared memory.
  p.head_dim_qk = p.head_dim_v = 256;
  auto big = make_backward_spec(p, {KernelPath::sm80, 64, 128, 8, 2}, kSm90a);
  ASSERT_FALSE(bool(big));
  EXPECT_NE(llvm::toString(big.takeError()).find("the device allows 232448"), std::string::npos);
}

}  // namespace
}  // namespace flashjit
