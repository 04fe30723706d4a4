// Fault isolation on the GPU: a tune of either pass whose
// candidate n is planted ($FLASHJIT_TEST_PLANT, tuner/planted_faults.h) to
// fault on the GPU (a store to a wild address: CUDA_ERROR_ILLEGAL_ADDRESS,
// which poisons the measuring worker's context), to spin forever, or to
// crash NVRTC, completes: the planted candidate is recorded failed with the
// reason, a fresh worker measures the rest, a winner is stored and the
// database is intact. A backward candidate is a program of three kernels;
// the planted kernel stands in for each. The workers are the built
// `flashjit` binary ($FLASHJIT_CLI on the GPU machine).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gpu_environment.h"
#include "runtime/tuning_key.h"
#include "tests/db_integrity.h"
#include "tests/temp_db_test.h"
#include "tests/unit/cli_runner.h"
#include "tuner/backward_candidates.h"
#include "tuner/candidates.h"
#include "tuner/tune_backward.h"
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
  static KernelConfig planted_config(Pass pass) {
    auto device = query_device(0);
    EXPECT_TRUE(bool(device));
    if (!device) llvm::consumeError(device.takeError());
    const TargetArch arch = device->target();
    const int smem = device->max_smem_per_block_optin;
    const CandidateSet set = pass == Pass::forward
                                 ? forward_candidates(problem(), arch, smem)
                                 : backward_candidates(problem(), arch, smem, false);
    EXPECT_GT(set.configs.size(), size_t(kPlanted));
    return set.configs[kPlanted];
  }
  // The planted candidate's outcome, the winner stored under `pass`'s class,
  // the file intact, and `workers` measuring workers started (2: one,
  // replaced once, by the planted candidate alone).
  const CandidateOutcome &check_outcome(const TuneOutcome &outcome, Pass pass = Pass::forward,
                                        int workers = 2) {
    for (const CandidateOutcome &c : outcome.candidates)
      std::printf("  %-40s %9.4f ms %s%s\n", describe(c.config).c_str(), c.median_ms,
                  c.winner ? "WINNER " : "", c.failure.substr(0, 160).c_str());
    std::printf("measuring workers started: %d\n", outcome.measuring_workers);
    const KernelConfig planted = planted_config(pass);
    auto it = std::find_if(outcome.candidates.begin(), outcome.candidates.end(),
                           [&](const CandidateOutcome &c) {
                             return c.config == planted && !c.id.empty();
                           });
    EXPECT_NE(it, outcome.candidates.end());
    EXPECT_FALSE(it->winner);
    EXPECT_NE(outcome.record.config, to_stored(planted));
    EXPECT_EQ(outcome.record.problem, problem_class_key(problem(), to_string(pass)));
    EXPECT_GE(outcome.record.candidates_failed, 1);
    auto stored = db_->find_tuning(outcome.record.device, outcome.record.software,
                                   outcome.record.problem);
    EXPECT_TRUE(bool(stored) && stored->has_value());
    EXPECT_EQ((*stored)->config, outcome.record.config);
    auto cubin = db_->get_cubin(outcome.record.cubin_key);
    EXPECT_TRUE(bool(cubin) && cubin->has_value());
    EXPECT_EQ(testing::integrity_check(db_->path()), "ok");
    EXPECT_EQ(outcome.measuring_workers, workers);
    return *it;
  }

  // A tune of `pass` (the backward in its default mode) with `plant`.
  llvm::Expected<TuneOutcome> tune(Pass pass, const std::string &plant, double timeout_s) {
    ScopedPlant planted(plant + ":" + std::to_string(kPlanted));
    return pass == Pass::forward ? tune_forward(problem(), *db_, options(timeout_s))
                                 : tune_backward(problem(), false, *db_, options(timeout_s));
  }

  void a_gpu_fault_fails_one_candidate(Pass pass) {
    auto outcome = tune(pass, "gpu_fault", 30);
    ASSERT_TRUE(bool(outcome)) << llvm::toString(outcome.takeError());
    const CandidateOutcome &planted = check_outcome(*outcome, pass);
    std::printf("GPU fault candidate (%s): %s (tune %.1f s)\n", to_string(pass),
                planted.failure.c_str(), outcome->wall_s);
    EXPECT_EQ(planted.failure.rfind("launch: GPU fault while timing candidate 2: ", 0), 0u)
        << planted.failure;
    EXPECT_NE(planted.failure.find("CUDA_ERROR_ILLEGAL_ADDRESS"), std::string::npos)
        << planted.failure;
  }

  void a_hang_is_killed_after_the_timeout(Pass pass) {
    auto outcome = tune(pass, "hang", 5);
    ASSERT_TRUE(bool(outcome)) << llvm::toString(outcome.takeError());
    const CandidateOutcome &planted = check_outcome(*outcome, pass);
    std::printf("hung candidate (%s): %s (tune %.1f s)\n", to_string(pass),
                planted.failure.c_str(), outcome->wall_s);
    EXPECT_EQ(planted.failure, "launch: timed out after 5 s while timing; the worker was killed");
  }

  // `flashjit tune` (with `pass_flags`) uses workers, survives the fault and
  // stores the class under `pass`.
  void the_tune_command_survives_a_gpu_fault(std::vector<std::string> pass_flags,
                                             const char *pass) {
    ScopedPlant plant("gpu_fault:" + std::to_string(kPlanted));
    const std::string path = db_->path();
    std::vector<std::string> args = {"tune", "--json", "--dtype", "bf16", "--batch", "1",
                                     "--heads", "4", "--seqlen", "777", "--hdim", "64",
                                     "--causal", "--budget-s", "60", "--db", path};
    args.insert(args.end(), pass_flags.begin(), pass_flags.end());
    const testing_cli::CliResult r = testing_cli::run_cli(args);
    std::printf("%s\n%s\n", r.out.c_str(), r.err.substr(0, 4000).c_str());
    ASSERT_EQ(r.code, 0) << r.err;
    auto json = llvm::json::parse(r.out);
    ASSERT_TRUE(bool(json)) << llvm::toString(json.takeError());
    const llvm::json::Object &entry =
        *json->getAsObject()->getArray("entries")->front().getAsObject();
    EXPECT_EQ(entry.get("error"), nullptr);
    EXPECT_GE(entry.getInteger("candidates_failed").getValueOr(0), 1);
    auto rows = db_->list_tunings();
    ASSERT_TRUE(bool(rows)) << llvm::toString(rows.takeError());
    ASSERT_EQ(rows->size(), 1u);
    EXPECT_EQ(rows->front().problem.pass, pass);
    EXPECT_EQ(testing::integrity_check(path), "ok");
  }
};

TEST_F(FaultIsolationGpu, AGpuFaultFailsOneCandidateAndTheTuneCompletes) {
  a_gpu_fault_fails_one_candidate(Pass::forward);
}

TEST_F(FaultIsolationGpu, AHangIsKilledAfterTheTimeoutAndTheTuneCompletes) {
  a_hang_is_killed_after_the_timeout(Pass::forward);
}

TEST_F(FaultIsolationGpu, TheTuneCommandSurvivesAGpuFault) {
  the_tune_command_survives_a_gpu_fault({}, "fwd");
}

// The backward tuner measures in the same workers: a backward candidate
// whose program faults on the GPU, or hangs, fails alone.
TEST_F(FaultIsolationGpu, ABackwardGpuFaultFailsOneCandidateAndTheTuneCompletes) {
  a_gpu_fault_fails_one_candidate(Pass::backward);
}

TEST_F(FaultIsolationGpu, ABackwardHangIsKilledAfterTheTimeoutAndTheTuneCompletes) {
  a_hang_is_killed_after_the_timeout(Pass::backward);
}

// A compiler crash in the backward tune's compile pool: the candidate fails
// at compile time, so the one measuring worker is never replaced.
TEST_F(FaultIsolationGpu, ABackwardCompilerCrashFailsOneCandidateAndTheTuneCompletes) {
  auto outcome = tune(Pass::backward, "compile_crash", 30);
  ASSERT_TRUE(bool(outcome)) << llvm::toString(outcome.takeError());
  const CandidateOutcome &planted = check_outcome(*outcome, Pass::backward, /*workers=*/1);
  EXPECT_EQ(planted.failure, "compile: worker killed by SIGSEGV while compiling");
  EXPECT_TRUE(planted.cubin_key.empty());
}

TEST_F(FaultIsolationGpu, TheTuneCommandSurvivesABackwardGpuFault) {
  the_tune_command_survives_a_gpu_fault({"--pass", "bwd"}, "bwd");
}

}  // namespace
}  // namespace flashjit
