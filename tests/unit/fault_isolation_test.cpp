// Fault isolation without a GPU: a candidate that crashes the compiler
// (a genuine NVRTC 13.0 segfault, planted through $FLASHJIT_TEST_PLANT)
// fails alone, through the tuner's compile pool (which the forward and the
// backward tune and precompile share) and through the CLI for either pass,
// and a fresh worker compiles the rest into the cubin store. Needs NVRTC
// (like the other compile tests) and the built `flashjit` binary.
#include <gtest/gtest.h>

#include <set>

#include <cstdlib>
#include <optional>
#include <string>

#include "cli_runner.h"
#include "generator/backward_spec.h"
#include "generator/heuristic.h"
#include "runtime/nvrtc_compiler.h"
#include "tests/db_integrity.h"
#include "tests/temp_db_test.h"
#include "tuner/backward_candidates.h"
#include "tuner/candidates.h"
#include "tuner/tune_backward.h"
#include "tuner/tuner.h"
#include "tuner/worker_compile.h"
#include "tuner/worker_process.h"
#include "tuner/worker_protocol.h"

namespace flashjit {
namespace {

using testing_cli::cli_path;

// Sets an environment variable for one test (the workers inherit it), and
// restores what it was.
class ScopedEnv {
 public:
  ScopedEnv(const char *name, const std::string &value) : name_(name) {
    if (const char *old = std::getenv(name)) old_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }

 private:
  const char *name_;
  std::optional<std::string> old_;
};

class FaultIsolation : public testing::TempDbTest {
 protected:
  void SetUp() override {
    if (auto version = nvrtc_version(); !version)
      GTEST_SKIP() << "NVRTC is not available: " << llvm::toString(version.takeError());
    // In the ASan build (.ci/run's build-asan) the workers are ASan binaries
    // too, and ASan would catch the planted program's crash inside NVRTC (an
    // allocation of ~2^64 bytes, then a memset through the null it gets) and
    // exit with status 1. These workers let NVRTC fail as in production:
    // the allocation returns null and the memset dies by SIGSEGV. This
    // process keeps the options it started with.
    const char *asan = std::getenv("ASAN_OPTIONS");
    worker_asan_.emplace("ASAN_OPTIONS",
                         std::string(asan ? asan : "") +
                             ":allocator_may_return_null=1:handle_segv=0:replace_intrin=0");
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

  std::optional<ScopedEnv> worker_asan_;
};

using MakeSpec = llvm::Expected<KernelSpec> (*)(const Problem &, const KernelConfig &,
                                                const TargetArch &, int);

// The first four sm80 candidates of `set` (either pass) on sm_90a, and
// their indices in the tune.
void first_four_sm80(const CandidateSet &set, MakeSpec make_spec, const Problem &problem,
                     std::vector<KernelSpec> &specs, std::vector<int> &candidates) {
  for (size_t i = 0; i < set.configs.size() && specs.size() < 4; ++i) {
    if (set.configs[i].path != KernelPath::sm80) continue;
    auto spec = make_spec(problem, set.configs[i], TargetArch{9, 0, true}, 0);
    ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
    specs.push_back(*spec);
    candidates.push_back(int(i));
  }
  ASSERT_EQ(specs.size(), 4u);
}

// Four specs on one compile worker, the second planted: the crash is in
// the middle, so the same compile thread must carry on in a fresh worker;
// the other three are stored under their own ids with `entry` (the
// program's main kernel), and come from the store the second time.
void expect_the_crash_fails_only_its_candidate(const std::vector<KernelSpec> &specs,
                                               const std::vector<int> &candidates,
                                               TuningDb &db, const std::string &entry) {
  const std::string plant = "compile_crash:" + std::to_string(candidates[1]);
  ScopedEnv env("FLASHJIT_TEST_PLANT", plant);

  const std::vector<CubinResult> cubins = cubins_in_workers(
      specs, candidates, cli_path(), db.path(), /*threads=*/1, /*timeout_s=*/300);
  ASSERT_EQ(cubins.size(), 4u);
  EXPECT_EQ(cubins[1].error, "worker killed by SIGSEGV while compiling");
  EXPECT_TRUE(cubins[1].key.empty());
  for (int i : {0, 2, 3}) {
    EXPECT_EQ(cubins[i].error, "") << specs[i].id();
    EXPECT_FALSE(cubins[i].from_store);
    EXPECT_EQ(cubins[i].entry, entry) << specs[i].id();
    auto stored = db.get_cubin(cubins[i].key);
    ASSERT_TRUE(bool(stored)) << llvm::toString(stored.takeError());
    ASSERT_TRUE(stored->has_value()) << specs[i].id();
    EXPECT_EQ((*stored)->kernel_id, specs[i].id());
  }
  EXPECT_EQ(*db.count_cubins(), 3);
  EXPECT_EQ(testing::integrity_check(db.path()), "ok");

  // Again: the three come from the store; the planted one crashes again.
  const std::vector<CubinResult> again = cubins_in_workers(
      specs, candidates, cli_path(), db.path(), /*threads=*/2, /*timeout_s=*/300);
  EXPECT_EQ(again[1].error, "worker killed by SIGSEGV while compiling");
  for (int i : {0, 2, 3}) {
    EXPECT_TRUE(again[i].from_store) << specs[i].id();
    EXPECT_EQ(again[i].key, cubins[i].key);
  }
  EXPECT_EQ(*db.count_cubins(), 3);
}

TEST_F(FaultIsolation, ACompilerCrashFailsOnlyItsCandidate) {
  std::vector<KernelSpec> specs;
  std::vector<int> candidates;
  first_four_sm80(
      forward_candidates(problem(), TargetArch{9, 0, true}, 0),
      [](const Problem &p, const KernelConfig &c, const TargetArch &arch, int smem) {
        return make_forward_spec(p, c, arch, smem);
      },
      problem(), specs, candidates);
  if (HasFatalFailure()) return;
  expect_the_crash_fails_only_its_candidate(specs, candidates, *db_, "flashjit_fwd_sm80");
}

// The backward tune's candidates go through the same pool: a backward
// program (three kernels in one cubin) that crashes NVRTC fails alone.
TEST_F(FaultIsolation, ABackwardCompilerCrashFailsOnlyItsCandidate) {
  std::vector<KernelSpec> specs;
  std::vector<int> candidates;
  first_four_sm80(backward_candidates(problem(), TargetArch{9, 0, true}, 0, false),
                  make_backward_spec, problem(), specs, candidates);
  if (HasFatalFailure()) return;
  for (const KernelSpec &spec : specs) EXPECT_EQ(spec.pass, Pass::backward);
  expect_the_crash_fails_only_its_candidate(specs, candidates, *db_, "flashjit_bwd_sm80");
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
  // Candidates that differ only in their split count share a kernel: it
  // compiles once and the others find it stored.
  std::set<std::string> kernels;
  for (const KernelConfig &c : set.configs) {
    auto spec = make_forward_spec(problem(), c, arch);
    ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
    kernels.insert(spec->id());
  }
  const int total = int(kernels.size()) + 1;  // and the GPU reference
  const int shared = int(set.configs.size() - kernels.size());
  EXPECT_NE(r.out.find(llvm::formatv(": compiled {0}, already stored {1}, failed 1\n"
                                     "  failed: {2}: worker killed by SIGSEGV while compiling\n",
                                     total - 1, shared, crashing->id())
                           .str()),
            std::string::npos)
      << r.out;
  auto db = TuningDb::open(db_path);
  ASSERT_TRUE(bool(db)) << llvm::toString(db.takeError());
  EXPECT_EQ(*(*db)->count_cubins(), total - 1);
}

// `precompile --pass bwd` compiles in the same workers: candidate 1's
// compile crashes NVRTC, the run completes with that candidate failed by
// name, the other 11 programs (the sm80 backward grid on sm_80 at d=64) are
// stored whole, and a second run finds them there.
TEST_F(FaultIsolation, BackwardPrecompileSurvivesACompilerCrash) {
  const TargetArch arch{8, 0, false};
  const CandidateSet set = backward_candidates(problem(), arch, 0, false);
  ASSERT_EQ(set.configs.size(), 12u);
  auto crashing = make_backward_spec(problem(), set.configs[1], arch);
  ASSERT_TRUE(bool(crashing)) << llvm::toString(crashing.takeError());
  const std::string db_path = db_->path();
  db_.reset();  // the command opens it itself

  ScopedEnv env("FLASHJIT_TEST_PLANT", "compile_crash:1");
  const std::vector<std::string> args = {"precompile", "--pass",   "bwd", "--arch", "sm_80",
                                         "--batch",    "1",        "--heads", "2",  "--seqlen",
                                         "300",        "--hdim",   "64",  "--db",   db_path};
  const std::string failed_line =
      "  failed: " + crashing->id() + ": worker killed by SIGSEGV while compiling\n";
  testing_cli::CliResult r = testing_cli::run_cli(args);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "[1/1] bf16 b=1 hq=2 hkv=2 sq=300 sk=300 d=64 dv=64 none (bwd): compiled "
                   "11, already stored 0, failed 1\n" +
                       failed_line + "total: compiled 11, already stored 0, failed 1 (sm_80, " +
                       db_path + ")\n");
  EXPECT_EQ(testing::integrity_check(db_path), "ok");
  {
    auto db = TuningDb::open(db_path);
    ASSERT_TRUE(bool(db)) << llvm::toString(db.takeError());
    EXPECT_EQ(*(*db)->count_cubins(), 11);
    auto tunings = (*db)->list_tunings();
    ASSERT_TRUE(bool(tunings)) << llvm::toString(tunings.takeError());
    EXPECT_EQ(tunings->size(), 0u);
  }

  // Again: the 11 are read back (each blob's hash checked), nothing is
  // compiled, and the planted candidate fails the same way.
  r = testing_cli::run_cli(args);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("(bwd): compiled 0, already stored 11, failed 1\n" + failed_line),
            std::string::npos)
      << r.out;
  EXPECT_EQ(testing::integrity_check(db_path), "ok");
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
  const std::string why =
      "worker processes share cubins through the database file; an in-memory database "
      "cannot be used with workers (set no worker binary, or use a file)";
  auto forward = precompile_forward(problem(), TargetArch{8, 0, false}, 0, **memory, 1,
                                    cli_path());
  ASSERT_FALSE(bool(forward));
  EXPECT_EQ(llvm::toString(forward.takeError()), why);
  auto backward = precompile_backward(problem(), false, TargetArch{8, 0, false}, 0, **memory, 1,
                                      cli_path());
  ASSERT_FALSE(bool(backward));
  EXPECT_EQ(llvm::toString(backward.takeError()), why);
}

// The measuring worker is set up for a pass by name; a pass it does not
// know is refused before any CUDA call, and the worker stays.
TEST_F(FaultIsolation, TheWorkerRefusesAnUnknownPass) {
  WorkerProcess worker(cli_path(), {"worker", "--db=" + db_->path()});
  auto reply = worker.request(
      llvm::json::Object{{"op", "setup"},
                         {"pass", "sideways"},
                         {"problem", worker_protocol::problem_to_json(problem())},
                         {"device", 0}},
      60, "setting up");
  ASSERT_FALSE(bool(reply));
  EXPECT_EQ(llvm::toString(reply.takeError()), "worker request: 'pass': unknown value 'sideways'");
  EXPECT_EQ(worker.generation(), 1);
}

}  // namespace
}  // namespace flashjit
