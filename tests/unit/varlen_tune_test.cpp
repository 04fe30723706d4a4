// Tuning a packed (varlen) batch without a GPU: its lengths (PackedBatch:
// totals, offsets, validation, the small batches the accuracy checks run),
// the worker protocol carrying them, the key a tune stores under (the class
// a call and `flashjit query` look up), and the CLI taking varlen entries
// as far as a machine without a GPU goes.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/problem_flags.h"
#include "cli_files.h"
#include "cli_runner.h"
#include "runtime/device.h"
#include "runtime/tuning_key.h"
#include "tuner/backward_bench.h"
#include "tuner/forward_bench.h"
#include "tuner/plan.h"
#include "tuner/tune_class.h"
#include "tuner/worker_protocol.h"

namespace flashjit {
namespace {

using llvm::json::Object;
using namespace testing_cli;

std::string message(llvm::Error e) { return llvm::toString(std::move(e)); }

Problem packed_problem(std::vector<int64_t> q, std::vector<int64_t> k) {
  Problem p;
  p.varlen = true;
  p.batch = int64_t(q.size());
  p.heads_q = 16;
  p.heads_kv = 4;
  p.head_dim_qk = p.head_dim_v = 128;
  p.mask = MaskKind::causal;
  p.seqlen_q = *std::max_element(q.begin(), q.end());
  p.seqlen_k = *std::max_element(k.begin(), k.end());
  return p;
}

// The benches size their tensors from the tokens: a packed batch's totals,
// a dense one's batch x lengths.
TEST(PackedBatch, TensorElementsCountTheTokens) {
  const PackedBatch b{{17, 0, 4096, 300}, {30, 9, 4096, 0}};
  Problem p = packed_problem(b.seqlens_q, b.seqlens_k);  // 16 / 4 heads, d = 128
  p.head_dim_v = 64;
  const TensorElements packed = tensor_elements(p, &b);
  EXPECT_EQ(packed.q, size_t(4413 * 16 * 128));
  EXPECT_EQ(packed.k, size_t(4135 * 4 * 128));
  EXPECT_EQ(packed.v, size_t(4135 * 4 * 64));
  EXPECT_EQ(packed.o, size_t(4413 * 16 * 64));
  EXPECT_EQ(packed.lse, size_t(4413 * 16));
  const TensorElements dense = tensor_elements(p, nullptr);  // 4 x 4096 both ways
  EXPECT_EQ(dense.q, size_t(4 * 4096 * 16 * 128));
  EXPECT_EQ(dense.k, size_t(4 * 4096 * 4 * 128));
  EXPECT_EQ(dense.lse, size_t(4 * 4096 * 16));
}

TEST(PackedBatch, TotalsOffsetsAndEqualLengths) {
  const PackedBatch b{{17, 0, 4096, 300}, {30, 9, 4096, 0}};
  EXPECT_EQ(b.size(), 4u);
  EXPECT_EQ(b.total_q(), 4413);
  EXPECT_EQ(b.total_k(), 4135);
  EXPECT_EQ(b.cu_seqlens_q(), (std::vector<int32_t>{0, 17, 17, 4113, 4413}));
  EXPECT_EQ(b.cu_seqlens_k(), (std::vector<int32_t>{0, 30, 39, 4135, 4135}));
  Problem p = packed_problem({1}, {1});
  p.batch = 3;
  p.seqlen_q = 700;
  p.seqlen_k = 2000;
  const PackedBatch equal = equal_lengths(p);
  EXPECT_EQ(equal.seqlens_q, (std::vector<int64_t>{700, 700, 700}));
  EXPECT_EQ(equal.seqlens_k, (std::vector<int64_t>{2000, 2000, 2000}));
  EXPECT_FALSE(bool(validate_packed_batch(p, equal)));
}

TEST(PackedBatch, ValidationNamesWhatDoesNotFit) {
  const Problem p = packed_problem({17, 4096, 300}, {17, 4096, 300});
  auto error_of = [&](const Problem &problem, const PackedBatch &b) {
    return message(validate_packed_batch(problem, b));
  };
  EXPECT_EQ(error_of(p, {{17, 4096, 300}, {17, 4096, 300}}), "");
  EXPECT_EQ(error_of(p, {{17, 4096}, {17, 4096}}),
            "packed batch: 2 sequences, but the problem's batch is 3");
  EXPECT_EQ(error_of(p, {{17, 4096, 300}, {17, 4096}}),
            "packed batch: 3 query lengths but 2 key lengths");
  EXPECT_EQ(error_of(p, {{17, 4000, 300}, {17, 4096, 300}}),
            "packed batch: the longest sequence has 4000 queries and 4096 keys, but the problem's "
            "seqlen_q and seqlen_k are 4096 and 4096");
  EXPECT_EQ(error_of(p, {{17, 4096, -1}, {17, 4096, 300}}),
            "packed batch: sequence 2 has a negative length (-1 queries, 300 keys)");
  Problem dense = p;
  dense.varlen = false;
  EXPECT_EQ(error_of(dense, {{17, 4096, 300}, {17, 4096, 300}}),
            "packed lengths were given for a problem that is not varlen");
  Problem huge = packed_problem({2000000000, 2000000000}, {1, 1});
  EXPECT_EQ(error_of(huge, {{2000000000, 2000000000}, {1, 1}}),
            "packed batch: 4000000000 queries and 2 keys in all; the int32 offsets hold at most "
            "2147483647");
}

TEST(PackedBatch, FlopsAreTheSequencesOwnWorkCausalHalvedPerSequence) {
  const Problem p = packed_problem({100, 300}, {100, 300});
  const PackedBatch b{{100, 300}, {100, 300}};
  const double expected = sequence_problem(p, 100, 100).forward_flops() +
                          sequence_problem(p, 300, 300).forward_flops();
  EXPECT_DOUBLE_EQ(packed_forward_flops(p, b), expected);
  // Not the padded batch x longest: 2 x 300 x 300 would be 1.8x as much.
  EXPECT_LT(packed_forward_flops(p, b), p.forward_flops());
  // A sequence without keys or queries does no work.
  EXPECT_DOUBLE_EQ(packed_forward_flops(p, {{100, 300, 0}, {100, 300, 50}}), expected);
}

TEST(PackedBatch, AccuracyBatchesKeepTheLongestAndScaleTogether) {
  const PackedBatch b{{17, 8192, 300, 4096, 1, 999}, {40, 8192, 300, 4096, 0, 999}};
  // The forward: four sequences (the longest among them, order kept),
  // scaled by 2048 / 8192.
  const PackedBatch fwd = accuracy_packed_batch(b);
  EXPECT_EQ(fwd.seqlens_q, (std::vector<int64_t>{4, 2048, 75, 1024}));
  EXPECT_EQ(fwd.seqlens_k, (std::vector<int64_t>{10, 2048, 75, 1024}));
  // The backward: three, at most kBackwardCheckMaxSeqlen.
  const PackedBatch bwd = backward_accuracy_packed_batch(b);
  EXPECT_EQ(bwd.seqlens_q, (std::vector<int64_t>{1, 300, 10}));
  EXPECT_EQ(bwd.seqlens_k, (std::vector<int64_t>{1, 300, 10}));
  // A zero length stays zero (a sequence without keys), others at least 1.
  const PackedBatch zero = scaled_packed_batch({{8192, 1, 5}, {8192, 0, 5}}, 300, 3);
  EXPECT_EQ(zero.seqlens_q, (std::vector<int64_t>{300, 1, 1}));
  EXPECT_EQ(zero.seqlens_k, (std::vector<int64_t>{300, 0, 1}));
  // Small batches come back as they are.
  const PackedBatch small{{17, 0, 70}, {30, 9, 70}};
  EXPECT_EQ(backward_accuracy_packed_batch(small), small);
  const Problem resized = resized_packed_problem(packed_problem({8192, 5}, {8192, 5}), bwd);
  EXPECT_EQ(resized.batch, 3);
  EXPECT_EQ(resized.seqlen_q, 300);
  EXPECT_EQ(resized.seqlen_k, 300);
  EXPECT_FALSE(bool(validate_packed_batch(resized, bwd)));
}

TEST(VarlenWorkerProtocol, LengthsAndTheVarlenSpecSurviveTheRoundTrip) {
  const PackedBatch b{{17, 0, 4096, 300}, {30, 9, 4096, 0}};
  const Object o = worker_protocol::packed_batch_to_json(b);
  auto back = worker_protocol::packed_batch_from_json(o);
  ASSERT_TRUE(bool(back)) << message(back.takeError());
  EXPECT_EQ(*back, b);
  // The varlen kernel, not the dense one, reaches the worker that compiles
  // it (and the KV cache's layout fields likewise).
  KernelSpec s;
  s.pass = Pass::backward;
  s.config = KernelConfig{KernelPath::sm90, 128, 128, 8, 2};
  s.arch = TargetArch{9, 0, true};
  s.varlen = true;
  auto spec = worker_protocol::spec_from_json(worker_protocol::spec_to_json(s));
  ASSERT_TRUE(bool(spec)) << message(spec.takeError());
  EXPECT_TRUE(spec->varlen);
  EXPECT_EQ(*spec, s);
  EXPECT_NE(spec->id().find("_varlen_"), std::string::npos) << spec->id();
  KernelSpec cache;
  cache.config = KernelConfig{KernelPath::sm90, 128, 128, 8, 2};
  cache.arch = TargetArch{9, 0, true};
  cache.seqused_k = true;
  cache.page_size = 64;
  spec = worker_protocol::spec_from_json(worker_protocol::spec_to_json(cache));
  ASSERT_TRUE(bool(spec)) << message(spec.takeError());
  EXPECT_EQ(*spec, cache);
  EXPECT_EQ(spec->id(), cache.id());
}

TEST(VarlenWorkerProtocol, BadLengthsNameTheField) {
  auto error_of = [](Object o) {
    auto b = worker_protocol::packed_batch_from_json(o);
    return b ? std::string("parsed") : message(b.takeError());
  };
  const Object good = worker_protocol::packed_batch_to_json({{5, 7}, {5, 0}});
  Object o = good;
  o.erase("seqlens_k");
  EXPECT_EQ(error_of(o), "worker request: 'seqlens_k': expected a list of lengths");
  o = good;
  o["seqlens_q"] = llvm::json::Array{5, -7};
  EXPECT_EQ(error_of(o), "worker request: 'seqlens_q'[1]: expected a length (an integer >= 0)");
  o = good;
  o["seqlens_q"] = llvm::json::Array{5, "7"};
  EXPECT_EQ(error_of(o), "worker request: 'seqlens_q'[1]: expected a length (an integer >= 0)");
  o = good;
  o["seqlens_k"] = llvm::json::Array{5};
  EXPECT_EQ(error_of(o), "worker request: 'packed': 2 query lengths but 1 key lengths");
  Object spec = worker_protocol::spec_to_json(KernelSpec{});
  spec.erase("varlen");
  auto bad = worker_protocol::spec_from_json(spec);
  ASSERT_FALSE(bool(bad));
  EXPECT_EQ(message(bad.takeError()), "worker request: 'varlen': expected true or false");
}

// A tune stores under the key a call of the same batch looks up
// (class_view: the longest lengths and the total), which is the key
// `flashjit query` asks for with the same flags.
TEST(VarlenTuneKey, IsTheClassACallAndQueryLookUp) {
  cli::ProblemFlagValues v;
  v.varlen = true;
  v.seqlens_q = "17,4096,300";
  v.hdim = "128";
  v.causal = true;
  auto parsed = cli::parse_problem_flags(v);
  ASSERT_TRUE(bool(parsed)) << message(parsed.takeError());
  const PlanEntry entry{"x", parsed->problem, 0, Pass::forward, false, parsed->seqlens_q,
                        parsed->seqlens_k, parsed->total_q, parsed->total_k, {}, {}};
  const std::optional<PackedBatch> packed = entry_packed_batch(entry);
  ASSERT_TRUE(packed.has_value());
  EXPECT_EQ(packed->seqlens_q, (std::vector<int64_t>{17, 4096, 300}));
  EXPECT_EQ(packed->seqlens_k, packed->seqlens_q);
  const ProblemClassKey tuned = problem_class_key(tuning_class_problem(entry.problem, packed));
  const ProblemClassKey queried =
      problem_class_key(class_view(parsed->problem, parsed->total_q));
  EXPECT_EQ(tuned, queried);
  EXPECT_EQ(tuned.kv_layout, "packed");
  EXPECT_EQ(tuning_class_problem(entry.problem, packed).batch, 2);  // ceil(4413 / 4096)
  EXPECT_EQ(tuned.batch_heads_bucket, size_bucket(2 * entry.problem.heads_q));

  // --batch/--seqlen only: every sequence the longest, the class query
  // sizes from the batch as given.
  cli::ProblemFlagValues w;
  w.varlen = true;
  w.batch = "8";
  w.seqlen_q = "2048";
  auto equal = cli::parse_problem_flags(w);
  ASSERT_TRUE(bool(equal)) << message(equal.takeError());
  const PlanEntry e2{"y", equal->problem, 0, Pass::backward, false, {}, {}, 0, 0, {}, {}};
  const std::optional<PackedBatch> eq = entry_packed_batch(e2);
  ASSERT_TRUE(eq.has_value());
  EXPECT_EQ(eq->seqlens_q, std::vector<int64_t>(8, 2048));
  EXPECT_EQ(problem_class_key(tuning_class_problem(e2.problem, eq), "bwd"),
            problem_class_key(class_view(equal->problem, equal->total_q), "bwd"));

  // A dense entry has no packed batch and keeps its own class.
  const PlanEntry dense{"z", Problem{}, 0, Pass::forward, false, {}, {}, 0, 0, {}, {}};
  EXPECT_FALSE(entry_packed_batch(dense).has_value());
  EXPECT_EQ(problem_class_key(tuning_class_problem(dense.problem, std::nullopt)),
            problem_class_key(Problem{}));
}

TEST(VarlenTuneKey, TheTunersLengthsAreCheckedAgainstTheProblem) {
  const Problem p = packed_problem({17, 4096, 300}, {17, 4096, 300});
  TuneOptions options;
  auto equal = packed_batch_to_tune(p, options);
  ASSERT_TRUE(bool(equal)) << message(equal.takeError());
  ASSERT_TRUE(equal->has_value());
  EXPECT_EQ((*equal)->seqlens_q, std::vector<int64_t>(3, 4096));
  options.packed = PackedBatch{{17, 4096}, {17, 4096}};
  auto wrong = packed_batch_to_tune(p, options);
  ASSERT_FALSE(bool(wrong));
  EXPECT_EQ(message(wrong.takeError()), "packed batch: 2 sequences, but the problem's batch is 3");
  Problem dense = p;
  dense.varlen = false;
  auto for_dense = packed_batch_to_tune(dense, options);
  ASSERT_FALSE(bool(for_dense));
  EXPECT_NE(message(for_dense.takeError()).find("which is not varlen"), std::string::npos);
  options.packed.reset();
  auto none = packed_batch_to_tune(dense, options);
  ASSERT_TRUE(bool(none));
  EXPECT_FALSE(none->has_value());
}

// Without a GPU, a varlen tune gets as far as every tune does: the flags and
// the plan are accepted, and the error is the missing GPU.
TEST(VarlenTuneCli, TuneTakesVarlenFlagsAndPlansThenNeedsAGpu) {
  if (gpu_present()) GTEST_SKIP() << "a GPU is present";
  TempDir dir;
  for (const std::vector<std::string> &flags :
       {std::vector<std::string>{"--varlen", "--seqlens-q", "17,4096,300", "--hdim", "128",
                                 "--causal"},
        std::vector<std::string>{"--varlen", "--batch", "4", "--seqlen-q", "2048", "--pass",
                                 "bwd"}}) {
    std::vector<std::string> args{"tune", "--db", dir.file("t.db")};
    args.insert(args.end(), flags.begin(), flags.end());
    const CliResult r = run_cli(args);
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_EQ(r.err.rfind("flashjit: error: tune needs a GPU (", 0), 0u) << r.err;
  }
  const std::string plan = dir.file("plan.yaml");
  write_file(plan, R"(name: varlen
defaults: {heads: 16, hdim: 128, mask: causal}
problems:
  - {varlen: true, seqlens_q: [17, 4096, 300], passes: [fwd, bwd]}
  - {varlen: true, batch: 8, seqlen: 2048}
)");
  const CliResult r = run_cli({"tune", "--plan", plan, "--db", dir.file("t.db")});
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(r.err.rfind("flashjit: error: tune needs a GPU (", 0), 0u) << r.err;
}

TEST(VarlenTuneCli, BadLengthsAreStillUsageErrors) {
  TempDir dir;
  const CliResult r = run_cli({"tune", "--varlen", "--seqlens-q", "17,-4,300", "--db",
                               dir.file("t.db")});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("--seqlens-q"), std::string::npos) << r.err;
  const CliResult both = run_cli({"tune", "--varlen", "--seqlens-q", "17,300", "--seqlens-k",
                                  "5", "--db", dir.file("t.db")});
  EXPECT_EQ(both.code, 2) << both.err;
  EXPECT_NE(both.err.find("--seqlens-k"), std::string::npos) << both.err;
}

TEST(VarlenRunCli, BackwardTakesVarlenThenNeedsAGpu) {
  if (gpu_present()) GTEST_SKIP() << "a GPU is present";
  const CliResult r = run_cli({"run", "--varlen", "--pass", "bwd", "--seqlens-q", "17,300",
                               "--hdim", "128", "--check"});
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(r.err.rfind("flashjit: error: run needs a GPU: ", 0), 0u) << r.err;
}

}  // namespace
}  // namespace flashjit
