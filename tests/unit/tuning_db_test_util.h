// Shared by the tuning_db_*_test.cpp files: a temporary folder, opening a
// database (a test failure on error), records with every field set to
// something other than its default, and exact comparison.
#pragma once

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "cache/tuning_db.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

namespace flashjit::testing_db {

class TempDir {
 public:
  TempDir() {
    llvm::SmallString<128> path;
    EXPECT_FALSE(llvm::sys::fs::createUniqueDirectory("flashjit-db-test", path));
    // Only this user may write it, whatever the umask: flashjit loads no
    // cubin from a database others can write (cache/db_trust.h).
    llvm::sys::fs::setPermissions(path, llvm::sys::fs::owner_all);
    path_ = std::string(path);
  }
  ~TempDir() { llvm::sys::fs::remove_directories(path_); }
  std::string file(llvm::StringRef name) const {
    llvm::SmallString<256> out(path_);
    llvm::sys::path::append(out, name);
    return std::string(out);
  }

 private:
  std::string path_;
};

inline std::unique_ptr<TuningDb> open_ok(const std::string &path) {
  auto db = TuningDb::open(path);
  if (!db) {
    ADD_FAILURE() << llvm::toString(db.takeError());
    return nullptr;
  }
  return std::move(*db);
}

inline std::string read_bytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

inline void write_bytes(const std::string &path, const std::string &bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// Sets (or, with null, unsets) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char *name, const char *value) : name_(name) {
    if (const char *old = std::getenv(name)) {
      had_ = true;
      old_ = old;
    }
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_, old_.c_str(), 1);
    else
      unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv &) = delete;
  ScopedEnv &operator=(const ScopedEnv &) = delete;

 private:
  const char *name_;
  bool had_ = false;
  std::string old_;
};

// Runs SQL on a file directly, bypassing TuningDb (to corrupt or forge).
inline void raw_sql(const std::string &path, const std::string &sql) {
  sqlite3 *db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char *message = nullptr;
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &message);
  std::string text = message ? message : "";
  sqlite3_free(message);
  sqlite3_close(db);
  ASSERT_EQ(rc, SQLITE_OK) << text;
}

// prefix + n. (Not `"c" + std::to_string(n)`: gcc 12 at -O3 warns about it
// with a false -Wrestrict, GCC bug 105651.)
inline std::string numbered(const char *prefix, int n) {
  std::string out(prefix);
  out += std::to_string(n);
  return out;
}

inline DeviceFingerprint h200() { return {"NVIDIA H200", 9, 0, 132, 13000}; }
inline SoftwareFingerprint software_a() { return {"13.0", "templates-aaaa"}; }

inline ProblemClassKey problem_class(int q_bucket, int k_bucket, int bh_bucket) {
  ProblemClassKey p;
  p.pass = "fwd";
  p.dtype = "bf16";
  p.head_dim_qk = 128;
  p.head_dim_v = 128;
  p.mask = "causal";
  p.window_left = -1;
  p.window_right = 0;
  p.softcap = false;
  p.gqa_ratio = 4;
  p.seqlen_q_bucket = q_bucket;
  p.seqlen_k_bucket = k_bucket;
  p.batch_heads_bucket = bh_bucket;
  return p;
}

// Every field differs from its default, and from `n` to `n + 1`; strings
// that YAML would read as null or bool check the export's quoting.
inline TuningRecord full_record(int n = 0) {
  TuningRecord r;
  r.device = h200();
  r.software = software_a();
  r.problem = problem_class(13 + n, 14 + n, 7);
  r.problem.window_left = 256 + n;
  r.problem.window_right = 16;
  r.problem.mask = "window";
  r.problem.softcap = true;
  r.config = {"sm90", 128, 176, 12, 2, 3, "on"};
  r.shape = n % 2 ? "null" : "b=2 h=32/8 sq=8192 sk=16384 d=128";
  r.median_ms = 1.0 / 3 + n;
  r.min_ms = 0.1 + n;
  r.max_ms = 2.5e-7 + n;
  r.tflops = 612.25 + n;
  r.heuristic_ms = 1.75 + n;
  r.heuristic_config = {"sm80", 64, 64, 4, 3, 2, "auto"};
  r.occupancy = 1.5;
  r.registers = 168 + n;
  r.smem_bytes = 196608;
  r.spill_bytes = 8;
  r.candidates_tried = 24;
  r.candidates_failed = 3;
  r.tuned_at = "2025-01-02T03:04:05Z";
  r.flashjit_version = "yes";
  r.cubin_key = numbered("cubin-", n);
  return r;
}

inline void expect_same(const TuningRecord &a, const TuningRecord &b) {
  EXPECT_EQ(a.device, b.device);
  EXPECT_EQ(a.software, b.software);
  EXPECT_EQ(a.problem, b.problem);
  EXPECT_EQ(a.config, b.config);
  EXPECT_EQ(a.shape, b.shape);
  EXPECT_EQ(a.median_ms, b.median_ms);
  EXPECT_EQ(a.min_ms, b.min_ms);
  EXPECT_EQ(a.max_ms, b.max_ms);
  EXPECT_EQ(a.tflops, b.tflops);
  EXPECT_EQ(a.heuristic_ms, b.heuristic_ms);
  EXPECT_EQ(a.heuristic_config, b.heuristic_config);
  EXPECT_EQ(a.occupancy, b.occupancy);
  EXPECT_EQ(a.registers, b.registers);
  EXPECT_EQ(a.smem_bytes, b.smem_bytes);
  EXPECT_EQ(a.spill_bytes, b.spill_bytes);
  EXPECT_EQ(a.candidates_tried, b.candidates_tried);
  EXPECT_EQ(a.candidates_failed, b.candidates_failed);
  EXPECT_EQ(a.tuned_at, b.tuned_at);
  EXPECT_EQ(a.flashjit_version, b.flashjit_version);
  EXPECT_EQ(a.cubin_key, b.cubin_key);
}

inline CubinRecord cubin(const std::string &key, int size = 1000,
                         const std::string &nvrtc = "13.0") {
  CubinRecord c;
  c.key = key;
  c.kernel_id = "fwd_bf16_d128_" + key;
  c.arch = "sm_90a";
  c.nvrtc_version = nvrtc;
  for (int i = 0; i < size; ++i) c.bytes.push_back(static_cast<char>((i * 7 + key.size()) % 256));
  c.compile_ms = 812.5;
  c.created_at = 1700000000;
  c.last_used_at = 1700000100;
  return c;
}

}  // namespace flashjit::testing_db
