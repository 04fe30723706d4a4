// Fault isolation on the GPU (issue 6): a tune whose candidate n is planted
// ($FLASHJIT_TEST_PLANT, tuner/planted_faults.h) to fault on the GPU (a
// store to a wild address: CUDA_ERROR_ILLEGAL_ADDRESS, which poisons the
// measuring worker's context) or to spin forever, completes: the planted
// candidate is recorded failed with the reason, a fresh worker measures
// the rest, a winner is stored and the database is intact. The workers are
// the built `flashjit` binary ($FLASHJIT_CLI on the GPU machine).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "gpu_environment.h"
#include "runtime/tuning_key.h"
#include "tests/db_integrity.h"
#include "tests/temp_db_test.h"
#include "tests/unit/cli_runner.h"
#include "tuner/candidates.h"
#include "tuner/tuner.h"
#include "llvm/Support/JSON.h"

namespace flashjit {
namespace {

constexpr int kPlanted = 2;  // neither the heuristic's config (0) nor the warm-up's

class ScopedPlant {
 public:
  explicit ScopedPlant(const std::string &value) {
    ::setenv("FLASHJIT_TEST_PLANT", value.c_str(), 1);
  }
  ~ScopedPlant() { ::unsetenv("FLASHJIT_TEST_PLANT"); }
};

class FaultIsolationGpu : public testing::TempDbTest {
 protected:
  void SetUp() override {
    FLASHJIT_REQUIRE_GPU();
    open_temp_db("flashjit-fault-isolation-gpu");
  }
  static Problem problem() {
    return testing::make_problem(DType::bf16, 1, 4, 4, 777, 777, 64, 64, MaskKind::causal);
  }
  static TuneOptions options(double timeout_s) {
    TuneOptions o;
    o.budget_s = 60;
    o.worker_binary = testing_cli::cli_path();
    o.candidate_timeout_s = timeout_s;
    o.progress = [](const std::string &line) { std::printf("  tune: %s\n", line.c_str()); };
    return o;
  }
  KernelConfig planted_config() const {
    auto device = query_device(0);
    EXPECT_TRUE(bool(device));
    if (!device) llvm::consumeError(device.takeError());
    const CandidateSet set = forward_candidates(problem(), device->target(),
                                                device->max_smem_per_block_optin);
    EXPECT_GT(set.configs.size(), size_t(kPlanted));
    return set.configs[kPlanted];
  }
  // The planted candidate's outcome, the winner stored, the file intact.
  const CandidateOutcome &check_outcome(const TuneOutcome &outcome) {
    for (const CandidateOutcome &c : outcome.candidates)
      std::printf("  %-40s %9.4f ms %s%s\n", describe(c.config).c_str(), c.median_ms,
                  c.winner ? "WINNER " : "", c.failure.substr(0, 160).c_str());
    std::printf("measuring workers started: %d\n", outcome.measuring_workers);
    const KernelConfig planted = planted_config();
    auto it = std::find_if(outcome.candidates.begin(), outcome.candidates.end(),
                           [&](const CandidateOutcome &c) {
                             return c.config == planted && !c.id.empty();
                           });
    EXPECT_NE(it, outcome.candidates.end());
    EXPECT_FALSE(it->winner);
    EXPECT_NE(outcome.record.config, to_stored(planted));
    auto stored = db_->find_tuning(outcome.record.device, outcome.record.software,
                                   outcome.record.problem);
    EXPECT_TRUE(bool(stored) && stored->has_value());
    EXPECT_EQ((*stored)->config, outcome.record.config);
    auto cubin = db_->get_cubin(outcome.record.cubin_key);
    EXPECT_TRUE(bool(cubin) && cubin->has_value());
    EXPECT_EQ(testing::integrity_check(db_->path()), "ok");
    // One worker, replaced once: by the planted candidate alone.
    EXPECT_EQ(outcome.measuring_workers, 2);
    return *it;
  }
};

TEST_F(FaultIsolationGpu, AGpuFaultFailsOneCandidateAndTheTuneCompletes) {
  ScopedPlant plant("gpu_fault:" + std::to_string(kPlanted));
  auto outcome = tune_forward(problem(), *db_, options(30));
  ASSERT_TRUE(bool(outcome)) << llvm::toString(outcome.takeError());
  const CandidateOutcome &planted = check_outcome(*outcome);
  std::printf("GPU fault candidate: %s\n", planted.failure.c_str());
  EXPECT_EQ(planted.failure.rfind("launch: GPU fault while timing candidate 2: ", 0), 0u)
      << planted.failure;
  EXPECT_NE(planted.failure.find("CUDA_ERROR_ILLEGAL_ADDRESS"), std::string::npos)
      << planted.failure;
}

TEST_F(FaultIsolationGpu, AHangIsKilledAfterTheTimeoutAndTheTuneCompletes) {
  ScopedPlant plant("hang:" + std::to_string(kPlanted));
  auto outcome = tune_forward(problem(), *db_, options(5));
  ASSERT_TRUE(bool(outcome)) << llvm::toString(outcome.takeError());
  const CandidateOutcome &planted = check_outcome(*outcome);
  std::printf("hung candidate: %s (tune %.1f s)\n", planted.failure.c_str(), outcome->wall_s);
  EXPECT_EQ(planted.failure, "launch: timed out after 5 s while timing; the worker was killed");
}

// The same through the command: `flashjit tune` uses workers, survives the
// fault and stores the class.
TEST_F(FaultIsolationGpu, TheTuneCommandSurvivesAGpuFault) {
  ScopedPlant plant("gpu_fault:" + std::to_string(kPlanted));
  const std::string path = db_->path();
  const testing_cli::CliResult r = testing_cli::run_cli(
      {"tune", "--json", "--dtype", "bf16", "--batch", "1", "--heads", "4", "--seqlen", "777",
       "--hdim", "64", "--causal", "--budget-s", "60", "--db", path});
  std::printf("%s\n%s\n", r.out.c_str(), r.err.substr(0, 4000).c_str());
  ASSERT_EQ(r.code, 0) << r.err;
  auto json = llvm::json::parse(r.out);
  ASSERT_TRUE(bool(json)) << llvm::toString(json.takeError());
  const llvm::json::Object &entry = *json->getAsObject()->getArray("entries")->front().getAsObject();
  EXPECT_EQ(entry.get("error"), nullptr);
  EXPECT_GE(entry.getInteger("candidates_failed").getValueOr(0), 1);
  auto rows = db_->list_tunings();
  ASSERT_TRUE(bool(rows)) << llvm::toString(rows.takeError());
  EXPECT_EQ(rows->size(), 1u);
  EXPECT_EQ(testing::integrity_check(path), "ok");
}

}  // namespace
}  // namespace flashjit
