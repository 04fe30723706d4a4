// Learned attention sinks (Modifiers::sinks) without a GPU: the
// flag in the prelude, the hash and the kernel ID; the backward's extra step
// (flashjit_bwd_sink_grad, one CTA per head); the forward programs (sm90
// unsplit and split with its combine, sm80) and the backward programs (sm90
// default and deterministic, sm80) compiled for sm_90a / sm_80 spill-free
// with their entries; the call's checks of the sinks' pointers; the
// combine's sink arithmetic against float64; the CLI's --sinks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "cli_runner.h"
#include "flashjit/backward.h"
#include "flashjit/forward.h"
#include "generator/backward_spec.h"
#include "generator/backward_steps.h"
#include "generator/heuristic.h"
#include "generator/kernel_spec.h"
#include "generator/modifier_source.h"
#include "generator/source.h"
#include "llvm/Support/ThreadPool.h"
#include "runtime/launch_forward.h"
#include "sm90_compile_check.h"
#include "templates/common/split_merge.cuh"

namespace flashjit {
namespace {

const TargetArch kSm80{8, 0, false}, kSm90a{9, 0, true};

Problem problem_of(MaskKind mask = MaskKind::causal) {
  Problem p;
  p.batch = 2;
  p.heads_q = 16;
  p.heads_kv = 4;
  p.seqlen_q = p.seqlen_k = 2048;
  p.mask = mask;
  return p;
}

Modifiers sinks_only() {
  Modifiers m;
  m.sinks = true;
  return m;
}

KernelSpec forward_spec(const Problem &p, const TargetArch &arch, KernelConfig request = {}) {
  auto spec = make_forward_spec(p, default_forward_config(p, arch, 0, request, 132), arch);
  EXPECT_TRUE(bool(spec)) << (spec ? "" : llvm::toString(spec.takeError()));
  KernelSpec s = spec ? *spec : KernelSpec{};
  s.modifiers = sinks_only();
  return s;
}

KernelSpec backward_spec(const Problem &p, const TargetArch &arch, KernelConfig request = {}) {
  const KernelConfig config = default_backward_config(p, arch, 0, request, /*modified=*/true);
  auto spec = make_backward_spec(p, config, arch);
  EXPECT_TRUE(bool(spec)) << (spec ? "" : llvm::toString(spec.takeError()));
  KernelSpec s = spec ? *spec : KernelSpec{};
  s.modifiers = sinks_only();
  return s;
}

TEST(Sinks, TheFlagKeysTheKernelAndReachesThePrelude) {
  const Modifiers m = sinks_only();
  EXPECT_FALSE(m.empty());
  EXPECT_NE(modifiers_hash(m), "");
  Modifiers with_mask = m;
  with_mask.mask_mod = "__device__ bool mask_mod(int b, int h, int q, int k) { return true; }\n";
  Modifiers mask_alone = with_mask;
  mask_alone.sinks = false;
  EXPECT_NE(modifiers_hash(with_mask), modifiers_hash(mask_alone));
  EXPECT_FALSE(bool(validate_modifiers(m)));

  const KernelSpec sinks = forward_spec(problem_of(), kSm90a);
  KernelSpec plain = sinks;
  plain.modifiers = {};
  EXPECT_NE(sinks.id(), plain.id());
  const std::string source = generate_forward(sinks).source;
  EXPECT_NE(source.find("  static constexpr bool kSinks = true;\n"), std::string::npos);
  EXPECT_NE(generate_forward(plain).source.find("using Modifiers = NoModifiers;"),
            std::string::npos);
}

TEST(Sinks, TheBackwardEndsWithTheSinksGradient) {
  const Problem p = problem_of();
  for (const TargetArch &arch : {kSm90a, kSm80}) {
    const KernelSpec spec = backward_spec(p, arch);
    const auto steps = backward_steps(spec, p);
    ASSERT_EQ(steps.size(), 4u) << spec.id();
    EXPECT_STREQ(steps.back().entry, "flashjit_bwd_sink_grad");
    EXPECT_EQ(steps.back().geometry.grid.x, 16u);
    EXPECT_EQ(steps.back().geometry.block.x, 128u);
    const GeneratedSource program = generate_backward(spec);
    EXPECT_NE(std::find(program.entries.begin(), program.entries.end(),
                        std::string("flashjit_bwd_sink_grad")),
              program.entries.end());
    KernelSpec plain = spec;
    plain.modifiers = {};
    EXPECT_EQ(backward_steps(plain, p).size(), 3u);
  }
}

TEST(SinksCompile, ForwardProgramsCompileWithoutSpills) {
  KernelConfig split;
  split.splits = 4;
  Problem decode = problem_of(MaskKind::none);
  decode.seqlen_q = 1;
  decode.seqlen_k = 8192;
  const auto sm90 = testing::compile_forward_variants(
      3,
      [&](size_t i) -> llvm::Expected<KernelSpec> {
        if (i == 0) return forward_spec(problem_of(), kSm90a);
        if (i == 1) return forward_spec(problem_of(MaskKind::none), kSm90a);
        return forward_spec(decode, kSm90a, split);
      },
      kSm90a);
  for (size_t i = 0; i < 2; ++i) testing::expect_clean(sm90[i], {"flashjit_fwd_sm90"});
  testing::expect_clean(sm90[2], {"flashjit_fwd_sm90", "flashjit_fwd_combine"});
  KernelConfig sm80_path{KernelPath::sm80};
  const auto sm80 = testing::compile_forward_variants(
      1, [&](size_t) -> llvm::Expected<KernelSpec> {
        return forward_spec(problem_of(), kSm80, sm80_path);
      },
      kSm80);
  testing::expect_clean(sm80[0], {"flashjit_fwd_sm80"});
}

TEST(SinksCompile, BackwardProgramsCompileWithoutSpills) {
  KernelConfig deterministic;
  deterministic.deterministic = true;
  const std::vector<std::pair<KernelSpec, TargetArch>> specs = {
      {backward_spec(problem_of(), kSm90a), kSm90a},
      {backward_spec(problem_of(), kSm90a, deterministic), kSm90a},
      // Full attention: the sm80 program's causal heuristic tiles spill 24
      // bytes for sm_80 with or without sinks.
      {backward_spec(problem_of(MaskKind::none), kSm80), kSm80}};
  const std::string cuobjdump = testing::find_cuobjdump();
  std::vector<testing::CompiledVariant> compiled(specs.size());
  llvm::ThreadPool pool(llvm::hardware_concurrency());
  for (size_t i = 0; i < specs.size(); ++i)
    pool.async([&, i] {
      compiled[i].id = specs[i].first.id();
      compiled[i].result = testing::compile_sm90_with_report(generate_backward(specs[i].first),
                                                             specs[i].second, cuobjdump);
    });
  pool.wait();
  // The sm90 programs (two Q/dO stages at d=128): their producer's loop
  // state, as the plain kernels' (cuobjdump: 11 STL / 20 LDL in the
  // producer, 2 / 2 in the consumers, as the causal kernel without sinks).
  for (size_t i = 0; i < compiled.size(); ++i)
    testing::expect_clean(compiled[i],
                          {i < 2 ? "flashjit_bwd_sm90" : "flashjit_bwd_sm80",
                           "flashjit_bwd_preprocess", "flashjit_bwd_sink_grad"},
                          i < 2 ? testing::kResidentLoopSpillBytes : 0);
}

// Each pointer exactly when the modifiers ask for sinks, checked before any
// GPU work.
TEST(Sinks, TheCallChecksTheSinksPointers) {
  const Modifiers m = sinks_only();
  const Modifiers none;
  float device_stand_in = 0.f;  // never read: the checks fail first or pass
  auto message = [](llvm::Error e) { return e ? llvm::toString(std::move(e)) : std::string(); };
  EXPECT_EQ(message(validate_sink_args(&m, nullptr, nullptr, false)),
            "argument sinks: null, but the modifiers ask for learned sinks (Modifiers::sinks): "
            "pass heads_q fp32 logits on the device");
  EXPECT_EQ(message(validate_sink_args(&none, &device_stand_in, nullptr, false)),
            "argument sinks: given, but the modifiers do not ask for learned sinks: set "
            "Modifiers::sinks (the sinks are compiled into the kernel)");
  EXPECT_EQ(message(validate_sink_args(nullptr, &device_stand_in, nullptr, false)),
            "argument sinks: given, but the modifiers do not ask for learned sinks: set "
            "Modifiers::sinks (the sinks are compiled into the kernel)");
  EXPECT_EQ(message(validate_sink_args(&m, &device_stand_in, nullptr, true)),
            "argument dsinks: null, but the backward of learned sinks writes their gradient "
            "there: pass heads_q fp32 on the device");
  EXPECT_EQ(message(validate_sink_args(nullptr, nullptr, &device_stand_in, true)),
            "argument dsinks: given without learned sinks (Modifiers::sinks)");
  EXPECT_EQ(message(validate_sink_args(&m, &device_stand_in, nullptr, false)), "");
  EXPECT_EQ(message(validate_sink_args(&m, &device_stand_in, &device_stand_in, true)), "");
  EXPECT_EQ(message(validate_sink_args(nullptr, nullptr, nullptr, true)), "");

  // Through the public entry: the forward refuses before the driver.
  Problem p = problem_of();
  ForwardArgs args;
  args.modifiers = &m;
  const Status status = forward(p, args, nullptr);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("argument sinks: null"), std::string::npos)
      << status.message();
}

// The combine's sink (split_merge::add_sink) against float64: splits' LSEs
// merged with a sink give log(sum exp(lse_i) + exp(sink)), every split empty
// gives the sink, and the weights sum to the keys' share.
TEST(Sinks, TheCombineAddsTheSinkOnce) {
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    std::vector<float> lses;
    float sink;
  };
  const Case cases[] = {{{1.5f, -0.25f, 3.f}, 2.f},
                        {{1.5f, -inf, 3.f}, -4.f},
                        {{-inf, -inf}, 0.7f},
                        {{40.f, 41.f}, -30.f},
                        {{-20.f}, 15.f}};
  for (const Case &c : cases) {
    float m = -inf;
    for (float l : c.lses) m = std::max(m, l);
    float sum = 0.f;
    for (float l : c.lses) sum += split_merge::sum_term(l, m);
    split_merge::add_sink(m, sum, c.sink);
    const float lse = split_merge::merged_lse(m, sum);
    double exact = std::exp(double(c.sink));
    double keys = 0;
    for (float l : c.lses) keys += l == -inf ? 0.0 : std::exp(double(l));
    exact = std::log(exact + keys);
    EXPECT_NEAR(lse, exact, 1e-5 * std::max(1.0, std::fabs(exact))) << c.sink;
    double weights = 0;
    for (float l : c.lses) weights += split_merge::weight(l, lse);
    EXPECT_NEAR(weights, keys / (keys + std::exp(double(c.sink))), 1e-5) << c.sink;
  }
}

TEST(SinksCli, GenCompilesTheSinksIn) {
  auto fwd = testing_cli::run_cli({"gen", "--arch", "sm_90a", "--sinks", "--causal"});
  EXPECT_EQ(fwd.code, 0) << fwd.err;
  EXPECT_NE(fwd.out.find("  static constexpr bool kSinks = true;\n"), std::string::npos);
  auto plain = testing_cli::run_cli({"gen", "--arch", "sm_90a", "--causal"});
  EXPECT_EQ(plain.out.find("kSinks = true"), std::string::npos);
  auto bwd = testing_cli::run_cli({"gen", "--arch", "sm_90a", "--pass", "bwd", "--sinks"});
  EXPECT_EQ(bwd.code, 0) << bwd.err;
  EXPECT_NE(bwd.out.find("  static constexpr bool kSinks = true;\n"), std::string::npos);
}

}  // namespace
}  // namespace flashjit
