// Tuning kernels that compile a caller's modifiers: the
// candidates run on the inputs `flashjit run` gives them (generated arrays,
// the caller's scalar values), the winner is checked against the GPU
// references with the snippets in, and the record is stored under the
// class a call with the same snippets looks up.
//   - the CLI, through its worker processes: a forward with a prefix mask
//     (a scalar aux value) and learned sinks, found by `query` afterwards,
//     skipped by a second tune, compiling nothing when forced again;
//   - in this process: a backward with ALiBi (score_mod and its gradient),
//     the prefix mask and sinks, whose stored config's gradients pass the
//     GPU reference's check through launch_backward.
#include <gtest/gtest.h>

#include <cstdio>

#include "generator/kernel_spec.h"
#include "generator/modifier_source.h"
#include "gpu_environment.h"
#include "reference/backward_check.h"
#include "runtime/device.h"
#include "runtime/launch_backward.h"
#include "runtime/modifier_facts.h"
#include "runtime/tuning_key.h"
#include "tests/temp_db_test.h"
#include "tests/unit/cli_files.h"
#include "tests/unit/cli_runner.h"
#include "tuner/modifier_inputs.h"
#include "tuner/tune_backward.h"
#include "llvm/Support/JSON.h"

namespace flashjit {
namespace {

const char *kPrefix =
    "__device__ bool mask_mod(int b, int h, int q, int k, const Aux &aux) {\n"
    "  return k < aux.prefix || k <= q;\n"
    "}\n";
const char *kAlibi =
    "__device__ float score_mod(float s, int b, int h, int q, int k, const Aux &aux) {\n"
    "  return s + aux.slopes[h] * (k - q);\n"
    "}\n";
const char *kAlibiGrad =
    "__device__ float score_mod_grad(float s, int b, int h, int q, int k, const Aux &aux) {\n"
    "  return 1.f;\n"
    "}\n";

Problem tuned_problem() {
  Problem p;
  p.dtype = DType::bf16;
  p.batch = 2;
  p.heads_q = p.heads_kv = 8;
  p.seqlen_q = p.seqlen_k = 1024;
  p.head_dim_qk = p.head_dim_v = 64;
  return p;
}

llvm::json::Object parse_object(const std::string &text) {
  auto value = llvm::json::parse(text);
  if (!value) {
    ADD_FAILURE() << llvm::toString(value.takeError()) << "\n" << text;
    return {};
  }
  if (const llvm::json::Object *o = value->getAsObject()) return *o;
  ADD_FAILURE() << "not an object: " << text;
  return {};
}

TEST(ModifiedTune, TheCliTunesAForwardWithAScalarAuxValueAndQueryFindsIt) {
  FLASHJIT_REQUIRE_GPU();
  using namespace testing_cli;
  TempDir dir;
  write_file(dir.file("prefix.cu"), kPrefix);
  const std::vector<std::string> problem = {
      "--dtype", "bf16", "--batch", "2", "--heads", "8", "--seqlen", "1024", "--hdim", "64",
      "--mask-mod", dir.file("prefix.cu"), "--aux", "int prefix", "--sinks",
      "--db", dir.file("t.db")};
  auto with = [&](std::vector<std::string> args) {
    args.insert(args.end(), problem.begin(), problem.end());
    return args;
  };
  CliResult r = run_cli(with({"tune", "--json", "--budget-s", "30", "--aux-value", "prefix=256"}));
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  std::printf("%s\n", r.err.c_str());
  Modifiers m;
  m.mask_mod = kPrefix;
  m.aux = {{"int", "prefix"}};
  m.sinks = true;
  // The class is the modifiers' as a call on this GPU compiles them (the
  // probe decides mask_mod_qk_only).
  auto device = query_device(0);
  ASSERT_TRUE(bool(device)) << llvm::toString(device.takeError());
  auto compiled = resolve_modifiers(m, Pass::forward, device->target());
  ASSERT_TRUE(bool(compiled)) << llvm::toString(compiled.takeError());
  const std::string hash = modifiers_hash(*compiled);
  llvm::json::Object tuned = parse_object(r.out);
  const llvm::json::Array *entries = tuned.getArray("entries");
  ASSERT_TRUE(entries && entries->size() == 1) << r.out;
  const llvm::json::Object *entry = (*entries)[0].getAsObject();
  ASSERT_NE(entry, nullptr);
  EXPECT_FALSE(entry->get("error")) << r.out;
  const llvm::json::Object *key = entry->getObject("class");
  ASSERT_NE(key, nullptr) << r.out;
  EXPECT_EQ(key->getString("modifiers").getValueOr(""), hash) << r.out;
  EXPECT_GT(entry->getNumber("tflops").getValueOr(0), 0) << r.out;

  // A call with the snippets looks the tuning up (its class has their hash).
  r = run_cli(with({"query", "--json"}));
  ASSERT_EQ(r.code, 0) << r.err;
  llvm::json::Object query = parse_object(r.out);
  EXPECT_EQ(query.getString("source").getValueOr(""), "tuned") << r.out;
  EXPECT_EQ(query.getObject("class")->getString("modifiers").getValueOr(""), hash);
  // Without the snippets the class is another one, untuned.
  r = run_cli({"query", "--json", "--dtype", "bf16", "--batch", "2", "--heads", "8", "--seqlen",
               "1024", "--hdim", "64", "--db", dir.file("t.db")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(parse_object(r.out).getString("source").getValueOr(""), "heuristic") << r.out;

  // Tuned already: skipped; forced: every cubin (references too) stored.
  r = run_cli(with({"tune", "--aux-value", "prefix=256"}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("skipped 1 class already tuned"), std::string::npos) << r.out;
  r = run_cli(with({"tune", "--force", "--budget-s", "30", "--aux-value", "prefix=256"}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("NVRTC compiles in this run: 0"), std::string::npos) << r.out;
}

class ModifiedBackwardTuneTest : public testing::TempDbTest {
 protected:
  void SetUp() override {
    FLASHJIT_REQUIRE_GPU();
    open_temp_db("flashjit-modified-backward-tune");
  }
};

TEST_F(ModifiedBackwardTuneTest, StoresACheckedWinnerUnderTheModifiedClass) {
  const Problem p = tuned_problem();
  TuneOptions options;
  options.budget_s = 40;
  options.progress = [](const std::string &line) { std::printf("  tune: %s\n", line.c_str()); };
  options.modifiers.modifiers.score_mod = kAlibi;
  options.modifiers.modifiers.score_mod_grad = kAlibiGrad;
  options.modifiers.modifiers.mask_mod = kPrefix;
  options.modifiers.modifiers.aux = {{"const float*", "slopes"}, {"int", "prefix"}};
  options.modifiers.modifiers.sinks = true;
  options.modifiers.aux_values = {"prefix=200"};
  const Modifiers &m = options.modifiers.modifiers;

  auto outcome = tune_backward(p, false, *db_, options);
  ASSERT_TRUE(bool(outcome)) << llvm::toString(outcome.takeError());
  for (const std::string &note : outcome->notes) std::printf("  note: %s\n", note.c_str());
  for (const CandidateOutcome &c : outcome->candidates)
    std::printf("  %-44s %9.4f ms %s%s\n", describe(c.config).c_str(), c.median_ms,
                c.winner ? "WINNER " : "", c.failure.substr(0, 100).c_str());
  const TuningRecord &r = outcome->record;
  auto device = query_device(0);
  ASSERT_TRUE(bool(device)) << llvm::toString(device.takeError());
  auto compiled = resolve_modifiers(m, Pass::backward, device->target());
  ASSERT_TRUE(bool(compiled)) << llvm::toString(compiled.takeError());
  EXPECT_EQ(r.problem, problem_class_key(p, "bwd", modifiers_hash(*compiled)));
  EXPECT_GT(r.median_ms, 0);
  // The heuristic's config was timed with the finalists, or says why not
  // (with ALiBi, the mask and sinks in, a config may spill and be pruned).
  auto heuristic = from_stored(r.heuristic_config);
  ASSERT_TRUE(bool(heuristic)) << llvm::toString(heuristic.takeError());
  if (r.heuristic_ms <= 0) {
    bool explained = false;
    for (const CandidateOutcome &c : outcome->candidates)
      explained |= c.config.block_m == heuristic->block_m &&
                   c.config.block_n == heuristic->block_n && c.config.warps == heuristic->warps &&
                   c.config.stages == heuristic->stages && !c.failure.empty();
    EXPECT_TRUE(explained) << "heuristic " << describe(*heuristic) << " neither timed nor failed";
  }
  auto stored = db_->find_tuning(r.device, r.software, r.problem);
  ASSERT_TRUE(bool(stored)) << llvm::toString(stored.takeError());
  ASSERT_TRUE(stored->has_value());
  auto plain = db_->find_tuning(r.device, r.software, problem_class_key(p, "bwd"));
  ASSERT_TRUE(bool(plain)) << llvm::toString(plain.takeError());
  EXPECT_FALSE(plain->has_value());

  // The stored config's gradients through launch_backward, on the checked
  // problem, against the GPU reference with the snippets.
  auto config = from_stored(r.config);
  ASSERT_TRUE(bool(config)) << llvm::toString(config.takeError());
  auto inputs = make_modifier_inputs(p, options.modifiers);
  ASSERT_TRUE(bool(inputs)) << llvm::toString(inputs.takeError());
  ASSERT_NE(*inputs, nullptr);
  auto report = check_modified_backward(
      backward_accuracy_problem(p), (*inputs)->reference_args(),
      [&](const Problem &small, const BackwardArgs &a, CUstream stream) {
        return launch_backward(small, a, stream, *config);
      },
      nullptr, db_.get(), 77);
  ASSERT_TRUE(bool(report)) << llvm::toString(report.takeError());
  EXPECT_TRUE(report->passed()) << report->describe();
  ASSERT_TRUE(report->dsinks.has_value());
}

}  // namespace
}  // namespace flashjit
