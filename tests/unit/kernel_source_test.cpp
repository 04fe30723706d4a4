// Where a forward call's config and cubin come from, without a GPU: a fake
// device, a temporary database. Config: caller, else exact tuning, else the
// nearest bucket, else the heuristic; stale or invalid entries are passed
// over. Cubin: compiled and stored once, then loaded without NVRTC.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "generator/heuristic.h"
#include "generator/source.h"
#include "runtime/kernel_source.h"
#include "runtime/nvrtc_compiler.h"
#include "runtime/runtime_counters.h"
#include "runtime/tuning_key.h"
#include "tests/fake_devices.h"
#include "tests/temp_db_test.h"
#include "llvm/ADT/ScopeExit.h"

namespace flashjit {
namespace {

using testing::fake_h200;

Problem problem(int64_t seqlen) {
  Problem p;
  p.dtype = DType::bf16;
  p.batch = 2;
  p.heads_q = 16;
  p.heads_kv = 16;
  p.seqlen_q = p.seqlen_k = seqlen;
  p.head_dim_qk = p.head_dim_v = 128;
  p.mask = MaskKind::causal;
  return p;
}

// Valid for d=128 and none of them the heuristic's choice, so a test sees
// which one was picked.
const KernelConfig kTuned{KernelPath::sm80, 64, 64, 4, 2};

// A config as a forward call resolves it: the decode fields the caller and
// a tuning of the sm80 family leave to the heuristic are filled (no split,
// no packing: the sm80 family has neither).
KernelConfig resolved(KernelConfig c) {
  if (c.splits == 0) c.splits = 1;
  if (c.pack_gqa == GqaPacking::automatic) c.pack_gqa = GqaPacking::off;
  return c;
}
const KernelConfig kOtherBucket{KernelPath::sm80, 128, 32, 4, 2};

class KernelSourceTest : public testing::TempDbTest {
 protected:
  void SetUp() override {
    auto software = software_fingerprint();
    if (!software) GTEST_SKIP() << "no NVRTC: " << llvm::toString(software.takeError());
    software_ = *software;
    open_temp_db("flashjit-kernel-source");
  }

  void put(const Problem &p, const KernelConfig &config, const SoftwareFingerprint &software,
           const DeviceFingerprint &device) {
    TuningRecord r;
    r.device = device;
    r.software = software;
    r.problem = problem_class_key(p);
    r.config = to_stored(config);
    r.heuristic_config = to_stored(heuristic(p));  // as the tuner stores it
    r.shape = describe(p);
    r.median_ms = r.min_ms = r.max_ms = 1.0;
    r.tflops = 100;
    r.tuned_at = "2025-01-01T00:00:00Z";
    r.flashjit_version = "test";
    ASSERT_FALSE(bool(db_->put_tuning(r)));
  }
  void put(const Problem &p, const KernelConfig &config) {
    put(p, config, software_, device_fingerprint(fake_h200()));
  }
  void put_stored(const Problem &p, const StoredConfig &config) {
    TuningRecord r;
    r.device = device_fingerprint(fake_h200());
    r.software = software_;
    r.problem = problem_class_key(p);
    r.config = config;
    ASSERT_FALSE(bool(db_->put_tuning(r)));
  }

  ChosenConfig choose(const Problem &p, const KernelConfig &requested = {}) {
    auto chosen = choose_forward_config(p, requested, fake_h200(), db_.get());
    EXPECT_TRUE(bool(chosen)) << llvm::toString(chosen.takeError());
    return chosen ? *chosen : ChosenConfig{};
  }

  KernelConfig heuristic(const Problem &p, const KernelConfig &partial = {}) {
    const DeviceInfo d = fake_h200();
    return default_forward_config(p, d.target(), d.max_smem_per_block_optin, partial);
  }

  SoftwareFingerprint software_;
};

TEST_F(KernelSourceTest, EmptyDatabaseGivesTheHeuristic) {
  ASSERT_NE(heuristic(problem(4096)), kTuned);
  ChosenConfig c = choose(problem(4096));
  EXPECT_EQ(c.source, ConfigSource::heuristic);
  EXPECT_EQ(c.config, heuristic(problem(4096)));
  EXPECT_FALSE(c.record.has_value());

  auto no_db = choose_forward_config(problem(4096), {}, fake_h200(), nullptr);
  ASSERT_TRUE(bool(no_db));
  EXPECT_EQ(no_db->source, ConfigSource::heuristic);
  EXPECT_EQ(no_db->config, heuristic(problem(4096)));
}

TEST_F(KernelSourceTest, CompleteCallerConfigWinsOverTheDatabase) {
  put(problem(4096), kTuned);
  const KernelConfig mine{KernelPath::sm80, 128, 32, 4, 3};
  ChosenConfig c = choose(problem(4096), mine);
  EXPECT_EQ(c.source, ConfigSource::caller);
  EXPECT_EQ(c.config, resolved(mine));
}

TEST_F(KernelSourceTest, ExactTuningWinsOverNearest) {
  put(problem(16384), kOtherBucket);
  put(problem(4096), kTuned);
  ChosenConfig c = choose(problem(3000));  // bucket 12, as 4096
  EXPECT_EQ(c.source, ConfigSource::tuned);
  EXPECT_EQ(c.config, resolved(kTuned));
  ASSERT_TRUE(c.record.has_value());
  EXPECT_EQ(c.record->problem, problem_class_key(problem(4096)));
  EXPECT_EQ(c.record->tflops, 100);
  EXPECT_STREQ(to_string(c.source), "tuned");
}

TEST_F(KernelSourceTest, NearestWhenOnlyAnotherBucketIsTuned) {
  put(problem(16384), kOtherBucket);
  ChosenConfig c = choose(problem(4096));
  EXPECT_EQ(c.source, ConfigSource::nearest);
  EXPECT_EQ(c.config, resolved(kOtherBucket));
  ASSERT_TRUE(c.record.has_value());
  EXPECT_EQ(c.record->problem.seqlen_q_bucket, 14);

  // Another class (other head dim) is never "near".
  Problem other = problem(4096);
  other.head_dim_qk = other.head_dim_v = 64;
  EXPECT_EQ(choose(other).source, ConfigSource::heuristic);
}

// A nearest bucket's tuning carries over only where the heuristic picks the
// tiles here that it picked where the tuning ran: d=64 causal, where the
// heuristic takes 128-row tiles up to 1k and 192-row ones beyond.
TEST_F(KernelSourceTest, NearestOnlyWhereTheHeuristicPicksTheSameTiles) {
  auto d64 = [](int64_t seqlen) {
    Problem p = problem(seqlen);
    p.head_dim_qk = p.head_dim_v = 64;
    return p;
  };
  ASSERT_NE(to_stored(heuristic(d64(1024))), to_stored(heuristic(d64(8192))));
  ASSERT_EQ(to_stored(heuristic(d64(2048))), to_stored(heuristic(d64(8192))));
  const StoredConfig here = to_stored(heuristic(d64(8192)));
  const StoredConfig there = to_stored(heuristic(d64(1024)));

  put(d64(1024), kTuned);
  ChosenConfig c = choose(d64(8192));
  EXPECT_EQ(c.source, ConfigSource::heuristic);
  EXPECT_EQ(c.config, heuristic(d64(8192)));
  EXPECT_EQ(c.note, "1 nearest entry passed over, tuned where the heuristic picks other tiles "
                    "than its " + config_text(here) + " here (first: " + describe(d64(1024)) +
                        ": the heuristic picked " + config_text(there) + " there)");

  // A farther bucket whose heuristic agrees is taken past a nearer one
  // that does not (2k is nearer to 16k than 1k is; ties go to longer keys).
  put(d64(2048), kOtherBucket);
  c = choose(d64(16384));
  EXPECT_EQ(c.source, ConfigSource::nearest);
  EXPECT_EQ(c.config, resolved(kOtherBucket));
  ASSERT_TRUE(c.record.has_value());
  EXPECT_EQ(c.record->problem.seqlen_q_bucket, 11);
  // 512's heuristic is 1k's: 1k's tuning serves it.
  ASSERT_EQ(to_stored(heuristic(d64(512))), there);
  c = choose(d64(512));
  EXPECT_EQ(c.source, ConfigSource::nearest);
  EXPECT_EQ(c.config, resolved(kTuned));
  ASSERT_TRUE(c.record.has_value());
  EXPECT_EQ(c.record->problem.seqlen_q_bucket, 10);
  EXPECT_EQ(c.note, "");
}

// The caller's modifiers are part of the class (their hash): a modified
// call never takes the plain class's tuning, nor one of other snippets, and
// finds its own exact or nearest.
TEST_F(KernelSourceTest, ModifiersAreAClassOfTheirOwn) {
  const std::string alibi = "0123456789abcdef", documents = "fedcba9876543210";
  put(problem(4096), kTuned);
  auto modified = choose_forward_config(problem(4096), {}, fake_h200(), db_.get(), alibi);
  ASSERT_TRUE(bool(modified)) << llvm::toString(modified.takeError());
  EXPECT_EQ(modified->source, ConfigSource::heuristic);

  TuningRecord r;
  r.device = device_fingerprint(fake_h200());
  r.software = software_;
  r.problem = problem_class_key(problem(16384), "fwd", alibi);
  r.config = to_stored(kOtherBucket);
  r.heuristic_config = to_stored(heuristic(problem(16384)));
  r.median_ms = r.min_ms = r.max_ms = 1.0;
  ASSERT_FALSE(bool(db_->put_tuning(r)));
  modified = choose_forward_config(problem(4096), {}, fake_h200(), db_.get(), alibi);
  ASSERT_TRUE(bool(modified));
  EXPECT_EQ(modified->source, ConfigSource::nearest);
  EXPECT_EQ(modified->config, resolved(kOtherBucket));
  EXPECT_EQ(modified->record->problem.modifiers, alibi);
  auto other = choose_forward_config(problem(4096), {}, fake_h200(), db_.get(), documents);
  ASSERT_TRUE(bool(other));
  EXPECT_EQ(other->source, ConfigSource::heuristic);
  // The plain class still finds its own.
  EXPECT_EQ(choose(problem(4096)).config, resolved(kTuned));
}

TEST_F(KernelSourceTest, StaleSoftwareOrOtherDeviceIsIgnored) {
  SoftwareFingerprint stale = software_;
  stale.templates_hash = "0000stale";
  put(problem(4096), kTuned, stale, device_fingerprint(fake_h200()));
  SoftwareFingerprint old_nvrtc = software_;
  old_nvrtc.nvrtc_version = "11.8";
  put(problem(4096), kTuned, old_nvrtc, device_fingerprint(fake_h200()));
  DeviceFingerprint other = device_fingerprint(fake_h200());
  other.sm_count = 114;
  put(problem(4096), kTuned, software_, other);

  ChosenConfig c = choose(problem(4096));
  EXPECT_EQ(c.source, ConfigSource::heuristic);
  EXPECT_EQ(c.config, heuristic(problem(4096)));
}

TEST_F(KernelSourceTest, InvalidStoredConfigFallsBackToTheHeuristic) {
  // 96 rows over 4 warps is neither 16 nor 32 rows per warp.
  put_stored(problem(4096), {"sm80", 96, 64, 4, 2});
  ChosenConfig c = choose(problem(4096));
  EXPECT_EQ(c.source, ConfigSource::heuristic);
  EXPECT_EQ(c.config, heuristic(problem(4096)));
  EXPECT_NE(c.note.find("no longer validates"), std::string::npos) << c.note;
}

TEST_F(KernelSourceTest, UnparsableStoredConfigFallsBackToTheHeuristic) {
  put_stored(problem(4096), {"sm75", 128, 64, 4, 2});
  ChosenConfig c = choose(problem(4096));
  EXPECT_EQ(c.source, ConfigSource::heuristic);
  EXPECT_NE(c.note.find("sm75"), std::string::npos) << c.note;
}

TEST_F(KernelSourceTest, PartialRequestIsARequirement) {
  put(problem(4096), kTuned);  // block_m=64
  ChosenConfig agrees = choose(problem(4096), {KernelPath::sm80, 64, 0, 0, 0});
  EXPECT_EQ(agrees.source, ConfigSource::tuned);
  EXPECT_EQ(agrees.config, resolved(kTuned));

  const KernelConfig partial{KernelPath::sm80, 128, 0, 0, 3};
  ChosenConfig differs = choose(problem(4096), partial);
  EXPECT_EQ(differs.source, ConfigSource::heuristic);
  EXPECT_EQ(differs.config, heuristic(problem(4096), partial));
  EXPECT_EQ(differs.config.block_m, 128);
  EXPECT_EQ(differs.config.stages, 3);

  // A fixed family is a requirement too: an sm80 tuning does not serve a
  // call pinned to sm90, and automatic takes whichever was tuned.
  KernelConfig sm90_only;
  sm90_only.path = KernelPath::sm90;
  EXPECT_NE(choose(problem(4096), sm90_only).source, ConfigSource::tuned);
  EXPECT_EQ(choose(problem(4096), KernelConfig{}).config, resolved(kTuned));
}

TEST_F(KernelSourceTest, ConfigThatNoLongerFitsTheDeviceFallsBack) {
  // A config tuned where shared memory is plentiful, on a device with less.
  const KernelConfig big{KernelPath::sm80, 128, 128, 4, 3};
  put(problem(4096), big);
  DeviceInfo small = fake_h200();
  small.max_smem_per_block_optin = 48 * 1024;
  auto c = choose_forward_config(problem(4096), {}, small, db_.get());
  ASSERT_TRUE(bool(c));
  EXPECT_EQ(c->source, ConfigSource::heuristic);
}

KernelSpec small_spec(const TargetArch &arch) {
  Problem p = problem(128);
  p.head_dim_qk = p.head_dim_v = 64;  // quick to compile
  auto spec = make_forward_spec(p, {KernelPath::sm80, 64, 64, 4, 2}, arch);
  EXPECT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
  return spec ? *spec : KernelSpec{};
}

uint64_t compiles() { return runtime_counters().compiles.load(); }

TEST_F(KernelSourceTest, CubinIsCompiledOnceThenLoadedFromTheDatabase) {
  const KernelSpec spec = small_spec({8, 0, false});
  const uint64_t before = compiles();
  auto first = forward_cubin(spec, db_.get());
  ASSERT_TRUE(bool(first)) << llvm::toString(first.takeError());
  EXPECT_TRUE(first->compiled);
  EXPECT_EQ(compiles(), before + 1);
  EXPECT_GT(first->compile_ms, 0);
  EXPECT_EQ(first->entry, generate_forward(spec).entry);
  EXPECT_EQ(first->key, cubin_key(generate_forward(spec), spec.arch, software_.nvrtc_version));
  ASSERT_GT(first->bytes.size(), 4u);
  EXPECT_EQ(llvm::StringRef(first->bytes.data(), 4), "\x7f" "ELF");

  auto stored = db_->get_cubin(first->key);
  ASSERT_TRUE(bool(stored)) << llvm::toString(stored.takeError());
  ASSERT_TRUE(stored->has_value());
  EXPECT_EQ((*stored)->arch, "sm_80");
  EXPECT_EQ((*stored)->kernel_id, spec.id());
  EXPECT_EQ((*stored)->nvrtc_version, software_.nvrtc_version);

  auto second = forward_cubin(spec, db_.get());
  ASSERT_TRUE(bool(second)) << llvm::toString(second.takeError());
  EXPECT_FALSE(second->compiled);
  EXPECT_EQ(compiles(), before + 1) << "a stored cubin must not run NVRTC";
  EXPECT_EQ(second->bytes, first->bytes);
  EXPECT_EQ(second->entry, first->entry);
  EXPECT_EQ(second->key, first->key);

  // Another architecture is another cubin.
  auto sm90 = forward_cubin(small_spec({9, 0, true}), db_.get());
  ASSERT_TRUE(bool(sm90)) << llvm::toString(sm90.takeError());
  EXPECT_TRUE(sm90->compiled);
  EXPECT_NE(sm90->key, first->key);
  auto count = db_->count_cubins();
  ASSERT_TRUE(bool(count));
  EXPECT_EQ(*count, 2);
}

TEST_F(KernelSourceTest, CorruptedCubinRowIsRecompiled) {
  const KernelSpec spec = small_spec({8, 0, false});
  auto first = forward_cubin(spec, db_.get());
  ASSERT_TRUE(bool(first)) << llvm::toString(first.takeError());
  auto stored = db_->get_cubin(first->key);
  ASSERT_TRUE(stored && stored->has_value());

  // Bytes damaged on disk after their hash was taken (written behind the
  // store's back: its own API refuses a mismatched hash). The store reports
  // the row absent, and the cubin is compiled (and stored) again.
  {
    sqlite3 *raw = nullptr;
    ASSERT_EQ(sqlite3_open(db_->path().c_str(), &raw), SQLITE_OK);
    auto close = llvm::make_scope_exit([&] { sqlite3_close(raw); });
    std::vector<char> damaged = first->bytes;
    damaged[damaged.size() / 2] ^= 0x5a;
    sqlite3_stmt *update = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(raw, "UPDATE cubins SET blob = ?1 WHERE key = ?2", -1, &update,
                                 nullptr),
              SQLITE_OK)
        << sqlite3_errmsg(raw);
    sqlite3_bind_blob(update, 1, damaged.data(), int(damaged.size()), SQLITE_TRANSIENT);
    sqlite3_bind_text(update, 2, first->key.c_str(), -1, SQLITE_TRANSIENT);
    EXPECT_EQ(sqlite3_step(update), SQLITE_DONE) << sqlite3_errmsg(raw);
    sqlite3_finalize(update);
    EXPECT_EQ(sqlite3_changes(raw), 1);
  }
  uint64_t before = compiles();
  auto again = forward_cubin(spec, db_.get());
  ASSERT_TRUE(bool(again)) << llvm::toString(again.takeError());
  EXPECT_TRUE(again->compiled);
  EXPECT_EQ(compiles(), before + 1);
  EXPECT_EQ(again->bytes, first->bytes);

  auto healed = forward_cubin(spec, db_.get());
  ASSERT_TRUE(bool(healed));
  EXPECT_FALSE(healed->compiled);

  // Not a cubin at all, stored intact (the store hashes what it is given):
  // the store returns it, and forward_cubin must still never hand it to the
  // driver.
  CubinRecord garbage = **stored;
  garbage.bytes.assign(64, 'x');
  garbage.blob_sha256.clear();
  ASSERT_FALSE(bool(db_->put_cubin(garbage)));
  before = compiles();
  auto rebuilt = forward_cubin(spec, db_.get());
  ASSERT_TRUE(bool(rebuilt)) << llvm::toString(rebuilt.takeError());
  EXPECT_TRUE(rebuilt->compiled);
  EXPECT_EQ(compiles(), before + 1);
  EXPECT_EQ(rebuilt->bytes, first->bytes);
}

// Whoever can write the database chooses the code a call runs: a folder
// others can write costs the call its stored cubin (compiled instead, the
// call succeeds) and says so once, naming the path, the mode and the fix.
TEST_F(KernelSourceTest, AnUntrustedDatabaseIsCompiledFromAndReportedOnce) {
  const char *old_scope = std::getenv("FLASHJIT_DB_TRUST");
  const std::string saved_scope = old_scope ? old_scope : "";
  auto restore = llvm::make_scope_exit([&] {
    if (old_scope)
      setenv("FLASHJIT_DB_TRUST", saved_scope.c_str(), 1);
    else
      unsetenv("FLASHJIT_DB_TRUST");
    ::chmod(dir_.c_str(), 0700);
  });
  unsetenv("FLASHJIT_DB_TRUST");
  const KernelSpec spec = small_spec({8, 0, false});
  auto first = forward_cubin(spec, db_.get());
  ASSERT_TRUE(bool(first)) << llvm::toString(first.takeError());

  ASSERT_EQ(::chmod(dir_.c_str(), 0777), 0);
  auto shared = TuningDb::open(db_->path());
  ASSERT_TRUE(bool(shared)) << llvm::toString(shared.takeError());
  ASSERT_FALSE((*shared)->cubin_trust().trusted);
  const uint64_t before = compiles();
  ::testing::internal::CaptureStderr();
  auto a = forward_cubin(spec, shared->get());
  auto b = forward_cubin(spec, shared->get());
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(bool(a)) << llvm::toString(a.takeError());
  ASSERT_TRUE(bool(b)) << llvm::toString(b.takeError());
  EXPECT_TRUE(a->compiled);
  EXPECT_TRUE(b->compiled);
  EXPECT_EQ(compiles(), before + 2) << "no cubin of an untrusted database is loaded";
  EXPECT_EQ(a->bytes, first->bytes);
  EXPECT_EQ(err, "flashjit: warning: not loading cubins from the tuning database " +
                     db_->path() + ": the folder " + std::string(dir_) +
                     " is writable by everyone (mode 0777). Whoever can write it could run "
                     "code in this process, so kernels are compiled instead. Fix: chmod go-w " +
                     std::string(dir_) + "\n");

  // Shared with this user's group on purpose: loaded again.
  ASSERT_EQ(::chown(dir_.c_str(), -1, getegid()), 0);
  ASSERT_EQ(::chmod(dir_.c_str(), 0770), 0);
  setenv("FLASHJIT_DB_TRUST", "group", 1);
  auto team = TuningDb::open(db_->path());
  ASSERT_TRUE(bool(team)) << llvm::toString(team.takeError());
  ASSERT_TRUE((*team)->cubin_trust().trusted) << (*team)->cubin_trust().state();
  auto loaded = forward_cubin(spec, team->get());
  ASSERT_TRUE(bool(loaded)) << llvm::toString(loaded.takeError());
  EXPECT_FALSE(loaded->compiled);
  EXPECT_EQ(loaded->bytes, first->bytes);
}

TEST_F(KernelSourceTest, WithoutADatabaseEveryCallCompiles) {
  const KernelSpec spec = small_spec({8, 0, false});
  const uint64_t before = compiles();
  auto a = forward_cubin(spec, nullptr);
  auto b = forward_cubin(spec, nullptr);
  ASSERT_TRUE(bool(a)) << llvm::toString(a.takeError());
  ASSERT_TRUE(bool(b)) << llvm::toString(b.takeError());
  EXPECT_TRUE(a->compiled);
  EXPECT_TRUE(b->compiled);
  EXPECT_EQ(compiles(), before + 2);
  EXPECT_FALSE(a->key.empty());
}

TEST(ConfigSource, Names) {
  EXPECT_STREQ(to_string(ConfigSource::caller), "caller");
  EXPECT_STREQ(to_string(ConfigSource::tuned), "tuned");
  EXPECT_STREQ(to_string(ConfigSource::nearest), "nearest");
  EXPECT_STREQ(to_string(ConfigSource::heuristic), "heuristic");
}

}  // namespace
}  // namespace flashjit
