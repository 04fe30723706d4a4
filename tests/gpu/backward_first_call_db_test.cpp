// A fresh process's first backward call of a class whose tuning is in the
// database runs the tuned config, and once its program is stored too,
// compiles nothing (as FirstCallDb shows for the forward). Each "fresh
// process" is this binary re-run on the helper test (child_process.h).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "cache/tuning_db.h"
#include "child_process.h"
#include "flashjit/backward.h"
#include "generator/backward_spec.h"
#include "gpu_environment.h"
#include "reference/backward_check.h"
#include "runtime/backward_source.h"
#include "runtime/device.h"
#include "runtime/launch_backward.h"
#include "runtime/tuning_key.h"

namespace flashjit {
namespace {

constexpr const char *kChildVar = "FLASHJIT_BACKWARD_FIRST_CALL_CHILD";
constexpr const char *kChildFilter = "--gtest_filter=BackwardFirstCallChild.Run";

Problem child_problem() {
  // Small enough for the float64 CPU reference; sizes off every tile.
  return testing::make_problem(DType::bf16, 2, 4, 2, 177, 133, 64, 64, MaskKind::causal);
}

// Not the heuristic's config (128x128 w8 s2 at d=64): the child shows which
// config it ran through its kernel ID.
const KernelConfig kStoredConfig{KernelPath::sm80, 64, 64, 4, 2};

TEST(BackwardFirstCallDb, FreshProcessUsesTheTuningAndCompilesNothing) {
  if (std::getenv(kChildVar)) GTEST_SKIP() << "inside a child run";
  FLASHJIT_REQUIRE_GPU();
  llvm::SmallString<128> dir;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("flashjit-backward-first-call", dir));
  llvm::SmallString<128> db_path(dir);
  llvm::sys::path::append(db_path, "flashjit.db");
  const Problem p = child_problem();
  auto device = query_device(0);
  ASSERT_TRUE(bool(device)) << llvm::toString(device.takeError());
  auto software = software_fingerprint();
  ASSERT_TRUE(bool(software)) << llvm::toString(software.takeError());
  {
    // A tuning of the class for this GPU, as `flashjit tune --pass bwd`
    // leaves it (its program not stored yet).
    auto db = TuningDb::open(db_path);
    ASSERT_TRUE(bool(db)) << llvm::toString(db.takeError());
    TuningRecord r;
    r.device = device_fingerprint(*device);
    r.software = *software;
    r.problem = problem_class_key(p, "bwd");
    r.config = to_stored(kStoredConfig);
    r.shape = describe(p);
    r.median_ms = r.min_ms = r.max_ms = 0.1;
    r.tuned_at = "2026-11-29T12:00:00Z";
    r.flashjit_version = FLASHJIT_VERSION;
    ASSERT_FALSE(bool((*db)->put_tuning(r)));
  }
  auto spec = make_backward_spec(p, kStoredConfig, device->target(),
                                 device->max_smem_per_block_optin);
  ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());

  // Cold: the tuned config's program is compiled once and stored.
  testing::ChildReport cold =
      testing::run_child(kChildFilter, kChildVar, "BACKWARD_FIRST_CALL", db_path, dir, "cold");
  ASSERT_EQ(cold.exit_code, 0) << cold.output;
  EXPECT_EQ(cold.get("source"), "tuned") << cold.output;
  EXPECT_EQ(cold.get("kernel"), spec->id()) << cold.output;
  EXPECT_EQ(cold.get("compiles"), "1") << cold.output;
  EXPECT_EQ(cold.get("correct"), "1") << cold.output;

  // Warm: a fresh process finds both the tuning and the program.
  testing::ChildReport warm =
      testing::run_child(kChildFilter, kChildVar, "BACKWARD_FIRST_CALL", db_path, dir, "warm");
  ASSERT_EQ(warm.exit_code, 0) << warm.output;
  EXPECT_EQ(warm.get("source"), "tuned") << warm.output;
  EXPECT_EQ(warm.get("kernel"), spec->id()) << warm.output;
  EXPECT_EQ(warm.get("compiles"), "0") << warm.output;
  EXPECT_EQ(warm.get("module_loads"), "3") << warm.output;  // preprocess, main, dQ
  EXPECT_EQ(warm.get("correct"), "1") << warm.output;
  std::printf("first backward call, program compiled: %s ms; from the database (fresh "
              "process): %s ms\n",
              cold.get("first_call_ms").c_str(), warm.get("first_call_ms").c_str());
  llvm::sys::fs::remove_directories(dir);
}

// The child: one backward call through the public API on inputs whose O and
// LSE come from the CPU forward, checked against float64 gradients, its
// compile and module-load counts reported for the parent.
TEST(BackwardFirstCallChild, Run) {
  if (!std::getenv(kChildVar)) GTEST_SKIP() << "helper of BackwardFirstCallDb, run in a child";
  FLASHJIT_REQUIRE_GPU();
  const Problem p = child_problem();
  auto device = query_device(0);
  ASSERT_TRUE(bool(device)) << llvm::toString(device.takeError());
  auto chosen = explain_backward_config(p, {}, *device);
  ASSERT_TRUE(bool(chosen)) << llvm::toString(chosen.takeError());
  auto spec = resolve_backward_spec(p, {});
  ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());

  RuntimeStats before{}, after{};
  double first_call_ms = 0;
  auto report = check_backward(
      p,
      [&](const Problem &problem, const BackwardArgs &args, CUstream stream) -> llvm::Error {
        before = runtime_stats();
        const auto start = std::chrono::steady_clock::now();
        Status status = backward(problem, args, stream);
        first_call_ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                .count();
        after = runtime_stats();
        if (!status.ok())
          return llvm::createStringError(llvm::inconvertibleErrorCode(), status.message());
        return llvm::Error::success();
      },
      nullptr, 5);
  ASSERT_TRUE(bool(report)) << llvm::toString(report.takeError());
  EXPECT_TRUE(report->passed()) << report->describe();
  std::printf("BACKWARD_FIRST_CALL source=%s kernel=%s compiles=%llu module_loads=%llu "
              "first_call_ms=%.3f correct=%d\n",
              to_string(chosen->source), spec->id().c_str(),
              static_cast<unsigned long long>(after.compiles - before.compiles),
              static_cast<unsigned long long>(after.module_loads - before.module_loads),
              first_call_ms, report->passed() ? 1 : 0);
  std::fflush(stdout);
}

}  // namespace
}  // namespace flashjit
