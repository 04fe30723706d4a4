// Concurrency on the GPU:
//  - 16 threads making the first call for one new problem class at once get
//    one compile and one module load between them, and correct outputs;
//  - 3 `flashjit tune` processes tuning different plans into one database
//    at once all store their rows, with no "database is locked";
//  - a tune SIGKILLed midway leaves a database that passes SQLite's
//    integrity check, and the next tune of the plan skips the classes
//    already tuned and completes the rest.
// The first runs in a re-executed child of this binary with a fresh
// $FLASHJIT_DB (the process database is opened once), as first_call_db_test.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <latch>
#include <thread>

#include "cache/tuning_db.h"
#include "flashjit/forward.h"
#include "gpu_environment.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"
#include "reference/accuracy.h"
#include "runtime/launch_forward.h"
#include "tests/db_integrity.h"
#include "tests/unit/cli_runner.h"

extern char **environ;

namespace flashjit {
namespace {

constexpr const char *kChildVar = "FLASHJIT_CONCURRENCY_CHILD";
constexpr int kThreads = 16;

std::string temp_dir(const char *prefix) {
  llvm::SmallString<128> dir;
  EXPECT_FALSE(llvm::sys::fs::createUniqueDirectory(prefix, dir));
  return dir.str().str();
}

std::string slurp_file(const std::string &path) { return testing_cli::slurp(path); }

// The environment of this process with `extra` ("NAME=value") added or replaced.
std::vector<std::string> environment_with(std::vector<std::string> extra) {
  std::vector<std::string> env;
  for (char **e = environ; *e; ++e) {
    llvm::StringRef entry(*e);
    bool replaced = false;
    for (const std::string &x : extra)
      if (entry.startswith(llvm::StringRef(x).split('=').first.str() + "=")) replaced = true;
    if (!replaced) env.push_back(entry.str());
  }
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

// Starts `args` (args[0] the binary) with stdout+stderr to `log`.
llvm::sys::ProcessInfo start(const std::vector<std::string> &args, const std::string &log,
                             const std::vector<std::string> &env) {
  std::vector<llvm::StringRef> argv(args.begin(), args.end());
  std::vector<llvm::StringRef> env_refs(env.begin(), env.end());
  const llvm::Optional<llvm::StringRef> redirects[] = {llvm::StringRef(""), llvm::StringRef(log),
                                                       llvm::StringRef(log)};
  std::string error;
  llvm::sys::ProcessInfo info = llvm::sys::ExecuteNoWait(args[0], argv, llvm::ArrayRef(env_refs),
                                                         redirects, 0, &error);
  EXPECT_NE(info.Pid, 0) << error;
  return info;
}

int wait_for(const llvm::sys::ProcessInfo &info, unsigned seconds = 600) {
  std::string error;
  return llvm::sys::Wait(info, seconds, /*WaitUntilTerminates=*/true, &error).ReturnCode;
}

Problem concurrent_problem() {
  // A class no other test uses (fp16, d = 72: tiled as 128 on sm90, padded
  // on sm80), sizes off every tile; small enough for the float64 CPU
  // reference.
  return testing::make_problem(DType::fp16, 2, 4, 2, 97, 211, 72, 72, MaskKind::causal);
}

TEST(Concurrency, SixteenThreadsFirstCallCompileOnce) {
  if (std::getenv(kChildVar)) GTEST_SKIP() << "inside a child run";
  FLASHJIT_REQUIRE_GPU();
  const std::string dir = temp_dir("flashjit-concurrency");
  const std::string log = dir + "/child.log";
  const std::string self = llvm::sys::fs::getMainExecutable(nullptr, nullptr);
  auto child = start({self, "--gtest_filter=ConcurrencyChild.SixteenThreads"}, log,
                     environment_with({"FLASHJIT_DB=" + dir + "/flashjit.db",
                                       std::string(kChildVar) + "=1"}));
  const int code = wait_for(child, 300);
  const std::string output = slurp_file(log);
  std::printf("%s\n", output.c_str());
  ASSERT_EQ(code, 0) << output;
  // One compile; one load of its cubin per kernel the call runs: the main
  // kernel, and the combine where the heuristic splits the keys (few work
  // tiles on many SMs).
  auto spec = resolve_forward_spec(concurrent_problem(), KernelConfig{});
  ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
  const std::string expected =
      "CONCURRENT threads=16 compiles=1 module_loads=" + std::to_string(spec->split_kv ? 2 : 1) +
      " ok=16 identical=16 correct=1";
  EXPECT_NE(output.find(expected), std::string::npos) << expected << "\n" << output;
  llvm::sys::fs::remove_directories(dir);
}

TEST(ConcurrencyChild, SixteenThreads) {
  if (!std::getenv(kChildVar)) GTEST_SKIP() << "helper of Concurrency, run in a child process";
  FLASHJIT_REQUIRE_GPU();
  const Problem p = concurrent_problem();
  std::vector<float> q = testing::random_values(p.dtype, q_elements(p), 21);
  std::vector<float> k = testing::random_values(p.dtype, k_elements(p), 22);
  std::vector<float> v = testing::random_values(p.dtype, v_elements(p), 23);
  auto dq = testing::upload_values(p.dtype, q);
  auto dk = testing::upload_values(p.dtype, k);
  auto dv = testing::upload_values(p.dtype, v);
  FLASHJIT_ASSERT_OK(dq.takeError());
  FLASHJIT_ASSERT_OK(dk.takeError());
  FLASHJIT_ASSERT_OK(dv.takeError());
  std::vector<DeviceBuffer> outs, lses;
  for (int t = 0; t < kThreads; ++t) {
    auto o = DeviceBuffer::allocate(o_elements(p) * 2);
    auto l = DeviceBuffer::allocate(lse_elements(p) * 4);
    FLASHJIT_ASSERT_OK(o.takeError());
    FLASHJIT_ASSERT_OK(l.takeError());
    FLASHJIT_ASSERT_OK(o->fill_bytes(0xff));  // NaN: unwritten outputs show
    FLASHJIT_ASSERT_OK(l->fill_bytes(0xff));
    outs.push_back(std::move(*o));
    lses.push_back(std::move(*l));
  }
  auto driver = cuda_driver();
  FLASHJIT_ASSERT_OK(driver.takeError());
  ASSERT_EQ(driver->cuCtxSynchronize(), CUDA_SUCCESS);
  auto context = current_or_primary_context();
  FLASHJIT_ASSERT_OK(context.takeError());

  const RuntimeStats before = runtime_stats();
  std::latch go(kThreads);
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      driver->cuCtxSetCurrent(context->context);  // the context the buffers live in
      const ForwardArgs args = ForwardArgs::packed(p, dq->data(), dk->data(), dv->data(),
                                                   outs[t].data(),
                                                   static_cast<float *>(lses[t].data()));
      go.arrive_and_wait();  // all 16 make their first call together
      Status status = forward(p, args);
      if (!status.ok()) errors[t] = status.message();
    });
  }
  for (std::thread &t : threads) t.join();
  ASSERT_EQ(driver->cuCtxSynchronize(), CUDA_SUCCESS);
  const RuntimeStats after = runtime_stats();

  int ok = 0, identical = 0;
  std::vector<uint16_t> first(o_elements(p)), bits(o_elements(p));
  FLASHJIT_ASSERT_OK(outs[0].download(first.data(), first.size() * 2));
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(errors[t], "") << "thread " << t;
    if (errors[t].empty()) ++ok;
    FLASHJIT_ASSERT_OK(outs[t].download(bits.data(), bits.size() * 2));
    if (bits == first) ++identical;
  }
  std::vector<float> lse(lse_elements(p));
  FLASHJIT_ASSERT_OK(lses[0].download(lse.data(), lse.size() * 4));
  const AttentionOutputs exact = cpu_attention(p, q, k, v, ReferencePrecision::exact);
  const AttentionOutputs element = cpu_attention(p, q, k, v, ReferencePrecision::element);
  const AccuracyReport accuracy =
      check_forward_accuracy(from_storage(p.dtype, first), exact.out, element.out, lse, exact.lse);
  EXPECT_TRUE(accuracy.passed) << accuracy.describe();
  std::printf("CONCURRENT threads=%d compiles=%llu module_loads=%llu ok=%d identical=%d "
              "correct=%d\n",
              kThreads, static_cast<unsigned long long>(after.compiles - before.compiles),
              static_cast<unsigned long long>(after.module_loads - before.module_loads), ok,
              identical, accuracy.passed ? 1 : 0);
  std::fflush(stdout);
}

// A plan of `problems` (YAML flow maps) written to `dir`/`name`.yaml.
std::string write_plan(const std::string &dir, const std::string &name,
                       const std::vector<std::string> &problems) {
  const std::string path = dir + "/" + name + ".yaml";
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  os << "name: " << name << "\ndefaults: {dtype: bf16, batch: 1, heads: 4}\nproblems:\n";
  for (const std::string &p : problems) os << "  - " << p << "\n";
  return path;
}

TEST(Concurrency, ThreeTuneProcessesShareOneDatabase) {
  if (std::getenv(kChildVar)) GTEST_SKIP() << "inside a child run";
  FLASHJIT_REQUIRE_GPU();
  const std::string dir = temp_dir("flashjit-three-tunes");
  const std::string db = dir + "/shared.db";
  const std::vector<std::vector<std::string>> plans = {
      {"{hdim: 64, seqlen: 300}", "{hdim: 64, seqlen: 300, mask: causal}"},
      {"{hdim: 128, seqlen: 300}", "{hdim: 128, seqlen: 300, mask: causal}"},
      {"{hdim: 96, seqlen: 300}", "{hdim: 96, seqlen: 300, mask: causal}"}};
  std::vector<llvm::sys::ProcessInfo> tunes;
  const std::vector<std::string> env = environment_with({});
  for (size_t i = 0; i < plans.size(); ++i) {
    const std::string plan = write_plan(dir, "plan" + std::to_string(i), plans[i]);
    tunes.push_back(start({testing_cli::cli_path(), "tune", "--plan", plan, "--budget-s", "20",
                           "--db", db},
                          dir + "/tune" + std::to_string(i) + ".log", env));
  }
  for (size_t i = 0; i < tunes.size(); ++i) {
    const int code = wait_for(tunes[i]);
    const std::string log = slurp_file(dir + "/tune" + std::to_string(i) + ".log");
    std::printf("---- tune %zu (exit %d)\n%s\n", i, code, log.c_str());
    EXPECT_EQ(code, 0) << log;
    EXPECT_EQ(log.find("database is locked"), std::string::npos) << log;
  }
  auto opened = TuningDb::open(db);
  ASSERT_TRUE(bool(opened)) << llvm::toString(opened.takeError());
  auto rows = (*opened)->list_tunings();
  ASSERT_TRUE(bool(rows)) << llvm::toString(rows.takeError());
  EXPECT_EQ(rows->size(), 6u);
  EXPECT_EQ(testing::integrity_check(db), "ok");
  std::printf("THREE_TUNES rows=%zu integrity=%s\n", rows->size(),
              testing::integrity_check(db).c_str());
  llvm::sys::fs::remove_directories(dir);
}

TEST(Concurrency, AKilledTuneLeavesAnIntactDatabaseAndTheNextOneResumes) {
  if (std::getenv(kChildVar)) GTEST_SKIP() << "inside a child run";
  FLASHJIT_REQUIRE_GPU();
  const std::string dir = temp_dir("flashjit-killed-tune");
  const std::string db = dir + "/tuning.db";
  const std::string plan = write_plan(
      dir, "three", {"{hdim: 64, seqlen: 300}", "{hdim: 64, seqlen: 300, mask: causal}",
                     "{hdim: 128, seqlen: 300}"});
  const std::vector<std::string> args = {testing_cli::cli_path(), "tune", "--plan", plan,
                                         "--budget-s", "20", "--db", db};
  auto first = start(args, dir + "/first.log", environment_with({}));
  ASSERT_NE(first.Pid, 0) << "could not start " << args[0];

  // Killed once the first class is stored, in the middle of the second.
  size_t rows_at_kill = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  while (std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    // A tune that has ended (it takes seconds per class) failed to start or
    // crashed: waiting on will not bring a row.
    std::string error;
    if (llvm::sys::Wait(first, 0, /*WaitUntilTerminates=*/false, &error).Pid != 0) break;
    auto opened = TuningDb::open(db);
    if (!opened) {
      llvm::consumeError(opened.takeError());
      continue;
    }
    auto rows = (*opened)->list_tunings();
    if (rows && !rows->empty()) {
      rows_at_kill = rows->size();
      break;
    }
    if (!rows) llvm::consumeError(rows.takeError());
  }
  ASSERT_GE(rows_at_kill, 1u) << slurp_file(dir + "/first.log");
  ::kill(first.Pid, SIGKILL);
  wait_for(first);
  std::printf("killed the tune with %zu of 3 classes stored\n", rows_at_kill);
  EXPECT_EQ(testing::integrity_check(db), "ok");

  const testing_cli::CliResult again = testing_cli::run_cli(
      {"tune", "--plan", plan, "--budget-s", "20", "--db", db});
  std::printf("%s\n%s\n", again.out.c_str(), again.err.c_str());
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_NE(again.out.find(rows_at_kill == 1
                               ? "skipped 1 class already tuned (use --force to retune)\n"
                               : "skipped " + std::to_string(rows_at_kill) +
                                     " classes already tuned (use --force to retune)\n"),
            std::string::npos)
      << again.out;
  auto opened = TuningDb::open(db);
  ASSERT_TRUE(bool(opened)) << llvm::toString(opened.takeError());
  EXPECT_EQ((*opened)->list_tunings()->size(), 3u);
  EXPECT_EQ(testing::integrity_check(db), "ok");

  // --force tunes every class again.
  const testing_cli::CliResult forced = testing_cli::run_cli(
      {"tune", "--plan", plan, "--budget-s", "20", "--force", "--db", db});
  ASSERT_EQ(forced.code, 0) << forced.err;
  EXPECT_EQ(forced.out.find("skipped"), std::string::npos) << forced.out;
  std::printf("KILL_RESUME rows_at_kill=%zu integrity=%s\n", rows_at_kill,
              testing::integrity_check(db).c_str());
  llvm::sys::fs::remove_directories(dir);
}

}  // namespace
}  // namespace flashjit
