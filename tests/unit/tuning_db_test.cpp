// TuningDb: both stores' round trips, replace semantics, lookups, pruning,
// the schema (versions, migrations, foreign files), default_path.
#include "cache/tuning_db.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <functional>
#include <thread>

#include "cache/schema.h"
#include "cache/sqlite.h"
#include "tuning_db_test_util.h"

namespace flashjit {
namespace {

using namespace testing_db;

std::string open_error(const std::string &path) {
  auto db = TuningDb::open(path);
  if (db) return "(opened)";
  return llvm::toString(db.takeError());
}

TEST(TuningDb, OpenCreatesFolderSchemaAndWal) {
  TempDir dir;
  std::string path = dir.file("a/b/flashjit.db");
  auto db = open_ok(path);
  ASSERT_TRUE(db);
  EXPECT_EQ(db->path(), path);
  EXPECT_TRUE(llvm::sys::fs::exists(path));
  auto version = db->schema_version();
  ASSERT_TRUE(bool(version)) << llvm::toString(version.takeError());
  EXPECT_EQ(*version, TuningDb::kSchemaVersion);

  auto raw = sqlite::Connection::open(path, SQLITE_OPEN_READONLY, 1000);
  ASSERT_TRUE(bool(raw));
  EXPECT_EQ(*raw->query_text("PRAGMA journal_mode"), "wal");
  EXPECT_EQ(*raw->query_text("SELECT value FROM meta WHERE key = 'application'"), "flashjit");
  EXPECT_EQ(*raw->query_text("SELECT value FROM meta WHERE key = 'schema_version'"), "5");

  // Reopening an existing database is not a migration.
  db.reset();
  EXPECT_TRUE(open_ok(path));
}

TEST(TuningDb, TuningRoundTripsEveryField) {
  TempDir dir;
  auto db = open_ok(dir.file("db"));
  ASSERT_TRUE(db);
  TuningRecord record = full_record();
  ASSERT_FALSE(bool(db->put_tuning(record)));
  auto found = db->find_tuning(record.device, record.software, record.problem);
  ASSERT_TRUE(bool(found)) << llvm::toString(found.takeError());
  ASSERT_TRUE(found->has_value());
  expect_same(**found, record);

  // Survives a reopen (it was committed, not just cached).
  db = open_ok(dir.file("db"));
  auto listed = db->list_tunings();
  ASSERT_TRUE(bool(listed));
  ASSERT_EQ(listed->size(), 1u);
  expect_same(listed->front(), record);
}

TEST(TuningDb, PutTuningReplacesTheRowOfItsKey) {
  TempDir dir;
  auto db = open_ok(dir.file("db"));
  TuningRecord first = full_record();
  ASSERT_FALSE(bool(db->put_tuning(first)));
  TuningRecord second = first;
  second.config = {"sm80", 64, 128, 4, 3};
  second.median_ms = 0.5;
  second.tuned_at = "2025-02-01T00:00:00Z";
  ASSERT_FALSE(bool(db->put_tuning(second)));
  auto listed = db->list_tunings();
  ASSERT_TRUE(bool(listed));
  ASSERT_EQ(listed->size(), 1u);
  expect_same(listed->front(), second);
}

TEST(TuningDb, EveryKeyFieldMakesItsOwnRow) {
  TempDir dir;
  auto db = open_ok(dir.file("db"));
  std::vector<std::function<void(TuningRecord &)>> changes = {
      [](TuningRecord &r) { r.device.name = "NVIDIA A100"; },
      [](TuningRecord &r) { r.device.cc_major = 8; },
      [](TuningRecord &r) { r.device.cc_minor = 6; },
      [](TuningRecord &r) { r.device.sm_count = 108; },
      [](TuningRecord &r) { r.device.driver_version = 12080; },
      [](TuningRecord &r) { r.software.nvrtc_version = "12.8"; },
      [](TuningRecord &r) { r.software.templates_hash = "other"; },
      [](TuningRecord &r) { r.problem.pass = "bwd"; },
      [](TuningRecord &r) { r.problem.dtype = "fp16"; },
      [](TuningRecord &r) { r.problem.head_dim_qk = 64; },
      [](TuningRecord &r) { r.problem.head_dim_v = 64; },
      [](TuningRecord &r) { r.problem.mask = "none"; },
      [](TuningRecord &r) { r.problem.window_left = 1; },
      [](TuningRecord &r) { r.problem.window_right = 1; },
      [](TuningRecord &r) { r.problem.softcap = false; },
      [](TuningRecord &r) { r.problem.gqa_ratio = 1; },
      [](TuningRecord &r) { r.problem.kv_layout = "paged64"; },
      [](TuningRecord &r) { r.problem.modifiers = "0123456789abcdef"; },
      [](TuningRecord &r) { r.problem.kv_dtype = "e4m3"; },
      [](TuningRecord &r) { r.problem.out_dtype = "fp16"; },
      [](TuningRecord &r) { r.problem.seqlen_q_bucket = 1; },
      [](TuningRecord &r) { r.problem.seqlen_k_bucket = 1; },
      [](TuningRecord &r) { r.problem.batch_heads_bucket = 1; },
  };
  ASSERT_FALSE(bool(db->put_tuning(full_record())));
  for (auto &change : changes) {
    TuningRecord r = full_record();
    change(r);
    ASSERT_FALSE(bool(db->put_tuning(r)));
    auto found = db->find_tuning(r.device, r.software, r.problem);
    ASSERT_TRUE(found && found->has_value());
    EXPECT_EQ((*found)->problem, r.problem);
  }
  EXPECT_EQ(db->list_tunings()->size(), changes.size() + 1);
}

TEST(TuningDb, StaleSoftwareIsIgnoredByLookupsButListed) {
  TempDir dir;
  auto db = open_ok(dir.file("db"));
  TuningRecord old = full_record();
  old.software = {"12.8", "templates-old"};
  ASSERT_FALSE(bool(db->put_tuning(old)));
  auto exact = db->find_tuning(old.device, software_a(), old.problem);
  ASSERT_TRUE(bool(exact));
  EXPECT_FALSE(exact->has_value());
  auto nearest = db->nearest_tunings(old.device, software_a(), old.problem, 1);
  ASSERT_TRUE(bool(nearest));
  EXPECT_TRUE(nearest->empty());
  EXPECT_EQ(db->list_tunings()->size(), 1u);
}

TEST(TuningDb, NearestPicksTheClosestBucketsThenTheLargerSeqlenK) {
  TempDir dir;
  auto db = open_ok(dir.file("db"));
  auto put = [&](ProblemClassKey p, const std::string &tag) {
    TuningRecord r = full_record();
    r.problem = p;
    r.shape = tag;
    ASSERT_FALSE(bool(db->put_tuning(r)));
  };
  put(problem_class(10, 10, 5), "10/10/5");
  put(problem_class(12, 12, 5), "12/12/5");
  put(problem_class(10, 14, 5), "10/14/5");
  put(problem_class(16, 16, 9), "16/16/9");
  // Exact matches at distance 0 that must not count: other class, device,
  // software.
  ProblemClassKey other = problem_class(11, 11, 5);
  other.dtype = "fp16";
  put(other, "fp16");
  TuningRecord other_device = full_record();
  other_device.problem = problem_class(11, 11, 5);
  other_device.device.sm_count = 100;
  ASSERT_FALSE(bool(db->put_tuning(other_device)));
  TuningRecord other_software = full_record();
  other_software.problem = problem_class(11, 11, 5);
  other_software.software.templates_hash = "stale";
  ASSERT_FALSE(bool(db->put_tuning(other_software)));

  auto nearest = [&](int q, int k, int bh) -> std::string {
    auto found = db->nearest_tunings(h200(), software_a(), problem_class(q, k, bh), 1);
    if (!found) return "error: " + llvm::toString(found.takeError());
    return found->empty() ? "none" : found->front().shape;
  };
  EXPECT_EQ(nearest(10, 10, 5), "10/10/5");  // exact
  EXPECT_EQ(nearest(10, 10, 4), "10/10/5");  // distance 1
  EXPECT_EQ(nearest(11, 11, 5), "12/12/5");  // tie at 2 with 10/10/5: larger k
  EXPECT_EQ(nearest(10, 12, 5), "10/14/5");  // three-way tie at 2: k=14 wins
  EXPECT_EQ(nearest(15, 15, 8), "16/16/9");
  EXPECT_EQ(nearest(1, 1, 1), "10/10/5");

  // Every row of the class, closest first, for a caller that passes some
  // over; the limit cuts the list.
  auto in_order = [&](int q, int k, int bh, int limit) -> std::string {
    auto found = db->nearest_tunings(h200(), software_a(), problem_class(q, k, bh), limit);
    if (!found) return "error: " + llvm::toString(found.takeError());
    std::string shapes;
    for (const TuningRecord &r : *found) shapes += (shapes.empty() ? "" : " ") + r.shape;
    return shapes;
  };
  EXPECT_EQ(in_order(11, 11, 5, 16), "12/12/5 10/10/5 10/14/5 16/16/9");
  EXPECT_EQ(in_order(11, 11, 5, 1), "12/12/5");
  EXPECT_EQ(in_order(11, 11, 5, 0), "");

  ProblemClassKey untuned = problem_class(10, 10, 5);
  untuned.head_dim_qk = 256;
  auto none = db->nearest_tunings(h200(), software_a(), untuned, 16);
  ASSERT_TRUE(bool(none));
  EXPECT_TRUE(none->empty());
}

TEST(TuningDb, CubinRoundTripsAndTouchesLastUse) {
  TempDir dir;
  auto db = open_ok(dir.file("db"));
  CubinRecord c = cubin("k1", 70000);
  c.bytes[5] = 0;  // binary, not text
  ASSERT_FALSE(bool(db->put_cubin(c)));
  auto got = db->get_cubin("k1");
  ASSERT_TRUE(bool(got)) << llvm::toString(got.takeError());
  ASSERT_TRUE(got->has_value());
  const CubinRecord &r = **got;
  EXPECT_EQ(r.key, c.key);
  EXPECT_EQ(r.kernel_id, c.kernel_id);
  EXPECT_EQ(r.arch, c.arch);
  EXPECT_EQ(r.nvrtc_version, c.nvrtc_version);
  EXPECT_EQ(r.bytes, c.bytes);
  EXPECT_EQ(r.blob_sha256.size(), 64u);
  EXPECT_EQ(r.compile_ms, c.compile_ms);
  EXPECT_EQ(r.created_at, c.created_at);
  // Last used long ago: the hit refreshes it.
  int64_t now = std::time(nullptr);
  EXPECT_GE(r.last_used_at, now - 5);
  auto again = db->get_cubin("k1");
  EXPECT_GE((*again)->last_used_at, now - 5);

  auto missing = db->get_cubin("nope");
  ASSERT_TRUE(bool(missing));
  EXPECT_FALSE(missing->has_value());
  EXPECT_EQ(*db->count_cubins(), 1);
  EXPECT_EQ(db->refused_cubins(), 0);
}

TEST(TuningDb, PutCubinFillsTimesAndReplaces) {
  TempDir dir;
  auto db = open_ok(dir.file("db"));
  CubinRecord c = cubin("k1");
  c.created_at = 0;
  c.last_used_at = 0;
  ASSERT_FALSE(bool(db->put_cubin(c)));
  int64_t now = std::time(nullptr);
  auto listed = db->list_cubins();
  ASSERT_TRUE(bool(listed));
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_GE(listed->front().created_at, now - 5);
  EXPECT_GE(listed->front().last_used_at, now - 5);
  EXPECT_TRUE(listed->front().bytes.empty());  // not asked for

  c.kernel_id = "renamed";
  ASSERT_FALSE(bool(db->put_cubin(c)));
  EXPECT_EQ(*db->count_cubins(), 1);
  EXPECT_EQ((*db->get_cubin("k1"))->kernel_id, "renamed");

  CubinRecord lying = cubin("k2");
  lying.blob_sha256 = std::string(64, '0');
  llvm::Error e = db->put_cubin(lying);
  ASSERT_TRUE(bool(e));
  EXPECT_NE(llvm::toString(std::move(e)).find("does not match"), std::string::npos);
}

TEST(TuningDb, CorruptedCubinIsRefused) {
  TempDir dir;
  std::string path = dir.file("db");
  auto db = open_ok(path);
  ASSERT_FALSE(bool(db->put_cubin(cubin("k1"))));
  // Same size, other bytes: what a bad disk or a hand edit leaves.
  raw_sql(path, "UPDATE cubins SET blob = CAST(zeroblob(1000) AS BLOB) WHERE key = 'k1'");
  std::string why;
  auto got = db->get_cubin("k1", &why);
  ASSERT_TRUE(bool(got)) << llvm::toString(got.takeError());
  EXPECT_FALSE(got->has_value());
  EXPECT_NE(why.find("refused"), std::string::npos) << why;
  EXPECT_EQ(db->refused_cubins(), 1);
  // A fresh put replaces it.
  ASSERT_FALSE(bool(db->put_cubin(cubin("k1"))));
  EXPECT_TRUE((*db->get_cubin("k1")).has_value());
}

TEST(TuningDb, PruneRemovesStaleSoftwareAndUnusedCubins) {
  TempDir dir;
  auto db = open_ok(dir.file("db"));
  TuningRecord current = full_record(0);
  TuningRecord stale_nvrtc = full_record(1);
  stale_nvrtc.software.nvrtc_version = "12.8";
  TuningRecord stale_templates = full_record(2);
  stale_templates.software.templates_hash = "old";
  for (auto *r : {&current, &stale_nvrtc, &stale_templates}) ASSERT_FALSE(bool(db->put_tuning(*r)));

  int64_t now = std::time(nullptr);
  CubinRecord fresh = cubin("fresh");
  fresh.last_used_at = now;
  CubinRecord old_compiler = cubin("old_compiler", 10, "12.8");
  old_compiler.last_used_at = now;
  CubinRecord unused = cubin("unused");
  unused.last_used_at = now - 40 * 86400;
  for (auto *c : {&fresh, &old_compiler, &unused}) ASSERT_FALSE(bool(db->put_cubin(*c)));

  auto report = db->prune(software_a());  // unused_days 0: keep unused ones
  ASSERT_TRUE(bool(report)) << llvm::toString(report.takeError());
  EXPECT_EQ(report->stale_tunings, 2);
  EXPECT_EQ(report->stale_cubins, 1);
  EXPECT_EQ(db->list_tunings()->size(), 1u);
  EXPECT_EQ(*db->count_cubins(), 2);

  report = db->prune(software_a(), 30);
  ASSERT_TRUE(bool(report));
  EXPECT_EQ(report->stale_tunings, 0);
  EXPECT_EQ(report->stale_cubins, 1);
  EXPECT_TRUE((*db->get_cubin("fresh")).has_value());
  EXPECT_EQ(*db->count_cubins(), 1);
}

TEST(TuningDb, ThreadsShareOneDatabase) {
  TempDir dir;
  auto db = open_ok(dir.file("db"));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        EXPECT_FALSE(bool(db->put_cubin(cubin(numbered("t", t * 100 + i), 64))));
        TuningRecord r = full_record(t * 100 + i);
        EXPECT_FALSE(bool(db->put_tuning(r)));
      }
    });
  for (auto &t : threads) t.join();
  EXPECT_EQ(*db->count_cubins(), 100);
  EXPECT_EQ(db->list_tunings()->size(), 100u);
}

TEST(TuningDb, DefaultPathFollowsTheEnvironment) {
  auto saved = [](const char *name) -> std::optional<std::string> {
    const char *v = std::getenv(name);
    return v ? std::optional<std::string>(v) : std::nullopt;
  };
  auto db = saved("FLASHJIT_DB"), xdg = saved("XDG_CACHE_HOME"), home = saved("HOME");
  setenv("FLASHJIT_DB", "/x/my.db", 1);
  EXPECT_EQ(TuningDb::default_path(), "/x/my.db");
  unsetenv("FLASHJIT_DB");
  setenv("XDG_CACHE_HOME", "/xdg", 1);
  EXPECT_EQ(TuningDb::default_path(), "/xdg/flashjit/flashjit.db");
  setenv("XDG_CACHE_HOME", "relative", 1);  // invalid per the XDG spec
  setenv("HOME", "/home/u", 1);
  EXPECT_EQ(TuningDb::default_path(), "/home/u/.cache/flashjit/flashjit.db");
  unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(TuningDb::default_path(), "/home/u/.cache/flashjit/flashjit.db");
  auto restore = [](const char *name, const std::optional<std::string> &v) {
    if (v)
      setenv(name, v->c_str(), 1);
    else
      unsetenv(name);
  };
  restore("FLASHJIT_DB", db);
  restore("XDG_CACHE_HOME", xdg);
  restore("HOME", home);
}

// ---- schema -------------------------------------------------------------------

TEST(TuningDbSchema, NotSqliteIsRefusedAndLeftUntouched) {
  TempDir dir;
  std::string path = dir.file("notes.txt");
  std::string bytes(8192, 'x');
  write_bytes(path, "these are my notes, not a database\n" + bytes);
  std::string before = read_bytes(path);
  std::string error = open_error(path);
  EXPECT_NE(error.find("not usable as a flashjit database"), std::string::npos) << error;
  EXPECT_NE(error.find("left untouched"), std::string::npos) << error;
  EXPECT_EQ(read_bytes(path), before);
}

TEST(TuningDbSchema, AnotherApplicationsDatabaseIsRefusedAndLeftUntouched) {
  TempDir dir;
  std::string path = dir.file("other.db");
  raw_sql(path, "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT); "
                "INSERT INTO users (name) VALUES ('ada')");
  std::string before = read_bytes(path);
  std::string error = open_error(path);
  EXPECT_NE(error.find("another application"), std::string::npos) << error;
  EXPECT_EQ(read_bytes(path), before);

  // A `meta` table that names someone else.
  std::string path2 = dir.file("other2.db");
  raw_sql(path2, "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT); "
                 "INSERT INTO meta VALUES ('application', 'not-flashjit')");
  before = read_bytes(path2);
  error = open_error(path2);
  EXPECT_NE(error.find("not-flashjit"), std::string::npos) << error;
  EXPECT_EQ(read_bytes(path2), before);
}

TEST(TuningDbSchema, NewerSchemaIsRefusedAndLeftUntouched) {
  TempDir dir;
  std::string path = dir.file("db");
  ASSERT_TRUE(open_ok(path));
  raw_sql(path, "UPDATE meta SET value = '99' WHERE key = 'schema_version'");
  std::string before = read_bytes(path);
  std::string error = open_error(path);
  EXPECT_NE(error.find("newer"), std::string::npos) << error;
  EXPECT_EQ(read_bytes(path), before);
}

TEST(TuningDbSchema, AnEmptyFileBecomesADatabase) {
  TempDir dir;
  std::string path = dir.file("empty.db");
  write_bytes(path, "");
  auto db = open_ok(path);
  ASSERT_TRUE(db);
  EXPECT_EQ(*db->schema_version(), TuningDb::kSchemaVersion);
}

TEST(TuningDbSchema, OlderVersionIsMigrated) {
  TempDir dir;
  std::string path = dir.file("v0.db");
  // Version 0: a flashjit database from before the stores existed.
  raw_sql(path, "CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL); "
                "INSERT INTO meta VALUES ('application', 'flashjit'), ('schema_version', '0')");
  auto db = open_ok(path);
  ASSERT_TRUE(db);
  EXPECT_EQ(*db->schema_version(), TuningDb::kSchemaVersion);
  ASSERT_FALSE(bool(db->put_tuning(full_record())));
  ASSERT_FALSE(bool(db->put_cubin(cubin("k"))));
}

// Version 1 as flashjit wrote it before splits and pack_gqa (the CREATE
// statements are schema.cpp's frozen kSchemaV1, repeated here so that the
// test does not lean on the code it checks), with one row: a new flashjit
// migrates the file and reads that tuning back as what it ran, one split
// and no GQA packing.
constexpr const char *kVersion1Database = R"sql(
CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL);
INSERT INTO meta VALUES ('application', 'flashjit'), ('schema_version', '1');
CREATE TABLE tunings (
  id INTEGER PRIMARY KEY,
  device_name TEXT NOT NULL, device_cc_major INTEGER NOT NULL, device_cc_minor INTEGER NOT NULL,
  device_sm_count INTEGER NOT NULL, device_driver_version INTEGER NOT NULL,
  software_nvrtc_version TEXT NOT NULL, software_templates_hash TEXT NOT NULL,
  problem_pass TEXT NOT NULL, problem_dtype TEXT NOT NULL, problem_head_dim_qk INTEGER NOT NULL,
  problem_head_dim_v INTEGER NOT NULL, problem_mask TEXT NOT NULL,
  problem_window_left INTEGER NOT NULL, problem_window_right INTEGER NOT NULL,
  problem_softcap INTEGER NOT NULL, problem_gqa_ratio INTEGER NOT NULL,
  problem_seqlen_q_bucket INTEGER NOT NULL, problem_seqlen_k_bucket INTEGER NOT NULL,
  problem_batch_heads_bucket INTEGER NOT NULL,
  config_path TEXT NOT NULL, config_block_m INTEGER NOT NULL, config_block_n INTEGER NOT NULL,
  config_warps INTEGER NOT NULL, config_stages INTEGER NOT NULL,
  shape TEXT NOT NULL, median_ms REAL NOT NULL, min_ms REAL NOT NULL, max_ms REAL NOT NULL,
  tflops REAL NOT NULL, heuristic_ms REAL NOT NULL, occupancy REAL NOT NULL,
  registers INTEGER NOT NULL, smem_bytes INTEGER NOT NULL, spill_bytes INTEGER NOT NULL,
  candidates_tried INTEGER NOT NULL, candidates_failed INTEGER NOT NULL,
  tuned_at TEXT NOT NULL, flashjit_version TEXT NOT NULL, cubin_key TEXT NOT NULL,
  heuristic_config_path TEXT NOT NULL, heuristic_config_block_m INTEGER NOT NULL,
  heuristic_config_block_n INTEGER NOT NULL, heuristic_config_warps INTEGER NOT NULL,
  heuristic_config_stages INTEGER NOT NULL,
  UNIQUE (device_name, device_cc_major, device_cc_minor, device_sm_count,
          device_driver_version, software_nvrtc_version, software_templates_hash,
          problem_pass, problem_dtype, problem_head_dim_qk, problem_head_dim_v,
          problem_mask, problem_window_left, problem_window_right, problem_softcap,
          problem_gqa_ratio, problem_seqlen_q_bucket, problem_seqlen_k_bucket,
          problem_batch_heads_bucket)
);
CREATE TABLE cubins (
  key TEXT PRIMARY KEY NOT NULL, kernel_id TEXT NOT NULL, arch TEXT NOT NULL,
  nvrtc_version TEXT NOT NULL, size INTEGER NOT NULL, blob BLOB NOT NULL,
  blob_sha256 TEXT NOT NULL, compile_ms REAL NOT NULL, created_at INTEGER NOT NULL,
  last_used_at INTEGER NOT NULL
);
CREATE INDEX cubins_by_last_use ON cubins (last_used_at);
INSERT INTO tunings VALUES (
  1, 'NVIDIA H200', 9, 0, 132, 13000, '13.0', 'templates-aaaa',
  'fwd', 'bf16', 128, 128, 'causal', -1, 0, 0, 4, 13, 13, 6,
  'sm90', 128, 128, 12, 2,
  'b=2 h=32/8 sq=8192 sk=8192 d=128', 1.25, 1.2, 1.3, 612.5, 1.5, 1.0,
  168, 196608, 0, 24, 3, '2025-01-02T03:04:05Z', '0.1.0', 'cubin-v1',
  'sm80', 128, 64, 4, 2);
)sql";

TEST(TuningDbSchema, Version1TuningsReadBackWithOneSplitAndNoPacking) {
  TempDir dir;
  const std::string path = dir.file("v1.db");
  raw_sql(path, kVersion1Database);
  auto db = open_ok(path);
  ASSERT_TRUE(db);
  EXPECT_EQ(*db->schema_version(), 5);

  const ProblemClassKey key = problem_class(13, 13, 6);
  auto found = db->find_tuning(h200(), software_a(), key);
  ASSERT_TRUE(bool(found)) << llvm::toString(found.takeError());
  ASSERT_TRUE(found->has_value());
  const TuningRecord &r = **found;
  EXPECT_EQ(r.problem, key);
  EXPECT_EQ(r.config, (StoredConfig{"sm90", 128, 128, 12, 2, 1, "off"}));
  EXPECT_EQ(r.config.splits, 1);
  EXPECT_EQ(r.config.pack_gqa, "off");
  EXPECT_EQ(r.heuristic_config, (StoredConfig{"sm80", 128, 64, 4, 2, 1, "off"}));
  EXPECT_EQ(r.median_ms, 1.25);
  EXPECT_EQ(r.cubin_key, "cubin-v1");

  // The migrated file takes new rows with both fields, next to the old one.
  TuningRecord fresh = full_record();
  ASSERT_FALSE(bool(db->put_tuning(fresh)));
  auto listed = db->list_tunings();
  ASSERT_TRUE(bool(listed)) << llvm::toString(listed.takeError());
  ASSERT_EQ(listed->size(), 2u);
  int matched = 0;
  for (const TuningRecord &row : *listed) {
    if (row.cubin_key == fresh.cubin_key) {
      expect_same(row, fresh);
      ++matched;
    } else {
      EXPECT_EQ(row.config.splits, 1);
      EXPECT_EQ(row.config.pack_gqa, "off");
      ++matched;
    }
  }
  EXPECT_EQ(matched, 2);

  // Schema 3: the old row is contiguous, and a paged class is a class of
  // its own beside it (the rebuilt key has the column).
  EXPECT_EQ(r.problem.kv_layout, "contiguous");
  TuningRecord paged = full_record();
  paged.problem = key;
  paged.problem.kv_layout = "paged16";
  paged.cubin_key = "cubin-paged";
  ASSERT_FALSE(bool(db->put_tuning(paged)));
  auto paged_found = db->find_tuning(h200(), software_a(), paged.problem);
  ASSERT_TRUE(bool(paged_found) && paged_found->has_value());
  EXPECT_EQ((*paged_found)->cubin_key, "cubin-paged");
  auto dense_found = db->find_tuning(h200(), software_a(), key);
  ASSERT_TRUE(bool(dense_found) && dense_found->has_value());
  EXPECT_EQ((*dense_found)->cubin_key, "cubin-v1");

  // Reopened: version 5 already, nothing to migrate, the rows as they were.
  db.reset();
  db = open_ok(path);
  ASSERT_TRUE(db);
  auto again = db->find_tuning(h200(), software_a(), key);
  ASSERT_TRUE(bool(again) && again->has_value());
  EXPECT_EQ((*again)->config, (StoredConfig{"sm90", 128, 128, 12, 2, 1, "off"}));
}

// Version 2 as the flashjit before the KV cache wrote it: version 1's
// tables, version 2's columns, a decode tuning with 4 splits and packed GQA.
// Opened now, the table is rebuilt with the KV layout in its key: the row
// reads back whole as a contiguous class, and a paged class of the same key
// fields is a row of its own.
TEST(TuningDbSchema, Version2TuningsReadBackAsContiguous) {
  TempDir dir;
  const std::string path = dir.file("v2.db");
  std::string v2 = kVersion1Database;
  v2 += R"sql(
ALTER TABLE tunings ADD COLUMN config_splits INTEGER NOT NULL DEFAULT 1;
ALTER TABLE tunings ADD COLUMN config_pack_gqa TEXT NOT NULL DEFAULT 'off';
ALTER TABLE tunings ADD COLUMN heuristic_config_splits INTEGER NOT NULL DEFAULT 1;
ALTER TABLE tunings ADD COLUMN heuristic_config_pack_gqa TEXT NOT NULL DEFAULT 'off';
UPDATE tunings SET config_splits = 4, config_pack_gqa = 'on', heuristic_config_splits = 15,
                   heuristic_config_pack_gqa = 'on';
UPDATE meta SET value = '2' WHERE key = 'schema_version';
)sql";
  raw_sql(path, v2);
  auto db = open_ok(path);
  ASSERT_TRUE(db);
  EXPECT_EQ(*db->schema_version(), 5);
  const ProblemClassKey key = problem_class(13, 13, 6);
  auto found = db->find_tuning(h200(), software_a(), key);
  ASSERT_TRUE(bool(found)) << llvm::toString(found.takeError());
  ASSERT_TRUE(found->has_value());
  EXPECT_EQ((*found)->problem.kv_layout, "contiguous");
  EXPECT_EQ((*found)->config, (StoredConfig{"sm90", 128, 128, 12, 2, 4, "on"}));
  EXPECT_EQ((*found)->heuristic_config, (StoredConfig{"sm80", 128, 64, 4, 2, 15, "on"}));
  EXPECT_EQ((*found)->median_ms, 1.25);
  EXPECT_EQ((*found)->tuned_at, "2025-01-02T03:04:05Z");

  // Schema 4: the old row has no modifiers, and a modified class is a row
  // of its own beside it.
  EXPECT_EQ((*found)->problem.modifiers, "");
  {
    TuningRecord modified = **found;
    modified.problem.modifiers = "0123456789abcdef";
    modified.cubin_key = "cubin-modified";
    ASSERT_FALSE(bool(db->put_tuning(modified)));
    auto mod_found = db->find_tuning(h200(), software_a(), modified.problem);
    ASSERT_TRUE(bool(mod_found) && mod_found->has_value());
    EXPECT_EQ((*mod_found)->cubin_key, "cubin-modified");
    auto plain = db->find_tuning(h200(), software_a(), key);
    ASSERT_TRUE(bool(plain) && plain->has_value());
    EXPECT_EQ((*plain)->problem.modifiers, "");
  }

  // Schema 5: the old row is a 16-bit cache with the default output, and an
  // fp8 cache or another output type is a row of its own beside it.
  EXPECT_EQ((*found)->problem.kv_dtype, "same");
  EXPECT_EQ((*found)->problem.out_dtype, "auto");
  for (auto [kv, out] : {std::pair{"e4m3", "auto"}, {"same", "fp16"}}) {
    ProblemClassKey fp8 = key;
    fp8.kv_dtype = kv;
    fp8.out_dtype = out;
    auto absent = db->find_tuning(h200(), software_a(), fp8);
    ASSERT_TRUE(bool(absent));
    EXPECT_FALSE(absent->has_value()) << kv << " " << out;
    auto near = db->nearest_tunings(h200(), software_a(), fp8, 4);
    ASSERT_TRUE(bool(near));
    EXPECT_TRUE(near->empty()) << kv << " " << out;
  }

  ProblemClassKey paged = key;
  paged.kv_layout = "paged16";
  auto none = db->find_tuning(h200(), software_a(), paged);
  ASSERT_TRUE(bool(none));
  EXPECT_FALSE(none->has_value());
  TuningRecord r = **found;
  r.problem = paged;
  r.cubin_key = "cubin-paged";
  ASSERT_FALSE(bool(db->put_tuning(r)));
  auto listed = db->list_tunings();
  ASSERT_TRUE(bool(listed));
  EXPECT_EQ(listed->size(), 3u);  // the old row, the modified class, the paged one
}

TEST(TuningDbSchema, AFutureMigrationIsOneMoreStep) {
  TempDir dir;
  std::string path = dir.file("db");
  ASSERT_TRUE(open_ok(path));
  ASSERT_FALSE(bool(open_ok(path)->put_tuning(full_record())));

  std::vector<schema::Migration> steps(schema::migrations().begin(), schema::migrations().end());
  steps.push_back({6, "ALTER TABLE tunings ADD COLUMN power_watts REAL NOT NULL DEFAULT 700"});
  {
    auto raw = sqlite::Connection::open(path, SQLITE_OPEN_READWRITE, 1000);
    ASSERT_TRUE(bool(raw));
    auto found = schema::migrate(*raw, steps);
    ASSERT_TRUE(bool(found)) << llvm::toString(found.takeError());
    EXPECT_EQ(*found, 5);  // only step 6 ran: steps 1 to 5 would fail a second time
    EXPECT_EQ(*raw->query_text("SELECT value FROM meta WHERE key = 'schema_version'"), "6");
    EXPECT_EQ(*raw->query_text("SELECT power_watts FROM tunings"), "700.0");
    // Running it again is a no-op.
    auto again = schema::migrate(*raw, steps);
    ASSERT_TRUE(bool(again));
    EXPECT_EQ(*again, 6);
  }
  // And this flashjit, which knows version 5, now refuses the file.
  EXPECT_NE(open_error(path).find("newer"), std::string::npos);
}

TEST(TuningDbSchema, SqliteErrorsNameTheStatement) {
  TempDir dir;
  auto raw = sqlite::Connection::open(dir.file("db"), SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                                      1000);
  ASSERT_TRUE(bool(raw));
  llvm::Error e = raw->exec("SELECT * FROM no_such_table");
  ASSERT_TRUE(bool(e));
  std::string text = llvm::toString(std::move(e));
  EXPECT_NE(text.find("SELECT * FROM no_such_table"), std::string::npos) << text;
  EXPECT_NE(text.find("no such table"), std::string::npos) << text;
}

}  // namespace
}  // namespace flashjit
