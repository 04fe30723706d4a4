// Tuning plans: defaults and overrides, every error with its exact message
// (file:line and the key), and every plan shipped in plans/ parses.
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "tuner/plan.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

namespace flashjit {
namespace {

std::string error_of(llvm::StringRef text) {
  auto plan = parse_plan(text, "plans/x.yaml");
  if (plan) return "(parsed)";
  return llvm::toString(plan.takeError());
}

TEST(Plan, DefaultsAndOverrides) {
  auto plan = parse_plan(R"(name: llama
defaults: {dtype: bf16, heads: 32, heads_kv: 8, hdim: 128, mask: causal}
problems:
  - {seqlen: 2048, batch: 8}
  - {seqlen_q: 1, seqlen_k: 8192, batch: 16, mask: none, name: decode}
  - seqlen: 512
    dtype: fp16
    hdim_v: 64
    softcap: 30
    scale: 0.125
  - {seqlen: 4096, mask: window, window: [255, 0]}
)",
                         "plans/llama.yaml");
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  EXPECT_EQ(plan->name, "llama");
  EXPECT_EQ(plan->file, "plans/llama.yaml");
  ASSERT_EQ(plan->entries.size(), 4u);

  const PlanEntry &a = plan->entries[0];
  EXPECT_EQ(a.line, 4);
  EXPECT_EQ(a.problem.dtype, DType::bf16);
  EXPECT_EQ(a.problem.batch, 8);
  EXPECT_EQ(a.problem.heads_q, 32);
  EXPECT_EQ(a.problem.heads_kv, 8);
  EXPECT_EQ(a.problem.seqlen_q, 2048);
  EXPECT_EQ(a.problem.seqlen_k, 2048);
  EXPECT_EQ(a.problem.head_dim_qk, 128);
  EXPECT_EQ(a.problem.head_dim_v, 128);
  EXPECT_EQ(a.problem.mask, MaskKind::causal);
  EXPECT_EQ(a.name, describe(a.problem));

  const PlanEntry &b = plan->entries[1];
  EXPECT_EQ(b.name, "decode");
  EXPECT_EQ(b.problem.seqlen_q, 1);
  EXPECT_EQ(b.problem.seqlen_k, 8192);
  EXPECT_EQ(b.problem.mask, MaskKind::none);

  const PlanEntry &c = plan->entries[2];
  EXPECT_EQ(c.line, 6);
  EXPECT_EQ(c.problem.batch, 1);  // not in defaults: one sequence
  EXPECT_EQ(c.problem.dtype, DType::fp16);
  EXPECT_EQ(c.problem.head_dim_v, 64);
  EXPECT_FLOAT_EQ(c.problem.softcap, 30.f);
  EXPECT_FLOAT_EQ(c.problem.softmax_scale, 0.125f);

  const PlanEntry &d = plan->entries[3];
  EXPECT_EQ(d.problem.mask, MaskKind::window);
  EXPECT_EQ(d.problem.window_left, 255);
  EXPECT_EQ(d.problem.window_right, 0);
}

TEST(Plan, NameDefaultsToTheFileStemAndSeqlenQOverridesDefaultSeqlen) {
  auto plan = parse_plan("defaults: {heads: 8, hdim: 64, seqlen: 1024}\n"
                         "problems:\n  - {seqlen_q: 16}\n  - {seqlen: 8}\n",
                         "dir/my-plan.yaml");
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  EXPECT_EQ(plan->name, "my-plan");
  EXPECT_EQ(plan->entries[0].problem.seqlen_q, 16);
  EXPECT_EQ(plan->entries[0].problem.seqlen_k, 1024);
  EXPECT_EQ(plan->entries[1].problem.seqlen_q, 8);
  EXPECT_EQ(plan->entries[1].problem.seqlen_k, 8);
}

// Each pass is its own class: `passes` makes one entry per pass, named
// apart; `pass` in a problem overrides the defaults' `passes`.
TEST(Plan, PassesMakeOneEntryPerPass) {
  auto plan = parse_plan(R"(defaults: {heads: 16, hdim: 128, passes: [fwd, bwd]}
problems:
  - {seqlen: 1024, name: both}
  - {seqlen: 2048, pass: bwd, name: bwd-only}
  - {seqlen: 4096, pass: bwd, deterministic: true, name: det}
  - {seqlen: 512, pass: fwd}
)",
                         "plans/p.yaml");
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  ASSERT_EQ(plan->entries.size(), 5u);
  const std::tuple<std::string, Pass, bool, int64_t, int> expected[] = {
      {"both", Pass::forward, false, 1024, 3},
      {"both (bwd)", Pass::backward, false, 1024, 3},
      {"bwd-only (bwd)", Pass::backward, false, 2048, 4},
      {"det (bwd-det)", Pass::backward, true, 4096, 5},
      {"", Pass::forward, false, 512, 6}};
  for (size_t i = 0; i < 5; ++i) {
    const auto &[name, pass, deterministic, seqlen, line] = expected[i];
    const PlanEntry &e = plan->entries[i];
    if (!name.empty()) {
      EXPECT_EQ(e.name, name) << i;
    }
    EXPECT_EQ(e.pass, pass) << i;
    EXPECT_EQ(e.deterministic, deterministic) << i;
    EXPECT_EQ(e.problem.seqlen_q, seqlen) << i;
    EXPECT_EQ(e.line, line) << i;
  }
  EXPECT_EQ(plan->entries[4].name, describe(plan->entries[4].problem));
}

TEST(Plan, PassErrorsNameTheKey) {
  const std::string head = "defaults: {heads: 16, hdim: 128}\nproblems:\n";
  const std::pair<std::string, std::string> cases[] = {
      {head + "  - {seqlen: 8, pass: back}\n",
       "plans/x.yaml:3: key 'pass': expected fwd or bwd, got back"},
      {head + "  - {seqlen: 8, passes: [fwd, bwd, fwd]}\n",
       "plans/x.yaml:3: key 'passes': fwd given twice"},
      {head + "  - {seqlen: 8, passes: bwd}\n",
       "plans/x.yaml:3: key 'passes': expected a list of fwd and bwd, like [fwd, bwd], got bwd"},
      {head + "  - {seqlen: 8, passes: [fwd, x]}\n",
       "plans/x.yaml:3: key 'passes': expected fwd or bwd, got x"},
      {head + "  - {seqlen: 8, pass: bwd, passes: [bwd]}\n",
       "plans/x.yaml:3: key 'passes': give pass or passes, not both"},
      {head + "  - {seqlen: 8, deterministic: true}\n",
       "plans/x.yaml:3: key 'deterministic': needs pass: bwd (it only changes the backward)"},
      {head + "  - {seqlen: 8, pass: bwd, deterministic: yes please}\n",
       "plans/x.yaml:3: key 'deterministic': expected true or false, got yes please"},
  };
  for (const auto &[text, message] : cases) EXPECT_EQ(error_of(text), message) << text;
}

TEST(Plan, ErrorsNameFileLineAndKey) {
  const std::string head = "name: x\ndefaults: {heads: 16, hdim: 128}\nproblems:\n";
  const std::pair<std::string, std::string> cases[] = {
      {head + "  - {seqlen: 1024}\n  - {seqlen: 1024, hdim: 100}\n",
       "plans/x.yaml:5: key 'hdim': expected a multiple of 8 in [8, 576], got 100"},
      {head + "  - {seqlen: 1024, kv_dtype: fp16}\n",
       "plans/x.yaml:4: key 'kv_dtype': expected same or e4m3, got fp16"},
      {head + "  - {seqlen: 1024, out_dtype: e4m3}\n",
       "plans/x.yaml:4: key 'out_dtype': expected auto, bf16 or fp16, got e4m3"},
      {head + "  - {seqlen: 1024, dtype: fp16, out_dtype: bf16}\n",
       "plans/x.yaml:4: key 'out_dtype': expected auto or fp16 with dtype fp16 (a 16-bit "
       "problem's output has its dtype), got bf16"},
      {head + "  - {seqlen: 1024, kv_dtype: e4m3, passes: [fwd, bwd]}\n",
       "plans/x.yaml:4: pass bwd with e4m3 (dtype or kv_dtype): the fp8 backward is not "
       "supported (FlashAttention-3 has none either); tune its forward alone (pass: fwd)"},
      {head + "  - {seqlen: 1024, hdmi: 64}\n",
       "plans/x.yaml:4: unknown key 'hdmi' in problem (expected one of dtype, "
       "kv_dtype, out_dtype, batch, heads, heads_kv, seqlen, seqlen_q, seqlen_k, hdim, hdim_v, "
       "mask, window, softcap, scale, pass, passes, deterministic, page_size, cache_seqlens, varlen, seqlens_q, seqlens_k, "
       "score_mod, score_mod_grad, mask_mod, aux, aux_values, mask_mod_qk_only, sinks, name)"},
      {"defaults: {heads: 16, hdim: 128, nmae: a}\nproblems:\n  - {seqlen: 8}\n",
       "plans/x.yaml:1: unknown key 'nmae' in defaults (expected one of dtype, "
       "kv_dtype, out_dtype, batch, heads, heads_kv, seqlen, seqlen_q, seqlen_k, hdim, hdim_v, "
       "mask, window, softcap, scale, pass, passes, deterministic, page_size, cache_seqlens, varlen, seqlens_q, seqlens_k, "
       "score_mod, score_mod_grad, mask_mod, aux, aux_values, mask_mod_qk_only, sinks)"},
      {"defaults: {heads: 16, hdim: 128, name: a}\nproblems:\n  - {seqlen: 8}\n",
       "plans/x.yaml:1: key 'name': names a single problem, not defaults"},
      {head + "  - {seqlen: 0}\n", "plans/x.yaml:4: key 'seqlen': expected a positive integer, got 0"},
      {head + "  - {seqlen: 8, seqlen_k: -3}\n",
       "plans/x.yaml:4: key 'seqlen_k': expected a positive integer, got -3"},
      {head + "  - {seqlen: 8, batch: 1.5}\n",
       "plans/x.yaml:4: key 'batch': expected a positive integer, got 1.5"},
      {head + "  - {seqlen: 8, dtype: fp32}\n",
       "plans/x.yaml:4: key 'dtype': expected bf16, fp16 or e4m3, got fp32"},
      {head + "  - {seqlen: 64, page_size: 600}\n",
       "plans/x.yaml:4: key 'page_size': expected 0 (contiguous) or 1 to 512 rows, got 600"},
      {head + "  - {seqlen: 100, page_size: 64}\n",
       "plans/x.yaml:4: seqlen_k=100 is not a multiple of page_size=64: with a paged cache "
       "seqlen_k is the page table's width (pages per sequence) times page_size"},
      {head + "  - {seqlen: 64, cache_seqlens: yes}\n",
       "plans/x.yaml:4: key 'cache_seqlens': expected true or false, got yes"},
      {head + "  - {seqlen: 8, heads_kv: 5}\n",
       "plans/x.yaml:4: key 'heads_kv': expected a divisor of heads (16), got 5"},
      {head + "  - {seqlen: 8, mask: diagonal}\n",
       "plans/x.yaml:4: key 'mask': expected none, causal or window, got diagonal"},
      {head + "  - {seqlen: 8, mask: window}\n",
       "plans/x.yaml:4: problem: missing key 'window' ([left, right], for mask: window) (give it "
       "in the problem or in defaults)"},
      {head + "  - {seqlen: 8, mask: window, window: [1]}\n",
       "plans/x.yaml:4: key 'window': expected [left, right], each -1 (unbounded) or >= 0, got a "
       "list"},
      {head + "  - {seqlen: 8, mask: window, window: [-2, 0]}\n",
       "plans/x.yaml:4: key 'window': expected [left, right], each -1 (unbounded) or >= 0, got -2"},
      {head + "  - {seqlen: 8, mask: causal, window: [4, 0]}\n",
       "plans/x.yaml:4: key 'window': needs mask: window, got mask: causal"},
      {head + "  - {seqlen: 8, softcap: -1}\n",
       "plans/x.yaml:4: key 'softcap': expected a finite number >= 0 (0: off), got -1"},
      {head + "  - {seqlen: 8, scale: nan}\n",
       "plans/x.yaml:4: key 'scale': expected a finite number >= 0 (0: 1/sqrt(hdim)), got nan"},
      {head + "  - {batch: 2}\n",
       "plans/x.yaml:4: problem: missing key 'seqlen' (or 'seqlen_q' and 'seqlen_k') (give it in "
       "the problem or in defaults)"},
      {"problems:\n  - {seqlen: 8, hdim: 64}\n",
       "plans/x.yaml:2: problem: missing key 'heads' (give it in the problem or in defaults)"},
      {head + "  - {seqlen: 8, seqlen: 9}\n", "plans/x.yaml:4: key 'seqlen': given twice"},
      {head + "  - {seqlen: 8, name: [a]}\n", "plans/x.yaml:4: key 'name': expected a non-empty "
                                              "string, got a list"},
      {head + "  - 1024\n",
       "plans/x.yaml:4: key 'problems': expected each item a mapping of problem keys, got 1024"},
      {head, "plans/x.yaml:3: key 'problems': expected a non-empty list of problems, got nothing"},
      {"name: x\n", "plans/x.yaml:1: missing key 'problems'"},
      {"name: x\nproblem:\n  - {seqlen: 8}\n",
       "plans/x.yaml:2: unknown key 'problem' (expected name, defaults or problems)"},
      {"- a\n- b\n", "plans/x.yaml:1: expected a mapping with keys name, defaults and problems"},
      {"", "plans/x.yaml:1: expected a mapping with keys name, defaults and problems"},
      {"defaults: 3\nproblems: []\n",
       "plans/x.yaml:1: key 'defaults': expected a mapping of problem keys, got 3"},
      {"name: x\nproblems: [\n", "plans/x.yaml:3: invalid YAML: end of sequence flow not found"},
  };
  for (const auto &[text, message] : cases) EXPECT_EQ(error_of(text), message) << text;
}

TEST(Plan, KvCacheKeysSetTheProblemsLayout) {
  auto plan = parse_plan(R"(defaults: {heads: 32, heads_kv: 8, hdim: 128, seqlen_q: 1}
problems:
  - {seqlen_k: 8192, batch: 16, page_size: 64, cache_seqlens: true}
  - {seqlen_k: 8192, batch: 16}
)",
                         "plans/serve.yaml");
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  ASSERT_EQ(plan->entries.size(), 2u);
  EXPECT_EQ(plan->entries[0].problem.page_size, 64);
  EXPECT_TRUE(plan->entries[0].problem.seqused_k);
  EXPECT_EQ(plan->entries[0].name, describe(plan->entries[0].problem));
  EXPECT_NE(plan->entries[0].name.find("seqused_k page=64"), std::string::npos);
  EXPECT_EQ(plan->entries[1].problem.page_size, 0);
  EXPECT_FALSE(plan->entries[1].problem.seqused_k);
}

TEST(Plan, APackedBatchTakesItsLengths) {
  auto plan = parse_plan(R"(defaults: {heads: 16, hdim: 128, batch: 4, seqlen: 1024, mask: causal}
problems:
  - {varlen: true, seqlens_q: [17, 4096, 300]}
  - {varlen: true, seqlens_q: [1, 1], seqlens_k: [700, 0], mask: none}
  - {varlen: true, batch: 8, seqlen: 2048}
  - {seqlen: 512}
)",
                         "plans/packed.yaml");
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  ASSERT_EQ(plan->entries.size(), 4u);
  const PlanEntry &a = plan->entries[0];
  EXPECT_TRUE(a.problem.varlen);
  EXPECT_EQ(a.problem.batch, 3);  // the lengths', not the defaults' 4
  EXPECT_EQ(a.problem.seqlen_q, 4096);
  EXPECT_EQ(a.problem.seqlen_k, 4096);
  EXPECT_EQ(a.total_q, 4413);
  EXPECT_EQ(a.seqlens_k, (std::vector<int64_t>{17, 4096, 300}));
  const PlanEntry &b = plan->entries[1];
  EXPECT_EQ(b.problem.seqlen_q, 1);
  EXPECT_EQ(b.problem.seqlen_k, 700);
  EXPECT_EQ(b.total_q, 2);
  EXPECT_EQ(b.total_k, 700);
  const PlanEntry &c = plan->entries[2];  // the longest lengths only: total unknown
  EXPECT_TRUE(c.problem.varlen);
  EXPECT_EQ(c.problem.batch, 8);
  EXPECT_EQ(c.problem.seqlen_q, 2048);
  EXPECT_EQ(c.total_q, 0);
  EXPECT_FALSE(plan->entries[3].problem.varlen);

  const std::string head = "defaults: {heads: 16, hdim: 128}\nproblems:\n";
  const std::pair<std::string, std::string> cases[] = {
      {head + "  - {seqlens_q: [1, 2]}\n",
       "plans/x.yaml:3: key 'seqlens_q': expected varlen: true beside it, got a list"},
      {head + "  - {varlen: yes, seqlen: 8}\n",
       "plans/x.yaml:3: key 'varlen': expected true or false, got yes"},
      {head + "  - {varlen: true, seqlens_q: [1, -2]}\n",
       "plans/x.yaml:3: key 'seqlens_q': expected a list of sequence lengths >= 0, e.g. [17, "
       "4096, 300], got -2"},
      {head + "  - {varlen: true, seqlens_q: 17}\n",
       "plans/x.yaml:3: key 'seqlens_q': expected a list of sequence lengths >= 0, e.g. [17, "
       "4096, 300], got 17"},
      {head + "  - {varlen: true, seqlens_q: [0, 0]}\n",
       "plans/x.yaml:3: key 'seqlens_q': expected a total in [1, 2147483647], got 0"},
      {head + "  - {varlen: true, seqlens_q: [1, 2], seqlens_k: [3]}\n",
       "plans/x.yaml:3: key 'seqlens_k': expected 2 lengths, one per sequence of seqlens_q, got 1"},
      {head + "  - {varlen: true, seqlens_k: [3]}\n",
       "plans/x.yaml:3: key 'seqlens_k': expected seqlens_q beside it, got a list"},
      {head + "  - {varlen: true, seqlens_q: [1, 2], batch: 2}\n",
       "plans/x.yaml:3: key 'batch': not with seqlens_q (the lengths give the batch and the "
       "longest sequence)"},
  };
  for (const auto &[text, message] : cases) EXPECT_EQ(error_of(text), message) << text;
}

TEST(Plan, HdimVIsCheckedLikeHdim) {
  EXPECT_EQ(error_of("defaults: {heads: 16, hdim: 128}\nproblems:\n  - {seqlen: 8, hdim_v: 12}\n"),
            "plans/x.yaml:3: key 'hdim_v': expected a multiple of 8 in [8, 576], got 12");
}

TEST(Plan, LoadPlanReportsAMissingFile) {
  auto plan = load_plan("/nonexistent/plan.yaml");
  ASSERT_FALSE(bool(plan));
  EXPECT_EQ(llvm::toString(plan.takeError()),
            "/nonexistent/plan.yaml: cannot read: No such file or directory");
}

TEST(Plan, EveryShippedPlanParses) {
  std::error_code ec;
  int count = 0;
  for (llvm::sys::fs::directory_iterator it(FLASHJIT_SOURCE_DIR "/plans", ec), end;
       !ec && it != end; it.increment(ec)) {
    if (llvm::sys::path::extension(it->path()) != ".yaml") continue;
    ++count;
    auto plan = load_plan(it->path());
    ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
    EXPECT_FALSE(plan->entries.empty()) << it->path();
    EXPECT_EQ(plan->name, llvm::sys::path::stem(it->path()).str());
  }
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_GE(count, 3);

  auto plan = load_plan(FLASHJIT_SOURCE_DIR "/plans/default.yaml");
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  ASSERT_EQ(plan->entries.size(), 18u);
  for (const PlanEntry &e : plan->entries) {
    EXPECT_EQ(e.problem.batch * e.problem.seqlen_q, 16384) << e.name;
    EXPECT_EQ(e.problem.heads_q * e.problem.head_dim_qk, 2048) << e.name;
  }
}

}  // namespace
}  // namespace flashjit
