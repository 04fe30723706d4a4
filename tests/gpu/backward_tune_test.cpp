// The backward as a tuned class on the GPU: a real tune of a small class into
// a temporary database stores a record (class "bwd", or "bwd-det" for the
// deterministic mode) whose config is a candidate, at least as fast as the
// heuristic's measured in the same run, and whose gradients pass the
// criterion of reference/accuracy.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "gpu_environment.h"
#include "reference/backward_check.h"
#include "runtime/backward_source.h"
#include "runtime/device.h"
#include "runtime/launch_backward.h"
#include "runtime/tuning_key.h"
#include "tests/temp_db_test.h"
#include "tuner/backward_candidates.h"
#include "tuner/tune_backward.h"

namespace flashjit {
namespace {

Problem tuned_problem() {
  Problem p;
  p.dtype = DType::bf16;
  p.batch = 2;
  p.heads_q = p.heads_kv = 8;
  p.seqlen_q = p.seqlen_k = 1024;
  p.head_dim_qk = p.head_dim_v = 64;
  p.mask = MaskKind::causal;
  return p;
}

class BackwardTuneTest : public testing::TempDbTest {
 protected:
  void SetUp() override {
    FLASHJIT_REQUIRE_GPU();
    open_temp_db("flashjit-backward-tune");
  }
  static TuneOptions options() {
    TuneOptions o;
    o.budget_s = 40;
    o.progress = [](const std::string &line) { std::printf("  tune: %s\n", line.c_str()); };
    return o;
  }

  // Tunes `p` in `deterministic` mode and checks the record, its row, and the
  // stored config's gradients (through launch_backward with that config).
  void tune_and_check(const Problem &p, bool deterministic) {
    auto outcome = tune_backward(p, deterministic, *db_, options());
    ASSERT_TRUE(bool(outcome)) << llvm::toString(outcome.takeError());
    std::printf("backward tune of %s%s: %.2f s wall (compile %.2f s, measure %.2f s, %d input "
                "sets)\n",
                describe(p).c_str(), deterministic ? " (deterministic)" : "", outcome->wall_s,
                outcome->compile_s, outcome->measure_s, outcome->input_sets);
    for (const std::string &note : outcome->notes) std::printf("  note: %s\n", note.c_str());
    for (const CandidateOutcome &c : outcome->candidates)
      std::printf("  %-44s %9.4f ms rounds=%d regs=%3d spill=%3d occ=%d %s%s\n",
                  describe(c.config).c_str(), c.median_ms, c.rounds, c.registers,
                  c.spill_bytes, c.occupancy, c.winner ? "WINNER " : "",
                  c.failure.substr(0, 80).c_str());

    const TuningRecord &r = outcome->record;
    auto device = query_device(0);
    ASSERT_TRUE(bool(device)) << llvm::toString(device.takeError());
    const CandidateSet set = backward_candidates(p, device->target(),
                                                 device->max_smem_per_block_optin, deterministic);
    auto config = from_stored(r.config);
    ASSERT_TRUE(bool(config)) << llvm::toString(config.takeError());
    config->deterministic = deterministic;
    EXPECT_NE(std::find(set.configs.begin(), set.configs.end(), *config), set.configs.end())
        << describe(*config);
    EXPECT_EQ(r.problem, problem_class_key(p, deterministic ? "bwd-det" : "bwd"));
    EXPECT_EQ(r.heuristic_config, to_stored(set.configs.front()));
    // Timed with the finalists in the same run; 5% for noise (a winner that
    // failed its check gives way to a slower one, which the notes say).
    EXPECT_GT(r.heuristic_ms, 0);
    EXPECT_LE(r.median_ms, r.heuristic_ms * 1.05) << "heuristic " << r.heuristic_ms;
    EXPECT_NEAR(r.tflops, 2.5 * p.forward_flops() / (r.median_ms * 1e-3) / 1e12,
                1e-6 * r.tflops);
    EXPECT_GE(r.occupancy, 1);
    EXPECT_LE(r.spill_bytes, 64);
    EXPECT_EQ(r.candidates_tried, int(set.configs.size()));
    auto cubin = db_->get_cubin(r.cubin_key);
    ASSERT_TRUE(bool(cubin)) << llvm::toString(cubin.takeError());
    EXPECT_TRUE(cubin->has_value());
    auto stored = db_->find_tuning(r.device, r.software, r.problem);
    ASSERT_TRUE(bool(stored)) << llvm::toString(stored.takeError());
    ASSERT_TRUE(stored->has_value());
    EXPECT_EQ((*stored)->config, r.config);

    // The stored config's gradients, on the checked problem of the class.
    auto report = check_backward(
        backward_accuracy_problem(p),
        [&](const Problem &small, const BackwardArgs &args, CUstream stream) {
          return launch_backward(small, args, stream, *config);
        },
        nullptr, 77);
    ASSERT_TRUE(bool(report)) << llvm::toString(report.takeError());
    EXPECT_TRUE(report->passed()) << report->describe();
  }
};

TEST_F(BackwardTuneTest, StoresACheckedWinnerAtLeastAsFastAsTheHeuristic) {
  tune_and_check(tuned_problem(), /*deterministic=*/false);
}

TEST_F(BackwardTuneTest, DeterministicModeIsTunedAsItsOwnClass) {
  tune_and_check(tuned_problem(), /*deterministic=*/true);
  auto device = query_device(0);
  ASSERT_TRUE(bool(device)) << llvm::toString(device.takeError());
  // The atomic mode's class has no tuning from this.
  auto chosen = choose_backward_config(tuned_problem(), {}, *device, db_.get());
  ASSERT_TRUE(bool(chosen)) << llvm::toString(chosen.takeError());
  EXPECT_EQ(chosen->source, ConfigSource::heuristic);
}

}  // namespace
}  // namespace flashjit
