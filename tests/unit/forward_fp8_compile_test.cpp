// The e4m3 forward (templates/fwd_sm90.cuh with Element e4m3: k32 wgmma, V
// transposed in shared memory, P in e4m3) compiles through NVRTC to sm_90a
// cubins for the head dims, masks, softcap, GQA packing, split-KV, varlen
// and paged K/V it claims, with no spills and asynchronous wgmmas; and the
// problems it cannot serve are refused by name.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "generator/backward_spec.h"
#include "generator/fwd_sm90_traits.h"
#include "generator/heuristic.h"
#include "generator/kernel_spec.h"
#include "generator/source.h"
#include "sm90_compile_check.h"

namespace flashjit {
namespace {

const TargetArch kSm90a{9, 0, true};
const TargetArch kSm80{8, 0, false};

Problem fp8_problem(int d_qk, int d_v = 0) {
  Problem p;
  p.dtype = DType::e4m3;
  p.head_dim_qk = d_qk;
  p.head_dim_v = d_v > 0 ? d_v : d_qk;
  p.batch = 2;
  p.heads_q = 8;
  p.heads_kv = 8;
  p.seqlen_q = p.seqlen_k = 4096;
  return p;
}

std::string message(llvm::Error e) { return llvm::toString(std::move(e)); }

llvm::Expected<KernelSpec> heuristic_spec(const Problem &p) {
  return make_forward_spec(p, default_forward_config(p, kSm90a), kSm90a);
}

TEST(ForwardFp8Spec, TheHeuristicTakesTheE4m3Tiles) {
  for (int d : {64, 128, 256}) {
    SCOPED_TRACE(d);
    const Problem p = fp8_problem(d);
    const KernelConfig c = default_forward_config(p, kSm90a);
    EXPECT_EQ(c.path, KernelPath::sm90);
    EXPECT_EQ(c.block_m, 128);
    EXPECT_EQ(c.block_n, 128);
    EXPECT_EQ(c.stages, d <= 128 ? 3 : 2);
    auto spec = make_forward_spec(p, c, kSm90a);
    ASSERT_TRUE(static_cast<bool>(spec)) << message(spec.takeError());
    EXPECT_EQ(spec->dtype, DType::e4m3);
    EXPECT_EQ(spec->out_dtype, DType::bf16);
    EXPECT_NE(spec->id().find("_e4m3_"), std::string::npos) << spec->id();
    EXPECT_NE(spec->id().find("_obf16"), std::string::npos) << spec->id();
  }
  // An e4m3 cache under bf16 queries: the e4m3 tiles, its own kernel id.
  Problem cache = fp8_problem(128);
  cache.dtype = DType::bf16;
  cache.kv_dtype = KvDType::e4m3;
  auto cached = heuristic_spec(cache);
  ASSERT_TRUE(static_cast<bool>(cached)) << message(cached.takeError());
  EXPECT_EQ(cached->config.block_n, 128);
  EXPECT_EQ(cached->kv_dtype, DType::e4m3);
  EXPECT_EQ(cached->out_dtype, DType::bf16);
  EXPECT_NE(cached->id().find("_bf16_"), std::string::npos) << cached->id();
  EXPECT_NE(cached->id().find("_kve4m3"), std::string::npos) << cached->id();
  // The 16-bit kernels' ids are as they were: no output suffix.
  Problem bf16 = fp8_problem(128);
  bf16.dtype = DType::bf16;
  auto spec = heuristic_spec(bf16);
  ASSERT_TRUE(static_cast<bool>(spec));
  EXPECT_EQ(spec->id().find("_obf16"), std::string::npos) << spec->id();
}

TEST(ForwardFp8Spec, RefusesWhatItCannotServe) {
  // The sm80 family has no fp8 kernel.
  Problem p = fp8_problem(128);
  auto sm80 = make_forward_spec(p, default_forward_config(p, kSm80), kSm80);
  ASSERT_FALSE(static_cast<bool>(sm80));
  EXPECT_NE(message(sm80.takeError()).find("dtype=e4m3 needs the sm90 kernel family"),
            std::string::npos);
  // Head dims of whole 16 bytes.
  Problem d40 = fp8_problem(40);
  EXPECT_EQ(message(validate_problem(d40)),
            "head_dim_qk=40 is not supported with e4m3: expected a multiple of 16 (TMA moves "
            "rows of whole 16 bytes)");
  // Tiles other than the ones laid out for e4m3.
  KernelConfig wide = default_forward_config(p, kSm90a);
  wide.block_n = 176;
  auto refused = make_forward_spec(p, wide, kSm90a);
  ASSERT_FALSE(static_cast<bool>(refused));
  EXPECT_NE(message(refused.takeError()).find("block_n=176 is not 128 with e4m3"),
            std::string::npos);
  // A 16-bit problem's output is its own dtype.
  Problem out = fp8_problem(128);
  out.dtype = DType::bf16;
  out.out_dtype = OutDType::fp16;
  EXPECT_EQ(message(validate_problem(out)),
            "out_dtype=fp16 with dtype=bf16: a 16-bit problem's output has its own dtype; leave "
            "out_dtype auto");
  // No fp8 backward.
  EXPECT_NE(message(make_backward_spec(p, KernelConfig{}, kSm90a).takeError())
                .find("the fp8 backward is not supported"),
            std::string::npos);
}

struct Fp8Case {
  std::string what;
  Problem problem;
  KernelConfig config;  // path automatic: the heuristic's
  // Known spills: the 256-column tile under a causal mask (no
  // intra-warpgroup overlap, 224 consumer registers, generator/warp_roles.cpp).
  int allowed_spill_bytes = 0;
};

std::vector<Fp8Case> fp8_cases() {
  std::vector<Fp8Case> cases;
  for (int d : {64, 96, 128, 192, 256})
    for (MaskKind mask : {MaskKind::none, MaskKind::causal}) {
      Problem p = fp8_problem(d);
      p.mask = mask;
      const bool known_spill = d > 128 && mask == MaskKind::causal;
      cases.push_back({"d" + std::to_string(d) + "_" + to_string(mask), p, {}, known_spill ? 36 : 0});
    }
  Problem unequal = fp8_problem(192, 128);
  unequal.mask = MaskKind::causal;
  cases.push_back({"192/128 causal", unequal, {}, 36});
  Problem window = fp8_problem(128);
  window.mask = MaskKind::window;
  window.window_left = 256;
  window.window_right = 0;
  window.softcap = 30.f;
  window.out_dtype = OutDType::fp16;
  cases.push_back({"window softcap fp16 out", window, {}});
  Problem decode = fp8_problem(128);
  decode.heads_q = 32;
  decode.seqlen_q = 1;
  decode.seqlen_k = 8192;
  decode.seqused_k = true;
  decode.page_size = 64;
  KernelConfig split;
  split.splits = 4;
  split.pack_gqa = GqaPacking::on;
  cases.push_back({"decode paged packed split", decode, split});
  Problem append = fp8_problem(128);  // a dense batch's cache: the append kernel is in the program
  append.heads_q = 32;
  append.seqlen_q = 1;
  append.seqlen_k = 4096;
  append.seqused_k = true;
  cases.push_back({"decode with append", append, {}});
  // An e4m3 cache under 16-bit queries: Q quantized per row in the kernel,
  // new bf16 keys quantized into the cache by the append.
  Problem cache = fp8_problem(128);
  cache.dtype = DType::bf16;
  cache.kv_dtype = KvDType::e4m3;
  cache.heads_q = 32;
  cache.seqlen_q = 1;
  cache.seqlen_k = 8192;
  cache.seqused_k = true;
  cases.push_back({"bf16 q, e4m3 cache, append", cache, {}});
  Problem paged_cache = cache;
  paged_cache.dtype = DType::fp16;
  paged_cache.page_size = 16;
  cases.push_back({"fp16 q, e4m3 paged cache, packed split", paged_cache, split});
  Problem wide_cache = cache;  // 64 rows: 128 of a 16-bit Q do not fit at 256
  wide_cache.head_dim_qk = wide_cache.head_dim_v = 256;
  cases.push_back({"bf16 q, e4m3 cache, d256", wide_cache, {}});
  Problem serving = cache;
  serving.varlen = true;
  serving.page_size = 64;
  serving.mask = MaskKind::causal;
  serving.seqlen_q = 2048;
  cases.push_back({"bf16 q, e4m3 serving batch", serving, {}});
  Problem varlen = fp8_problem(128);
  varlen.varlen = true;
  varlen.mask = MaskKind::causal;
  cases.push_back({"varlen causal", varlen, {}});
  Problem gqa = fp8_problem(256);
  gqa.heads_q = 32;
  gqa.mask = MaskKind::causal;
  cases.push_back({"d256 gqa causal", gqa, {}, 36});
  return cases;
}

TEST(ForwardFp8Compile, EveryVariantCompilesWithoutSpills) {
  const std::vector<Fp8Case> cases = fp8_cases();
  auto compiled = testing::compile_forward_variants(
      cases.size(),
      [&](size_t i) -> llvm::Expected<KernelSpec> {
        const Fp8Case &c = cases[i];
        const KernelConfig config = default_forward_config(c.problem, kSm90a, 0, c.config);
        return make_forward_spec(c.problem, config, kSm90a);
      },
      kSm90a);
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].what);
    testing::expect_clean(compiled[i], {"flashjit_fwd_sm90"}, cases[i].allowed_spill_bytes);
    if (cases[i].problem.seqused_k && !cases[i].problem.varlen && compiled[i].result.cubin) {
      const std::string bytes(compiled[i].result.cubin->bytes.begin(),
                              compiled[i].result.cubin->bytes.end());
      EXPECT_NE(bytes.find("flashjit_kv_append"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace flashjit
