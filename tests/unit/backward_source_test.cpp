// Where a backward call's config and program come from, without a GPU: a
// fake device and a temporary database. caller > tuned > nearest >
// heuristic as for the forward, under the backward's own class keys ("bwd"
// and "bwd-det" apart, and apart from "fwd"); the program's cubin compiled
// and stored once, then read without NVRTC. Also the backward's candidates.
#include <gtest/gtest.h>

#include <algorithm>

#include "generator/backward_spec.h"
#include "generator/heuristic.h"
#include "runtime/backward_source.h"
#include "runtime/kernel_source.h"
#include "runtime/runtime_counters.h"
#include "runtime/tuning_key.h"
#include "tests/fake_devices.h"
#include "tests/temp_db_test.h"
#include "tuner/backward_candidates.h"

namespace flashjit {
namespace {

using testing::fake_a100;

Problem problem(int64_t seqlen) {
  Problem p;
  p.batch = 2;
  p.heads_q = p.heads_kv = 8;
  p.seqlen_q = p.seqlen_k = seqlen;
  p.head_dim_qk = p.head_dim_v = 64;
  p.mask = MaskKind::causal;
  return p;
}

KernelConfig deterministic(KernelConfig c = {}) {
  c.deterministic = true;
  return c;
}

// Valid backward tiles for d=64, none of them the heuristic's (128x128 w8 s2).
const KernelConfig kTuned{KernelPath::sm80, 64, 64, 4, 2};
const KernelConfig kTunedDeterministic{KernelPath::sm80, 64, 128, 8, 1};
const KernelConfig kForwardTuned{KernelPath::sm80, 128, 32, 4, 2};

class BackwardSourceTest : public testing::TempDbTest {
 protected:
  void SetUp() override {
    auto software = software_fingerprint();
    if (!software) GTEST_SKIP() << "no NVRTC: " << llvm::toString(software.takeError());
    software_ = *software;
    open_temp_db("flashjit-backward-source");
  }
  void put(const Problem &p, const char *pass, const KernelConfig &config) {
    TuningRecord r;
    r.device = device_fingerprint(fake_a100());
    r.software = software_;
    r.problem = problem_class_key(p, pass);
    r.config = to_stored(config);
    KernelConfig mode;  // the heuristic's config, as the tuner stores it
    mode.deterministic = llvm::StringRef(pass) == "bwd-det";
    r.heuristic_config =
        llvm::StringRef(pass) == "fwd"
            ? to_stored(default_forward_config(p, fake_a100().target(),
                                               fake_a100().max_smem_per_block_optin))
            : to_stored(default_backward_config(p, fake_a100().target(),
                                                fake_a100().max_smem_per_block_optin, mode));
    r.shape = describe(p);
    r.median_ms = r.min_ms = r.max_ms = 1.0;
    r.tflops = 100;
    r.tuned_at = "2025-01-01T00:00:00Z";
    r.flashjit_version = "test";
    ASSERT_FALSE(bool(db_->put_tuning(r)));
  }
  ChosenConfig choose(const Problem &p, const KernelConfig &requested) {
    auto chosen = choose_backward_config(p, requested, fake_a100(), db_.get());
    EXPECT_TRUE(bool(chosen)) << llvm::toString(chosen.takeError());
    return chosen ? *chosen : ChosenConfig{};
  }
  SoftwareFingerprint software_;
};

TEST(ClassPass, NamesEachPassAndMode) {
  EXPECT_STREQ(class_pass(Pass::forward), "fwd");
  EXPECT_STREQ(class_pass(Pass::forward, true), "fwd");
  EXPECT_STREQ(class_pass(Pass::backward), "bwd");
  EXPECT_STREQ(class_pass(Pass::backward, true), "bwd-det");
}

TEST_F(BackwardSourceTest, HeuristicWithoutTunings) {
  const ChosenConfig c = choose(problem(4096), {});
  EXPECT_EQ(c.source, ConfigSource::heuristic);
  EXPECT_EQ(c.config, default_backward_config(problem(4096), fake_a100().target(),
                                              fake_a100().max_smem_per_block_optin));
  EXPECT_EQ(c.note, "");
}

TEST_F(BackwardSourceTest, TunedNearestAndCallerUnderTheBackwardsOwnClass) {
  put(problem(4096), "fwd", kForwardTuned);  // the forward's: never the backward's
  EXPECT_EQ(choose(problem(4096), {}).source, ConfigSource::heuristic);

  put(problem(4096), "bwd", kTuned);
  ChosenConfig c = choose(problem(4096), {});
  EXPECT_EQ(c.source, ConfigSource::tuned);
  EXPECT_EQ(c.config, kTuned);
  ASSERT_TRUE(c.record.has_value());
  EXPECT_EQ(c.record->problem.pass, "bwd");

  c = choose(problem(16384), {});  // another bucket of the class
  EXPECT_EQ(c.source, ConfigSource::nearest);
  EXPECT_EQ(c.config, kTuned);

  const KernelConfig caller{KernelPath::sm80, 128, 64, 8, 2};
  c = choose(problem(4096), caller);
  EXPECT_EQ(c.source, ConfigSource::caller);
  EXPECT_EQ(c.config, caller);

  // A partial request is a requirement on the tuned entry.
  KernelConfig partial;
  partial.block_m = 128;
  c = choose(problem(4096), partial);
  EXPECT_EQ(c.source, ConfigSource::heuristic);
  EXPECT_EQ(c.config.block_m, 128);
  EXPECT_EQ(c.note,
            "tuned entry (sm80 block_m=64 block_n=64 warps=4 stages=2) differs from the requested "
            "config");
}

TEST_F(BackwardSourceTest, DeterministicModeIsItsOwnClass) {
  put(problem(4096), "bwd", kTuned);
  ChosenConfig c = choose(problem(4096), deterministic());
  EXPECT_EQ(c.source, ConfigSource::heuristic);  // the atomic mode's tuning is not its
  EXPECT_TRUE(c.config.deterministic);

  put(problem(4096), "bwd-det", kTunedDeterministic);
  c = choose(problem(4096), deterministic());
  EXPECT_EQ(c.source, ConfigSource::tuned);
  EXPECT_EQ(c.config, deterministic(kTunedDeterministic));
  EXPECT_EQ(choose(problem(4096), {}).config, kTuned);
}

TEST_F(BackwardSourceTest, StoredConfigThatNoLongerValidatesIsPassedOver) {
  // 128x128 with 4 warps: more accumulators per thread than the traits allow.
  put(problem(4096), "bwd", KernelConfig{KernelPath::sm80, 128, 128, 4, 2});
  const ChosenConfig c = choose(problem(4096), {});
  EXPECT_EQ(c.source, ConfigSource::heuristic);
  EXPECT_EQ(c.note.rfind("tuned entry (sm80 block_m=128 block_n=128 warps=4 stages=2) no longer "
                         "validates: ", 0),
            0u)
      << c.note;
}

TEST_F(BackwardSourceTest, ProgramCubinIsStoredThenReadWithoutNvrtc) {
  auto spec = make_backward_spec(problem(300), kTuned, TargetArch::for_device(8, 0));
  ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
  const uint64_t before = runtime_counters().compiles.load();
  auto first = kernel_cubin(*spec, db_.get());
  ASSERT_TRUE(bool(first)) << llvm::toString(first.takeError());
  EXPECT_TRUE(first->compiled);
  EXPECT_EQ(first->entry, "flashjit_bwd_sm80");
  EXPECT_EQ(runtime_counters().compiles.load(), before + 1);
  auto again = kernel_cubin(*spec, db_.get());
  ASSERT_TRUE(bool(again)) << llvm::toString(again.takeError());
  EXPECT_FALSE(again->compiled);
  EXPECT_EQ(again->bytes, first->bytes);
  EXPECT_EQ(again->key, first->key);
  EXPECT_EQ(runtime_counters().compiles.load(), before + 1);
  auto stored = db_->get_cubin(first->key);
  ASSERT_TRUE(bool(stored)) << llvm::toString(stored.takeError());
  ASSERT_TRUE(stored->has_value());
  EXPECT_EQ((*stored)->kernel_id, spec->id());
}

TEST(BackwardCandidates, HeuristicFirstThenEveryValidSm80Config) {
  const Problem p = problem(4096);
  const TargetArch a100 = TargetArch::for_device(8, 0);
  const CandidateSet set = backward_candidates(p, a100, 163 * 1024, false);
  ASSERT_FALSE(set.configs.empty());
  EXPECT_EQ(set.configs.front(), default_backward_config(p, a100, 163 * 1024));
  EXPECT_EQ(set.configs.size() + set.pruned.size(), 24u);  // the grid, the heuristic in it
  for (const KernelConfig &c : set.configs) {
    EXPECT_FALSE(c.deterministic);
    EXPECT_FALSE(bool(make_backward_spec(p, c, a100, 163 * 1024).takeError())) << describe(c);
  }
  for (const PrunedConfig &pruned : set.pruned) EXPECT_FALSE(pruned.reason.empty());
  // 128x128 with 4 warps is the traits' to refuse (accumulators per thread).
  const KernelConfig too_big{KernelPath::sm80, 128, 128, 4, 2};
  EXPECT_TRUE(std::any_of(set.pruned.begin(), set.pruned.end(),
                          [&](const PrunedConfig &q) { return q.config == too_big; }));

  const CandidateSet det = backward_candidates(p, a100, 163 * 1024, true);
  ASSERT_FALSE(det.configs.empty());
  for (const KernelConfig &c : det.configs) EXPECT_TRUE(c.deterministic) << describe(c);
  // On sm_90a both families' candidates, every one deterministic (the sm90
  // tiles that cannot stage dQ pruned), the sm90 heuristic's first.
  const TargetArch h100{9, 0, true};
  const CandidateSet det90 = backward_candidates(p, h100, 227 * 1024, true);
  ASSERT_FALSE(det90.configs.empty());
  EXPECT_EQ(det90.configs.front().path, KernelPath::sm90);
  int sm90 = 0;
  for (const KernelConfig &c : det90.configs) {
    EXPECT_TRUE(c.deterministic) << describe(c);
    sm90 += c.path == KernelPath::sm90;
  }
  EXPECT_GT(sm90, 1);
}

TEST(BackwardCandidates, AModifiedClassPutsItsOwnHeuristicFirst) {
  // d=64 (128-query tiles): a caller's modifiers keep one Q/dO stage where
  // the plain class takes two (BwdSm90Traits::default_config), and the
  // tuner times the heuristic only when it is the first candidate.
  const Problem p = problem(1024);
  const TargetArch h100{9, 0, true};
  KernelConfig mode;
  const KernelConfig plain = default_backward_config(p, h100, 227 * 1024, mode);
  const KernelConfig modified = default_backward_config(p, h100, 227 * 1024, mode, true);
  ASSERT_EQ(plain.path, KernelPath::sm90);
  EXPECT_EQ(plain.stages, 2);
  EXPECT_EQ(modified.stages, 1);
  EXPECT_EQ(backward_candidates(p, h100, 227 * 1024, false).configs.front(), plain);
  const CandidateSet set = backward_candidates(p, h100, 227 * 1024, false, true);
  ASSERT_FALSE(set.configs.empty());
  EXPECT_EQ(set.configs.front(), modified);
  EXPECT_EQ(std::count(set.configs.begin(), set.configs.end(), plain), 1);
}

}  // namespace
}  // namespace flashjit
