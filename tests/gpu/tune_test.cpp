// A real tune of one problem class on the GPU into a temporary database:
// the record is stored with every field filled, its config is one of the
// candidates, it is at least as fast as the heuristic's (measured in the same
// run), and a second tune of the class compiles nothing. Prints the wall time
// (the bar: <= 60 s per class on the H200, aiming at 20 s).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "gpu_environment.h"
#include "runtime/device.h"
#include "runtime/tuning_key.h"
#include "tuner/candidates.h"
#include "tuner/tuner.h"
#include "tests/temp_db_test.h"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit {
namespace {

class TuneTest : public testing::TempDbTest {
 protected:
  void SetUp() override {
    FLASHJIT_REQUIRE_GPU();
    open_temp_db("flashjit-tune");
  }

  static Problem problem() {
    Problem p;
    p.dtype = DType::bf16;
    p.batch = 2;
    p.heads_q = p.heads_kv = 8;
    p.seqlen_q = p.seqlen_k = 1024;
    p.head_dim_qk = p.head_dim_v = 64;
    p.mask = MaskKind::causal;
    return p;
  }
  static TuneOptions options() {
    TuneOptions o;
    o.budget_s = 30;
    o.progress = [](const std::string &line) { std::printf("  tune: %s\n", line.c_str()); };
    return o;
  }
};

TEST_F(TuneTest, StoresAWinnerAtLeastAsFastAsTheHeuristic) {
  const Problem p = problem();
  auto outcome = tune_forward(p, *db_, options());
  ASSERT_TRUE(bool(outcome)) << llvm::toString(outcome.takeError());
  std::printf("tune of %s: %.2f s wall (compile %.2f s, measure %.2f s, %d input sets)\n",
              describe(p).c_str(), outcome->wall_s, outcome->compile_s, outcome->measure_s,
              outcome->input_sets);
  for (const std::string &note : outcome->notes) std::printf("  note: %s\n", note.c_str());
  for (const CandidateOutcome &c : outcome->candidates)
    std::printf("  %-40s %9.4f ms rounds=%d regs=%3d spill=%3d occ=%d %s%s\n",
                describe(c.config).c_str(), c.median_ms, c.rounds, c.registers, c.spill_bytes,
                c.occupancy, c.winner ? "WINNER " : "", c.failure.substr(0, 80).c_str());
  EXPECT_LE(outcome->wall_s, 60.0);

  const TuningRecord &r = outcome->record;
  auto device = query_device(0);
  ASSERT_TRUE(bool(device)) << llvm::toString(device.takeError());
  const CandidateSet set =
      forward_candidates(p, device->target(), device->max_smem_per_block_optin);
  auto config = from_stored(r.config);
  ASSERT_TRUE(bool(config)) << llvm::toString(config.takeError());
  EXPECT_NE(std::find(set.configs.begin(), set.configs.end(), *config), set.configs.end())
      << describe(*config);

  // The gain over the heuristic, measured with the same repeats in the same
  // run; 5% for noise (a winner that failed its check gives way to a slower
  // one, which the notes would say).
  EXPECT_GT(r.heuristic_ms, 0);
  EXPECT_LE(r.median_ms, r.heuristic_ms * 1.05) << "heuristic " << r.heuristic_ms;
  EXPECT_EQ(r.heuristic_config, to_stored(set.configs.front()));

  EXPECT_EQ(r.device, device_fingerprint(*device));
  EXPECT_FALSE(r.software.nvrtc_version.empty());
  EXPECT_FALSE(r.software.templates_hash.empty());
  EXPECT_EQ(r.problem, problem_class_key(p, "fwd"));
  EXPECT_EQ(r.shape, describe(p));
  EXPECT_GT(r.median_ms, 0);
  EXPECT_LE(r.min_ms, r.median_ms);
  EXPECT_GE(r.max_ms, r.median_ms);
  EXPECT_NEAR(r.tflops, p.forward_flops() / (r.median_ms * 1e-3) / 1e12, 1e-6 * r.tflops);
  EXPECT_GE(r.occupancy, 1);
  EXPECT_GT(r.registers, 0);
  EXPECT_GT(r.smem_bytes, 0);
  EXPECT_LE(r.spill_bytes, 64);
  EXPECT_EQ(r.candidates_tried, int(set.configs.size()));
  EXPECT_LT(r.candidates_failed, r.candidates_tried);
  EXPECT_EQ(r.tuned_at.size(), 20u) << r.tuned_at;  // 2026-11-29T20:00:00Z
  EXPECT_EQ(r.tuned_at.back(), 'Z');
  EXPECT_EQ(r.flashjit_version, FLASHJIT_VERSION);
  ASSERT_FALSE(r.cubin_key.empty());
  auto cubin = db_->get_cubin(r.cubin_key);
  ASSERT_TRUE(bool(cubin)) << llvm::toString(cubin.takeError());
  EXPECT_TRUE(cubin->has_value());

  auto stored = db_->find_tuning(r.device, r.software, r.problem);
  ASSERT_TRUE(bool(stored)) << llvm::toString(stored.takeError());
  ASSERT_TRUE(stored->has_value());
  EXPECT_EQ((*stored)->config, r.config);
  EXPECT_EQ((*stored)->cubin_key, r.cubin_key);

  // Again: every cubin comes from the store now.
  auto again = tune_forward(p, *db_, options());
  ASSERT_TRUE(bool(again)) << llvm::toString(again.takeError());
  std::printf("second tune: %.2f s wall (compile %.2f s)\n", again->wall_s, again->compile_s);
  for (const CandidateOutcome &c : again->candidates) {
    if (!c.cubin_key.empty()) {
      EXPECT_TRUE(c.cubin_from_store) << describe(c.config);
    }
  }
}

TEST_F(TuneTest, AMissingDeviceIsAClearError) {
  auto count = device_count();
  ASSERT_TRUE(bool(count)) << llvm::toString(count.takeError());
  TuneOptions o;
  o.device = *count;
  auto outcome = tune_forward(problem(), *db_, o);
  ASSERT_FALSE(bool(outcome));
  EXPECT_NE(llvm::toString(outcome.takeError()).find("no CUDA device"), std::string::npos);
}

}  // namespace
}  // namespace flashjit
