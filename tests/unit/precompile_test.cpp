// `flashjit precompile` without a GPU: every candidate of a problem class
// (the heuristic's first) compiled for sm_90a into the cubin store, and a
// second run compiles nothing.
#include <gtest/gtest.h>

#include "generator/heuristic.h"
#include "generator/kernel_spec.h"
#include "generator/source.h"
#include "runtime/nvrtc_compiler.h"
#include "runtime/tuning_key.h"
#include "tuner/candidates.h"
#include "tuner/tuner.h"
#include "tests/temp_db_test.h"

namespace flashjit {
namespace {

class PrecompileTest : public testing::TempDbTest {
 protected:
  void SetUp() override {
    auto version = nvrtc_version();
    if (!version) GTEST_SKIP() << "no NVRTC: " << llvm::toString(version.takeError());
    nvrtc_ = *version;
    open_temp_db("flashjit-precompile");
  }

  std::string nvrtc_;
};

TEST_F(PrecompileTest, FillsTheCubinStoreOnceForSm90a) {
  // d=256 keeps the candidate set small (its register model allows only
  // 16 rows per warp), so the test compiles a dozen kernels, not thirty.
  Problem p;
  p.batch = 2;
  p.heads_q = p.heads_kv = 8;
  p.seqlen_q = p.seqlen_k = 1024;
  p.head_dim_qk = p.head_dim_v = 256;
  p.mask = MaskKind::causal;
  const TargetArch arch{9, 0, true};
  const int smem = max_smem_per_block(arch);
  const CandidateSet set = forward_candidates(p, arch, smem);
  // Every candidate, plus the GPU reference kernel the tuner checks with.
  const int total = int(set.configs.size()) + 1;
  ASSERT_GT(total, 2);

  auto first = precompile_forward(p, arch, smem, *db_);
  ASSERT_TRUE(bool(first)) << llvm::toString(first.takeError());
  for (const std::string &f : first->failures) ADD_FAILURE() << f;
  EXPECT_EQ(first->compiled, total);
  EXPECT_EQ(first->already_stored, 0);
  EXPECT_EQ(first->failed, 0);
  auto count = db_->count_cubins();
  ASSERT_TRUE(bool(count)) << llvm::toString(count.takeError());
  EXPECT_EQ(*count, total);

  // Each candidate's cubin is under the key the runtime looks up, for the
  // heuristic's config above all (a fleet's first call).
  for (const KernelConfig &config : set.configs) {
    auto spec = make_forward_spec(p, config, arch, smem);
    ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
    auto stored = db_->get_cubin(cubin_key(generate_forward(*spec), arch, nvrtc_));
    ASSERT_TRUE(bool(stored)) << llvm::toString(stored.takeError());
    ASSERT_TRUE(stored->has_value()) << spec->id();
    EXPECT_EQ((*stored)->arch, "sm_90a");
    EXPECT_EQ((*stored)->kernel_id, spec->id());
    EXPECT_FALSE((*stored)->bytes.empty());
  }

  auto second = precompile_forward(p, arch, smem, *db_, 2);
  ASSERT_TRUE(bool(second)) << llvm::toString(second.takeError());
  EXPECT_EQ(second->compiled, 0);
  EXPECT_EQ(second->already_stored, total);
  EXPECT_EQ(second->failed, 0);
  count = db_->count_cubins();
  ASSERT_TRUE(bool(count)) << llvm::toString(count.takeError());
  EXPECT_EQ(*count, total);
}

TEST_F(PrecompileTest, AnInvalidProblemIsAnError) {
  Problem p;
  p.head_dim_qk = p.head_dim_v = 12;  // not a multiple of 8
  auto outcome = precompile_forward(p, TargetArch{9, 0, true}, 0, *db_);
  ASSERT_FALSE(bool(outcome));
  EXPECT_NE(llvm::toString(outcome.takeError()).find("12"), std::string::npos);
}

}  // namespace
}  // namespace flashjit
