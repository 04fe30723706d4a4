// KernelSpec::id() read back (generator/kernel_id.h): every spec the tuner
// can compile regenerates from its id to the very program it names (the
// same cubin key), and an id flashjit does not write is refused by name.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "generator/backward_spec.h"
#include "generator/kernel_id.h"
#include "generator/source.h"
#include "runtime/tuning_key.h"
#include "tuner/backward_candidates.h"
#include "tuner/candidates.h"

namespace flashjit {
namespace {

std::string key_of(const KernelSpec &spec) {
  const GeneratedSource source =
      spec.pass == Pass::backward ? generate_backward(spec) : generate_forward(spec);
  return cubin_key(source, spec.arch, "13.0");
}

Problem problem(int d) {
  Problem p;
  p.batch = 2;
  p.heads_q = 8;
  p.heads_kv = 2;
  p.seqlen_q = 37;
  p.seqlen_k = 1023;
  p.head_dim_qk = p.head_dim_v = d;
  return p;
}

// The forward and backward candidates of problems that reach every field of
// an id: both families, GQA packing, splits, a paged cache with per-sequence
// lengths, a packed batch, an fp8 KV cache with a 16-bit output, windows,
// softcap, the deterministic backward.
std::vector<KernelSpec> specs_to_check() {
  const TargetArch sm80{8, 0, false}, sm90a{9, 0, true};
  std::vector<KernelSpec> out;
  std::vector<std::pair<Problem, TargetArch>> forward;
  Problem decode = problem(128);
  decode.seqlen_q = 1;
  decode.seqlen_k = 8192;
  decode.mask = MaskKind::causal;
  forward.push_back({decode, sm90a});
  forward.push_back({decode, sm80});
  Problem paged = decode;
  paged.page_size = 64;
  paged.seqused_k = true;
  forward.push_back({paged, sm90a});
  Problem packed = problem(64);
  packed.varlen = true;
  packed.mask = MaskKind::window;
  packed.window_left = 100;
  packed.window_right = 0;
  packed.softcap = 30.f;
  forward.push_back({packed, sm80});
  Problem fp8_cache = decode;
  fp8_cache.kv_dtype = KvDType::e4m3;
  forward.push_back({fp8_cache, sm90a});
  Problem fp8 = problem(128);
  fp8.dtype = DType::e4m3;
  fp8.out_dtype = OutDType::fp16;
  forward.push_back({fp8, sm90a});
  Problem chunked = problem(128);
  chunked.mask = MaskKind::causal;
  chunked.attention_chunk = 1024;
  forward.push_back({chunked, sm90a});
  // Past head dim 256 (two warpgroups per 64 rows): Gemma 4's 512, MLA's
  // 576/512 decode over 128 heads packed in parts, with V read from K's
  // tiles (_vink).
  Problem wide = problem(512);
  wide.heads_q = 8;
  wide.heads_kv = 4;
  forward.push_back({wide, sm90a});
  Problem mla = decode;
  mla.head_dim_qk = 576;
  mla.head_dim_v = 512;
  mla.heads_q = 128;
  mla.heads_kv = 1;
  forward.push_back({mla, sm90a});
  for (const auto &[p, arch] : forward)
    for (const KernelConfig &c : forward_candidates(p, arch, 0).configs) {
      auto spec = make_forward_spec(p, c, arch);
      if (!spec) {
        llvm::consumeError(spec.takeError());
        continue;
      }
      out.push_back(*spec);
      if (p.head_dim_qk == 576) {
        spec->v_in_k = true;
        out.push_back(*spec);
      }
    }
  for (bool deterministic : {false, true})
    for (const TargetArch &arch : {sm80, sm90a}) {
      Problem p = problem(64);
      p.mask = MaskKind::causal;
      p.dtype = DType::fp16;
      p.attention_chunk = deterministic ? 0 : 512;  // a chunked backward of each family
      for (const KernelConfig &c : backward_candidates(p, arch, 0, deterministic).configs) {
        auto spec = make_backward_spec(p, c, arch, 0);
        if (spec) out.push_back(*spec);
        else llvm::consumeError(spec.takeError());
      }
    }
  return out;
}

TEST(KernelId, EveryCandidateRegeneratesFromItsId) {
  const std::vector<KernelSpec> specs = specs_to_check();
  ASSERT_GT(specs.size(), 40u);
  // Each field of an id is reached by at least one spec.
  for (const char *field : {"fwd_sm90", "fwd_sm80", "bwd_sm80", "bwd_sm90", "_det_", "_gqa",
                            "_split", "_seqused", "_page64", "_varlen", "_chunk", "_kve4m3",
                            "_ofp16", "_vink", "_gqa64_", "hdqk512_hdv512", "_w12_",
                            "_window_", "_softcap_", "_causal_"})
    EXPECT_TRUE(llvm::any_of(specs, [&](const KernelSpec &s) {
      return llvm::StringRef(s.id()).contains(field);
    })) << field;
  for (const KernelSpec &spec : specs) {
    auto parsed = parse_kernel_id(spec.id());
    ASSERT_TRUE(bool(parsed)) << llvm::toString(parsed.takeError());
    EXPECT_EQ(parsed->modifiers_hash, "");
    EXPECT_EQ(parsed->spec.id(), spec.id());
    EXPECT_EQ(key_of(parsed->spec), key_of(spec)) << spec.id();
  }
}

TEST(KernelId, AModifiedKernelNamesOnlyItsModifiersHash) {
  Problem p = problem(64);
  auto spec = make_forward_spec(p, {KernelPath::sm80, 64, 64, 4, 2, false, 1, GqaPacking::off},
                                {8, 0, false}, 0, /*modified=*/true);
  ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
  spec->modifiers.score_mod = "score = score * 0.5f;";
  const std::string id = spec->id();
  auto parsed = parse_kernel_id(id);
  ASSERT_TRUE(bool(parsed)) << llvm::toString(parsed.takeError());
  EXPECT_EQ(parsed->modifiers_hash.size(), 16u);
  EXPECT_NE(id.find("_mod" + parsed->modifiers_hash + "_sm_80"), std::string::npos) << id;
  EXPECT_TRUE(parsed->spec.modifiers.empty());
}

TEST(KernelId, IdsFlashjitDoesNotWriteAreRefusedByName) {
  const std::string good = "fwd_sm80_bf16_hdqk64_hdv64_causal_nocap_bm128_bn64_w4_s2_sm_80";
  ASSERT_TRUE(bool(parse_kernel_id(good)));
  const std::pair<std::string, std::string> cases[] = {
      {"reference_attention_sm_90a", "too few fields for a kernel id"},
      {"fwd_sm80_bf16_hdqk64_hdv64_causal_nocap_bm128_bn64_w4_s2_sm_75",
       "architecture 'sm_75' not understood: expected sm_XY or sm_XYa with XY >= 80 (sm_80, "
       "sm_86, sm_89, sm_90a)"},
      {"up_sm80_bf16_hdqk64_hdv64_causal_nocap_bm128_bn64_w4_s2_sm_80",
       "'up' is not a pass (fwd or bwd)"},
      {"fwd_sm99_bf16_hdqk64_hdv64_causal_nocap_bm128_bn64_w4_s2_sm_80",
       "'sm99' is not a kernel path (sm80 or sm90)"},
      {"fwd_sm80_fp32_hdqk64_hdv64_causal_nocap_bm128_bn64_w4_s2_sm_80", "'fp32' is not a dtype"},
      {"fwd_sm80_bf16_hdqk0_hdv64_causal_nocap_bm128_bn64_w4_s2_sm_80", "'hdqk0' is not hdqk<N>"},
      {"fwd_sm80_bf16_hdqk64_hdv64_causal_nocap_bm128_bn64_w4_s2_gqa100000_sm_80",
       "'gqa100000' is not gqa<N>"},
      {"fwd_sm80_bf16_hdqk64_hdv64_causal_nocap_bm128_bn64_w99999999999_s2_sm_80",
       "'w99999999999' is not w<N>"},
      {"fwd_sm80_bf16_hdqk64_hdv64_diagonal_nocap_bm128_bn64_w4_s2_sm_80",
       "'diagonal' is not a mask (none, causal or window)"},
      {"fwd_sm80_bf16_hdqk64_hdv64_causal_cap_bm128_bn64_w4_s2_sm_80",
       "'cap' is not softcap or nocap"},
      {"fwd_sm80_bf16_hdqk64_hdv64_causal_nocap_bm128_bn64_w4_s2_evil_sm_80",
       "'evil' is not a field of a kernel id"},
      {"fwd_sm80_bf16_hdqk64_hdv64_causal_nocap_bm128_bn64_w4_s2_modXYZ_sm_80",
       "'modXYZ' is not mod<16 hex digits>"},
      {"fwd_sm80_bf16_hdqk064_hdv64_causal_nocap_bm128_bn64_w4_s2_sm_80",
       "not as flashjit writes it ('fwd_sm80_bf16_hdqk64_hdv64_causal_nocap_bm128_bn64_w4_s2_sm_80')"},
      {"fwd_sm80_bf16_hdqk64_hdv64_causal_nocap_bm128_bn64_w4_s2_split_det_sm_80",
       "not as flashjit writes it "
       "('fwd_sm80_bf16_hdqk64_hdv64_causal_nocap_bm128_bn64_w4_s2_det_split_sm_80')"},
      {"fwd_sm80_bf16_hdqk64_hdv64_causal_nocap_bm128_bn64_w4_s2_kvbf16_sm_80",
       "not as flashjit writes it ('fwd_sm80_bf16_hdqk64_hdv64_causal_nocap_bm128_bn64_w4_s2_sm_80')"},
      // V from K's tiles where V's tiles are wider than K's (264: 384 and
      // 320 columns), and on the sm80 family.
      {"fwd_sm90_bf16_hdqk264_hdv264_none_nocap_bm64_bn32_w12_s2_vink_sm_90a",
       "vink: V is read from K's tiles only by the 16-bit sm90 forward, with V's tiled "
       "columns within K's"},
      {"fwd_sm80_bf16_hdqk64_hdv64_causal_nocap_bm128_bn64_w4_s2_vink_sm_80",
       "vink: V is read from K's tiles only by the 16-bit sm90 forward, with V's tiled "
       "columns within K's"},
  };
  for (const auto &[id, why] : cases) {
    auto parsed = parse_kernel_id(id);
    ASSERT_FALSE(bool(parsed)) << id;
    EXPECT_EQ(llvm::toString(parsed.takeError()), "kernel id '" + id + "': " + why);
  }
}

}  // namespace
}  // namespace flashjit
