// Several processes reading while one writes: the WAL + busy-timeout +
// BEGIN IMMEDIATE contract. Readers are fork()ed children with their own
// connections (a connection must never cross a fork); any error in a child,
// "database is locked" included, fails the test through its exit status.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <signal.h>

#include <chrono>
#include <cstdio>

#include "cache/tuning_db.h"
#include "llvm/Support/FormatVariadic.h"
#include "tests/db_integrity.h"
#include "tuning_db_test_util.h"

namespace flashjit {
namespace {

using namespace testing_db;

constexpr int kReaders = 4;
constexpr int kRows = 150;

// The child's whole life: open, say so on `ready`, read until every row is
// there (or a deadline), never see the count go down. Exit status 0 is
// success; anything else has been printed to stderr.
[[noreturn]] void fail(const std::string &why) {
  std::fprintf(stderr, "reader %d: %s\n", static_cast<int>(getpid()), why.c_str());
  std::fflush(stderr);
  _exit(1);
}

[[noreturn]] void reader(const std::string &path, int ready) {
  auto db = TuningDb::open(path);
  if (!db) fail("open: " + llvm::toString(db.takeError()));
  char byte = 1;
  if (write(ready, &byte, 1) != 1) fail("ready pipe");
  close(ready);

  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(8);
  size_t seen = 0;
  int reads = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    auto rows = (*db)->list_tunings();
    if (!rows) fail("list_tunings: " + llvm::toString(rows.takeError()));
    if (rows->size() < seen) fail("row count went down");
    seen = rows->size();
    auto row = (*db)->find_tuning(h200(), software_a(), full_record(reads % kRows).problem);
    if (!row) fail("find_tuning: " + llvm::toString(row.takeError()));
    auto nearest = (*db)->nearest_tunings(h200(), software_a(), problem_class(1, 2, 3), 1);
    if (!nearest) fail("nearest_tunings: " + llvm::toString(nearest.takeError()));
    auto blob = (*db)->get_cubin(numbered("c", reads % kRows));
    if (!blob) fail("get_cubin: " + llvm::toString(blob.takeError()));
    if (blob->has_value() && (*blob)->bytes.size() != 512) fail("a torn cubin");
    ++reads;
    if (seen == static_cast<size_t>(kRows) && blob->has_value()) _exit(0);
  }
  fail(llvm::formatv("timed out with {0} rows after {1} reads", seen, reads).str());
}

TEST(TuningDbConcurrency, ReadersNeverFailWhileOneProcessWrites) {
  TempDir dir;
  std::string path = dir.file("shared.db");
  ASSERT_TRUE(bool(TuningDb::open(path)));  // created before the readers start

  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  std::vector<pid_t> children;
  for (int i = 0; i < kReaders; ++i) {
    std::fflush(nullptr);  // no buffered output duplicated into the child
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(ready[0]);
      reader(path, ready[1]);
    }
    children.push_back(pid);
  }
  close(ready[1]);
  for (int i = 0; i < kReaders; ++i) {
    char byte;
    ASSERT_EQ(read(ready[0], &byte, 1), 1) << "a reader died before opening";
  }
  close(ready[0]);

  // The writer: one transaction per row, like a tuner storing winners.
  auto db = TuningDb::open(path);
  ASSERT_TRUE(bool(db)) << llvm::toString(db.takeError());
  for (int n = 0; n < kRows; ++n) {
    ASSERT_FALSE(bool((*db)->put_tuning(full_record(n)))) << "row " << n;
    ASSERT_FALSE(bool((*db)->put_cubin(cubin(numbered("c", n), 512)))) << "cubin " << n;
  }

  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "reader " << pid << " failed (its message is on stderr)";
  }
  auto rows = (*db)->list_tunings();
  ASSERT_TRUE(bool(rows));
  EXPECT_EQ(rows->size(), static_cast<size_t>(kRows));
  EXPECT_EQ(*(*db)->count_cubins(), kRows);
}

// Two processes racing to create the same database: one creates the schema,
// the other finds it done (the schema check runs under the write lock).
TEST(TuningDbConcurrency, ConcurrentFirstOpensCreateTheSchemaOnce) {
  TempDir dir;
  std::string path = dir.file("race/new.db");
  std::vector<pid_t> children;
  for (int i = 0; i < 4; ++i) {
    std::fflush(nullptr);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto db = TuningDb::open(path);
      if (!db) {
        std::fprintf(stderr, "open: %s\n", llvm::toString(db.takeError()).c_str());
        _exit(1);
      }
      _exit((*db)->put_tuning(full_record(i)) ? 2 : 0);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child " << pid;
  }
  auto db = TuningDb::open(path);
  ASSERT_TRUE(bool(db));
  EXPECT_EQ((*db)->list_tunings()->size(), 4u);
}

// Several tuners storing winners into one file at once (the CPU half of
// "3 tune processes into one database"; tests/gpu/concurrency_test.cpp runs
// real tunes): every row of every writer is there, and no writer failed,
// "database is locked" included.
TEST(TuningDbConcurrency, SeveralWritersLoseNoRows) {
  constexpr int kWriters = 3;
  constexpr int kEach = 60;
  TempDir dir;
  const std::string path = dir.file("writers.db");
  ASSERT_TRUE(bool(TuningDb::open(path)));
  std::vector<pid_t> children;
  for (int w = 0; w < kWriters; ++w) {
    std::fflush(nullptr);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto db = TuningDb::open(path);
      if (!db) fail("open: " + llvm::toString(db.takeError()));
      for (int n = w * kEach; n < (w + 1) * kEach; ++n) {
        if (llvm::Error e = (*db)->put_tuning(full_record(n)))
          fail(llvm::formatv("put_tuning {0}: {1}", n, llvm::toString(std::move(e))).str());
        if (llvm::Error e = (*db)->put_cubin(cubin(numbered("w", n), 4096)))
          fail(llvm::formatv("put_cubin {0}: {1}", n, llvm::toString(std::move(e))).str());
      }
      _exit(0);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "writer " << pid << " failed (its message is on stderr)";
  }
  auto db = TuningDb::open(path);
  ASSERT_TRUE(bool(db));
  EXPECT_EQ((*db)->list_tunings()->size(), size_t(kWriters * kEach));
  EXPECT_EQ(*(*db)->count_cubins(), kWriters * kEach);
  EXPECT_EQ(testing::integrity_check(path), "ok");
}

// A process killed in the middle of its writes (SIGKILL: no destructor, no
// rollback of its own) leaves a file SQLite finds consistent, where every
// row is whole: each write is one transaction, and the WAL replays only
// committed ones.
TEST(TuningDbConcurrency, AWriterKilledMidwayLeavesAConsistentDatabase) {
  TempDir dir;
  const std::string path = dir.file("killed.db");
  ASSERT_TRUE(bool(TuningDb::open(path)));
  int progress[2];
  ASSERT_EQ(pipe(progress), 0);
  std::fflush(nullptr);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(progress[0]);
    auto db = TuningDb::open(path);
    if (!db) fail("open: " + llvm::toString(db.takeError()));
    for (int n = 0;; ++n) {  // until killed
      if ((*db)->put_tuning(full_record(n % 1000))) fail("put_tuning");
      if ((*db)->put_cubin(cubin(numbered("k", n), 64 * 1024))) fail("put_cubin");
      char byte = 1;
      if (write(progress[1], &byte, 1) != 1) fail("progress pipe");
    }
  }
  close(progress[1]);
  constexpr int kRowsBeforeKill = 40;
  for (int i = 0; i < kRowsBeforeKill; ++i) {
    char byte;
    ASSERT_EQ(read(progress[0], &byte, 1), 1) << "the writer died before " << i << " rows";
  }
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  close(progress[0]);

  EXPECT_EQ(testing::integrity_check(path), "ok");
  auto db = TuningDb::open(path);
  ASSERT_TRUE(bool(db)) << llvm::toString(db.takeError());
  auto cubins = (*db)->list_cubins(/*with_bytes=*/true);
  ASSERT_TRUE(bool(cubins)) << llvm::toString(cubins.takeError());
  EXPECT_GE(cubins->size(), size_t(kRowsBeforeKill));
  for (const CubinRecord &c : *cubins) {
    auto read_back = (*db)->get_cubin(c.key);
    ASSERT_TRUE(bool(read_back)) << llvm::toString(read_back.takeError());
    EXPECT_TRUE(read_back->has_value()) << c.key;  // present and its hash matches
  }
  EXPECT_EQ((*db)->refused_cubins(), 0);
  EXPECT_GE((*db)->list_tunings()->size(), size_t(kRowsBeforeKill));
}

}  // namespace
}  // namespace flashjit
