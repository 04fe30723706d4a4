// The generated forward kernel compiles through NVRTC (no system headers) to
// a cubin for sm_80 and sm_90a, over a sweep of head dims, masks, dtypes,
// softcap and configs — every kind the heuristic or the tuner emits.
#include <gtest/gtest.h>

#include <cstring>

#include "generator/heuristic.h"
#include "generator/kernel_spec.h"
#include "generator/source.h"
#include "runtime/nvrtc_compiler.h"
#include "llvm/Support/ThreadPool.h"

namespace flashjit {
namespace {

struct CompileCase {
  Problem problem;
  KernelConfig config;  // zeros: heuristic
  TargetArch arch;
};

std::vector<CompileCase> sweep() {
  std::vector<CompileCase> cases;
  const TargetArch sm80{8, 0, false}, sm90a{9, 0, true};
  int i = 0;
  for (int d : {8, 32, 40, 64, 72, 96, 128, 160, 200, 256}) {
    for (MaskKind mask : {MaskKind::none, MaskKind::causal, MaskKind::window}) {
      Problem p;
      p.head_dim_qk = p.head_dim_v = d;
      p.mask = mask;
      p.window_left = 64;
      p.window_right = 0;
      p.dtype = (i % 2) ? DType::fp16 : DType::bf16;
      p.softcap = (i % 3 == 0) ? 30.f : 0.f;
      cases.push_back({p, {}, (i % 2) ? sm80 : sm90a});
      ++i;
    }
  }
  // head_dim_v != head_dim_qk, and explicit configs of every shape the tuner
  // can pick (16/32 rows per warp, 1-8 warps, 2-4 stages).
  Problem p;
  p.head_dim_qk = 128;
  p.head_dim_v = 64;
  cases.push_back({p, {}, sm90a});
  p.head_dim_qk = 64;
  p.head_dim_v = 128;
  cases.push_back({p, {}, sm80});
  p.head_dim_v = 64;
  for (KernelConfig c : {KernelConfig{KernelPath::sm80, 32, 64, 1, 2},
                         KernelConfig{KernelPath::sm80, 64, 16, 2, 4},
                         KernelConfig{KernelPath::sm80, 256, 64, 8, 3},
                         KernelConfig{KernelPath::sm80, 128, 128, 4, 2}})
    cases.push_back({p, c, sm90a});
  return cases;
}

TEST(ForwardCompile, SweepCompilesToCubinForSm80AndSm90a) {
  std::vector<CompileCase> cases = sweep();
  std::vector<std::string> failures(cases.size());
  std::vector<size_t> sizes(cases.size(), 0);
  {
    llvm::ThreadPool pool(llvm::hardware_concurrency());
    for (size_t i = 0; i < cases.size(); ++i)
      pool.async([&, i] {
        const CompileCase &c = cases[i];
        KernelConfig config = default_forward_config(c.problem, c.arch, 0, c.config);
        auto spec = make_forward_spec(c.problem, config, c.arch);
        if (!spec) {
          failures[i] = llvm::toString(spec.takeError());
          return;
        }
        GeneratedSource source = generate_forward(*spec);
        auto cubin = compile_to_cubin(source, c.arch);
        if (!cubin) {
          failures[i] = spec->id() + ": " + llvm::toString(cubin.takeError());
          return;
        }
        sizes[i] = cubin->bytes.size();
        // A cubin is an ELF image that defines the entry point.
        const std::vector<char> &b = cubin->bytes;
        if (b.size() < 4 || std::memcmp(b.data(), "\x7f" "ELF", 4) != 0)
          failures[i] = spec->id() + ": not an ELF image";
        else if (std::search(b.begin(), b.end(), source.entry.begin(), source.entry.end()) ==
                 b.end())
          failures[i] = spec->id() + ": entry " + source.entry + " missing";
      });
    pool.wait();
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(failures[i], "") << describe(cases[i].problem) << " on " << cases[i].arch.name();
    EXPECT_GT(sizes[i], 1000u);
  }
}

TEST(ForwardSource, PreludeHoldsEveryConstantAndIncludesTheTemplate) {
  Problem p;
  p.dtype = DType::fp16;
  p.head_dim_qk = 72;
  p.head_dim_v = 40;
  p.mask = MaskKind::window;
  p.window_left = 10;
  p.softcap = 3;
  auto spec = make_forward_spec(p, {KernelPath::sm80, 64, 32, 4, 3}, TargetArch{8, 6, false});
  ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
  GeneratedSource s = generate_forward(*spec);
  EXPECT_EQ(s.entry, "flashjit_fwd_sm80");
  EXPECT_EQ(s.program_name, "fwd_sm80_fp16_hdqk72_hdv40_window_softcap_bm64_bn32_w4_s3_sm_86.cu");
  for (const char *line :
       {"constexpr int kHeadDimQK = 72;", "constexpr int kHeadDimV = 40;",
        "constexpr int kBlockM = 64;", "constexpr int kBlockN = 32;", "constexpr int kWarps = 4;",
        "constexpr int kStages = 3;", "constexpr bool kSoftcap = true;", "using Element = fp16;",
        "using Mask = WindowMask;",
        "using Score = ScorePolicy<Mask, kSoftcap, Modifiers>;", "#include \"fwd_sm80.cuh\""})
    EXPECT_NE(s.source.find(line), std::string::npos) << line;
  // The prelude is short: the kernel lives in the template.
  EXPECT_LT(std::count(s.source.begin(), s.source.end(), '\n'), 32);
  // expanded() inlines every template once, for offline nvcc builds.
  std::string full = s.expanded();
  EXPECT_EQ(full.find("#include \""), std::string::npos);
  EXPECT_NE(full.find("flashjit_fwd_sm80(const flashjit::FwdParams p)"), std::string::npos);
  EXPECT_EQ(templates_hash().size(), 64u);
}

}  // namespace
}  // namespace flashjit
