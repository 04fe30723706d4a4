// Fault isolation without a GPU: a candidate that crashes the compiler
// (a genuine NVRTC 13.0 segfault, planted through $FLASHJIT_TEST_PLANT)
// fails alone, through the tuner's compile path and through the CLI, and a
// fresh worker compiles the rest into the cubin store. Needs NVRTC (like
// the other compile tests) and the built `flashjit` binary.
#include <gtest/gtest.h>

#include <cstdlib>

#include "cli_runner.h"
#include "generator/heuristic.h"
#include "runtime/nvrtc_compiler.h"
#include "tests/temp_db_test.h"
#include "tuner/candidates.h"
#include "tuner/tuner.h"
#include "tuner/worker_compile.h"
#include "tuner/worker_process.h"
#include "tuner/worker_protocol.h"

namespace flashjit {
namespace {

using testing_cli::cli_path;

// Sets an environment variable for one test (the workers inherit it).
class ScopedEnv {
 public:
  ScopedEnv(const char *name, const char *value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(name_); }

 private:
  const char *name_;
};

class FaultIsolation : public testing::TempDbTest {
 protected:
  void SetUp() override {
    if (auto version = nvrtc_version(); !version)
      GTEST_SKIP() << "NVRTC is not available: " << llvm::toString(version.takeError());
    open_temp_db("flashjit-fault-isolation");
  }
  static Problem problem() {
    Problem p;
    p.batch = 1;
    p.heads_q = p.heads_kv = 2;
    p.seqlen_q = p.seqlen_k = 300;
    p.head_dim_qk = p.head_dim_v = 64;
    return p;
  }
};

TEST_F(FaultIsolation, ACompilerCrashFailsOnlyItsCandidate) {
  const TargetArch arch{9, 0, true};
  const CandidateSet set = forward_candidates(problem(), arch, 0);
  // Four sm80 candidates, one worker: the crash is in the middle, so the
  // same compile thread must carry on in a fresh worker.
  std::vector<KernelSpec> specs;
  std::vector<int> candidates;
  for (size_t i = 0; i < set.configs.size() && specs.size() < 4; ++i) {
    if (set.configs[i].path != KernelPath::sm80) continue;
    auto spec = make_forward_spec(problem(), set.configs[i], arch);
    ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
    specs.push_back(*spec);
    candidates.push_back(int(i));
  }
  ASSERT_EQ(specs.size(), 4u);
  const std::string plant = "compile_crash:" + std::to_string(candidates[1]);
  ScopedEnv env("FLASHJIT_TEST_PLANT", plant.c_str());

  const std::vector<CubinResult> cubins = cubins_in_workers(
      specs, candidates, cli_path(), db_->path(), /*threads=*/1, /*timeout_s=*/300);
  ASSERT_EQ(cubins.size(), 4u);
  EXPECT_EQ(cubins[1].error, "worker killed by SIGSEGV while compiling");
  EXPECT_TRUE(cubins[1].key.empty());
  for (int i : {0, 2, 3}) {
    EXPECT_EQ(cubins[i].error, "") << specs[i].id();
    EXPECT_FALSE(cubins[i].from_store);
    EXPECT_EQ(cubins[i].entry, "flashjit_fwd_sm80") << specs[i].id();
    auto stored = db_->get_cubin(cubins[i].key);
    ASSERT_TRUE(bool(stored)) << llvm::toString(stored.takeError());
    ASSERT_TRUE(stored->has_value()) << specs[i].id();
    EXPECT_EQ((*stored)->kernel_id, specs[i].id());
  }
  EXPECT_EQ(*db_->count_cubins(), 3);

  // Again: the three come from the store; the planted one crashes again.
  const std::vector<CubinResult> again = cubins_in_workers(
      specs, candidates, cli_path(), db_->path(), /*threads=*/2, /*timeout_s=*/300);
  EXPECT_EQ(again[1].error, "worker killed by SIGSEGV while compiling");
  for (int i : {0, 2, 3}) {
    EXPECT_TRUE(again[i].from_store) << specs[i].id();
    EXPECT_EQ(again[i].key, cubins[i].key);
  }
}

TEST_F(FaultIsolation, PrecompileSurvivesACompilerCrash) {
  const TargetArch arch{9, 0, true};
  const CandidateSet set = forward_candidates(problem(), arch, 0);
  auto crashing = make_forward_spec(problem(), set.configs[1], arch);
  ASSERT_TRUE(bool(crashing));
  const std::string db_path = db_->path();
  db_.reset();  // the command opens it itself

  ScopedEnv env("FLASHJIT_TEST_PLANT", "compile_crash:1");
  const testing_cli::CliResult r =
      testing_cli::run_cli({"precompile", "--arch", "sm_90a", "--batch", "1", "--heads", "2",
                            "--seqlen", "300", "--hdim", "64", "--db", db_path});
  EXPECT_EQ(r.code, 0) << r.err;
  const int total = int(set.configs.size()) + 1;  // and the GPU reference
  EXPECT_NE(r.out.find(llvm::formatv(": compiled {0}, already stored 0, failed 1\n"
                                     "  failed: {1}: worker killed by SIGSEGV while compiling\n",
                                     total - 1, crashing->id())
                           .str()),
            std::string::npos)
      << r.out;
  auto db = TuningDb::open(db_path);
  ASSERT_TRUE(bool(db)) << llvm::toString(db.takeError());
  EXPECT_EQ(*(*db)->count_cubins(), total - 1);
}

TEST_F(FaultIsolation, TheWorkerRefusesToMeasureBeforeItsSetup) {
  WorkerProcess worker(cli_path(), {"worker", "--db=" + db_->path()});
  auto reply = worker.request(llvm::json::Object{{"op", "time"}, {"candidate", 0}, {"repeats", 1}},
                              60, "timing");
  ASSERT_FALSE(bool(reply));
  EXPECT_EQ(llvm::toString(reply.takeError()),
            "worker: 'setup' must come before loading or timing candidates");
  auto unknown = worker.request(llvm::json::Object{{"op", "fly"}}, 60, "flying");
  ASSERT_FALSE(bool(unknown));
  EXPECT_EQ(llvm::toString(unknown.takeError()), "worker: unknown op 'fly'");
  EXPECT_EQ(worker.generation(), 1);  // non-fatal: the same worker
}

TEST_F(FaultIsolation, WorkersNeedADatabaseFile) {
  auto memory = TuningDb::open(":memory:");
  ASSERT_TRUE(bool(memory)) << llvm::toString(memory.takeError());
  auto outcome = precompile_forward(problem(), TargetArch{8, 0, false}, 0, **memory, 1,
                                    cli_path());
  ASSERT_FALSE(bool(outcome));
  EXPECT_EQ(llvm::toString(outcome.takeError()),
            "worker processes share cubins through the database file; an in-memory database "
            "cannot be used with workers (set no worker binary, or use a file)");
}

}  // namespace
}  // namespace flashjit
