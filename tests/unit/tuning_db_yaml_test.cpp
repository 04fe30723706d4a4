// TuningDb's YAML export/import, and the base64 it carries cubins in.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>

#include "cache/base64.h"
#include "cache/tuning_db.h"
#include "tuning_db_test_util.h"

namespace flashjit {
namespace {

using namespace testing_db;

bool contains(const std::vector<std::string> &lines, std::initializer_list<const char *> parts) {
  for (const std::string &line : lines) {
    bool all = true;
    for (const char *part : parts) all = all && line.find(part) != std::string::npos;
    if (all) return true;
  }
  return false;
}

// The 1-based line of `text` where `needle` first starts (0: absent).
int line_of(const std::string &text, const std::string &needle) {
  const size_t at = text.find(needle);
  if (at == std::string::npos) return 0;
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + at, '\n'));
}

std::string joined(const std::vector<std::string> &lines) {
  std::string out;
  for (const std::string &line : lines) out += line + "\n";
  return out;
}

// An fp8 cache's class and one of another output type travel as classes of
// their own beside the 16-bit one with its defaults.
TEST(TuningDbYamlFp8, ElementTypesRoundTrip) {
  TempDir dir;
  auto source = open_ok(dir.file("a.db"));
  TuningRecord plain = full_record(0), cache = full_record(0), e4m3 = full_record(0);
  cache.problem.kv_dtype = "e4m3";
  cache.cubin_key = "cubin-cache";
  e4m3.problem.dtype = "e4m3";
  e4m3.problem.out_dtype = "fp16";
  e4m3.cubin_key = "cubin-e4m3";
  for (const TuningRecord &r : {plain, cache, e4m3}) ASSERT_FALSE(bool(source->put_tuning(r)));
  const std::string file = dir.file("export.yaml");
  ASSERT_FALSE(bool(source->export_yaml(file)));
  const std::string text = read_bytes(file);
  EXPECT_NE(text.find("kv_dtype: \"e4m3\""), std::string::npos) << text;
  EXPECT_NE(text.find("out_dtype: \"fp16\""), std::string::npos) << text;

  auto target = open_ok(dir.file("b.db"));
  auto report = target->import_yaml(file);
  ASSERT_TRUE(bool(report)) << llvm::toString(report.takeError());
  EXPECT_TRUE(report->skipped.empty()) << joined(report->skipped);
  for (const TuningRecord &r : {plain, cache, e4m3}) {
    auto found = target->find_tuning(r.device, r.software, r.problem);
    ASSERT_TRUE(found && found->has_value()) << r.cubin_key;
    expect_same(**found, r);
  }
}

TEST(TuningDbBase64, RoundTripsAndRejectsGarbage) {
  for (std::string text : {"", "f", "fo", "foo", "foob", "fooba", "foobar"}) {
    std::vector<char> bytes(text.begin(), text.end());
    auto decoded = base64_decode(base64_encode(bytes));
    ASSERT_TRUE(bool(decoded));
    EXPECT_EQ(*decoded, bytes) << text;
  }
  EXPECT_EQ(base64_encode(std::vector<char>{'f', 'o', 'o', 'b'}), "Zm9vYg==");
  std::vector<char> all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  EXPECT_EQ(*base64_decode(base64_encode(all)), all);
  EXPECT_EQ(*base64_decode("Zm9v\n YmFy\n"), (std::vector<char>{'f', 'o', 'o', 'b', 'a', 'r'}));
  for (const char *bad : {"Zm9v!", "Z", "Zg=", "Zg==Zg==", "Zm9v===="}) {
    auto decoded = base64_decode(bad);
    EXPECT_FALSE(bool(decoded)) << bad;
    if (!decoded) llvm::consumeError(decoded.takeError());
  }
}

ImportOptions taking_cubins() {
  ImportOptions options;
  options.accept_cubins = true;
  return options;
}

class TuningDbYaml : public ::testing::Test {
 protected:
  void SetUp() override {
    source = open_ok(dir.file("source.db"));
    ASSERT_TRUE(source);
    for (int n = 0; n < 3; ++n) ASSERT_FALSE(bool(source->put_tuning(full_record(n))));
    ASSERT_FALSE(bool(source->put_cubin(cubin("k1", 5000))));
    ASSERT_FALSE(bool(source->put_cubin(cubin("k2", 3))));
  }

  TempDir dir;
  // This user's origin key, in the test's own folder.
  ScopedEnv origin_key{"FLASHJIT_ORIGIN_KEY", dir.file("origin.key").c_str()};
  std::unique_ptr<TuningDb> source;
};

TEST_F(TuningDbYaml, ExportThenImportIntoAFreshDatabase) {
  std::string file = dir.file("export.yaml");
  ASSERT_FALSE(bool(source->export_yaml(file)));
  EXPECT_EQ(read_bytes(file).find("blob:"), std::string::npos);  // no cubins asked for

  auto target = open_ok(dir.file("target.db"));
  auto report = target->import_yaml(file);
  ASSERT_TRUE(bool(report)) << llvm::toString(report.takeError());
  EXPECT_EQ(report->tunings_added, 3);
  EXPECT_EQ(report->tunings_replaced, 0);
  EXPECT_EQ(report->cubins_added, 0);
  EXPECT_TRUE(report->skipped.empty()) << joined(report->skipped);
  auto before = source->list_tunings();
  auto after = target->list_tunings();
  ASSERT_EQ(after->size(), 3u);
  for (size_t i = 0; i < 3; ++i) expect_same((*after)[i], (*before)[i]);
  EXPECT_EQ(*target->count_cubins(), 0);

  llvm::Error unwritable = source->export_yaml(dir.file("no/such/folder/x.yaml"));
  ASSERT_TRUE(bool(unwritable));
  EXPECT_NE(llvm::toString(std::move(unwritable)).find("cannot write"), std::string::npos);

  // Importing again replaces rather than duplicates.
  report = target->import_yaml(file);
  ASSERT_TRUE(bool(report));
  EXPECT_EQ(report->tunings_added, 0);
  EXPECT_EQ(report->tunings_replaced, 3);
  EXPECT_EQ(target->list_tunings()->size(), 3u);
}

TEST_F(TuningDbYaml, CubinsTravelOnlyWhenExportedAndAccepted) {
  std::string file = dir.file("with_cubins.yaml");
  ASSERT_FALSE(bool(source->export_yaml(file, /*include_cubins=*/true)));

  auto refusing = open_ok(dir.file("refusing.db"));
  auto report = refusing->import_yaml(file);
  ASSERT_TRUE(bool(report)) << llvm::toString(report.takeError());
  EXPECT_EQ(report->tunings_added, 3);
  EXPECT_EQ(report->cubins_added, 0);
  EXPECT_TRUE(contains(report->skipped, {"cubins", "--accept-cubins"})) << joined(report->skipped);
  EXPECT_EQ(*refusing->count_cubins(), 0);

  auto accepting = open_ok(dir.file("accepting.db"));
  report = accepting->import_yaml(file, taking_cubins());
  ASSERT_TRUE(bool(report)) << llvm::toString(report.takeError());
  EXPECT_EQ(report->cubins_added, 2);
  EXPECT_TRUE(report->skipped.empty()) << joined(report->skipped);
  for (const char *key : {"k1", "k2"}) {
    auto original = source->get_cubin(key);
    auto copy = accepting->get_cubin(key);
    ASSERT_TRUE(copy && copy->has_value()) << key;
    EXPECT_EQ((*copy)->bytes, (*original)->bytes);
    EXPECT_EQ((*copy)->kernel_id, (*original)->kernel_id);
    EXPECT_EQ((*copy)->blob_sha256, (*original)->blob_sha256);
    EXPECT_EQ((*copy)->compile_ms, (*original)->compile_ms);
    EXPECT_EQ((*copy)->created_at, (*original)->created_at);
  }
  report = accepting->import_yaml(file, taking_cubins());
  ASSERT_TRUE(bool(report));
  EXPECT_EQ(report->cubins_replaced, 2);
}

// An export carries its origin, signed with this user's origin key: its
// own cubins come back without recompiling; any other export's cubins are
// verified, and only those that reproduce are stored.
TEST_F(TuningDbYaml, OnlyThisUsersOwnExportSkipsVerification) {
  const std::string file = dir.file("signed.yaml");
  ASSERT_FALSE(bool(source->export_yaml(file, /*include_cubins=*/true)));
  const std::string text = read_bytes(file);
  EXPECT_NE(text.find("origin:\n  host: "), std::string::npos) << text;
  EXPECT_NE(text.find("  signature: \"hmac-sha256:"), std::string::npos) << text;
  struct stat key_stat;
  ASSERT_EQ(::stat(dir.file("origin.key").c_str(), &key_stat), 0);
  EXPECT_EQ(key_stat.st_mode & 0777, 0600u);

  // Its own export: stored without a verifier.
  auto own = open_ok(dir.file("own.db"));
  auto report = own->import_yaml(file, taking_cubins());
  ASSERT_TRUE(bool(report)) << llvm::toString(report.takeError());
  EXPECT_TRUE(report->same_origin) << report->origin;
  EXPECT_FALSE(report->cubins_verified);
  EXPECT_EQ(report->cubins_added, 2);
  EXPECT_NE(report->origin.find("(this user's own export: its signature checks)"),
            std::string::npos)
      << report->origin;
  EXPECT_NE(report->origin.find(source->path()), std::string::npos) << report->origin;

  // Verified on request: the verifier sees both cubins, in the file's order.
  std::vector<std::string> seen;
  ImportOptions always = taking_cubins();
  always.verify = ImportOptions::Verify::always;
  always.reproduce = [&](llvm::ArrayRef<CubinRecord> rows) {
    std::vector<std::string> verdicts;
    for (const CubinRecord &row : rows) {
      seen.push_back(row.key);
      verdicts.push_back(row.key == "k2" ? "differs from its recompiled program: section .text "
                                           "differs at byte 0x10"
                                         : "");
    }
    return verdicts;
  };
  auto checked = open_ok(dir.file("checked.db"));
  report = checked->import_yaml(file, always);
  ASSERT_TRUE(bool(report)) << llvm::toString(report.takeError());
  EXPECT_EQ(seen, (std::vector<std::string>{"k1", "k2"}));
  EXPECT_TRUE(report->cubins_verified);
  EXPECT_EQ(report->cubins_added, 1);
  EXPECT_EQ(report->cubins_refused, 1);
  EXPECT_EQ(joined(report->skipped),
            "cubins[1] (line " + std::to_string(line_of(text, "  - key: \"k2\"")) +
                "): refused: fwd_bf16_d128_k2 (key k2): differs from its recompiled program: "
                "section .text differs at byte 0x10\n");
  EXPECT_TRUE(checked->get_cubin("k1")->has_value());
  EXPECT_FALSE(checked->get_cubin("k2")->has_value());

  // Another user's (or machine's) key: foreign. Without a way to recompile,
  // no cubin is stored; the tunings still are.
  {
    ScopedEnv other_key("FLASHJIT_ORIGIN_KEY", dir.file("other.key").c_str());
    ASSERT_FALSE(bool(source->export_yaml(dir.file("unused.yaml"), true)));  // makes other.key
    auto foreign = open_ok(dir.file("foreign.db"));
    report = foreign->import_yaml(file, taking_cubins());
    ASSERT_TRUE(bool(report)) << llvm::toString(report.takeError());
    EXPECT_FALSE(report->same_origin);
    EXPECT_NE(report->origin.find("(its signature does not check under this user's origin key: "
                                  "another user's or machine's export, or one changed since)"),
              std::string::npos)
        << report->origin;
    EXPECT_TRUE(report->cubins_verified);
    EXPECT_EQ(report->cubins_added, 0);
    EXPECT_EQ(report->cubins_refused, 2);
    EXPECT_EQ(report->tunings_added, 3);
    EXPECT_TRUE(contains(report->skipped, {"cubins[0]", "refused", "not verified: this import "
                                           "has no way to recompile it"}))
        << joined(report->skipped);
    EXPECT_EQ(*foreign->count_cubins(), 0);
    // Unless the caller vouches for the file.
    ImportOptions vouched = taking_cubins();
    vouched.verify = ImportOptions::Verify::never;
    report = foreign->import_yaml(file, vouched);
    ASSERT_TRUE(bool(report));
    EXPECT_FALSE(report->cubins_verified);
    EXPECT_EQ(report->cubins_added, 2);
  }

  // Changed after it was signed: k2's blob replaced by another with a
  // recomputed blob_sha256 (which the import checks) is no longer the
  // signed export, so both cubins need verifying.
  {
    std::string edited = text;
    auto scratch = open_ok(dir.file("scratch.db"));
    CubinRecord other = cubin("k2", 3);
    other.bytes = {'E', 'V', 'I', 'L'};
    ASSERT_FALSE(bool(scratch->put_cubin(other)));
    const std::string forged_sha = (*scratch->list_cubins())[0].blob_sha256;
    const size_t at = edited.find("  - key: \"k2\"");
    ASSERT_NE(at, std::string::npos);
    const size_t sha = edited.find("blob_sha256: \"", at) + 14;
    edited.replace(sha, 64, forged_sha);
    const size_t blob = edited.find("blob: ", sha) + 6;
    edited.replace(blob, edited.find('\n', blob) - blob, base64_encode(other.bytes));
    write_bytes(dir.file("edited.yaml"), edited);
    auto target = open_ok(dir.file("edited.db"));
    ImportOptions foreign_default = taking_cubins();
    foreign_default.reproduce = always.reproduce;
    report = target->import_yaml(dir.file("edited.yaml"), foreign_default);
    ASSERT_TRUE(bool(report)) << llvm::toString(report.takeError());
    EXPECT_FALSE(report->same_origin) << report->origin;
    EXPECT_TRUE(report->cubins_verified);
    EXPECT_EQ(report->cubins_refused, 1);
    auto stored = target->get_cubin("k2");
    ASSERT_TRUE(bool(stored));
    EXPECT_FALSE(stored->has_value()) << "the forged blob must not be stored";
  }

  // Unsigned (an older flashjit's export, or the signature removed).
  {
    std::string unsigned_text = text;
    const size_t at = unsigned_text.find("  signature: ");
    unsigned_text.erase(at, unsigned_text.find('\n', at) + 1 - at);
    write_bytes(dir.file("unsigned.yaml"), unsigned_text);
    auto target = open_ok(dir.file("unsigned.db"));
    report = target->import_yaml(dir.file("unsigned.yaml"), taking_cubins());
    ASSERT_TRUE(bool(report)) << llvm::toString(report.takeError());
    EXPECT_FALSE(report->same_origin);
    EXPECT_EQ(llvm::StringRef(report->origin).endswith(" (unsigned)"), true) << report->origin;
    EXPECT_EQ(report->cubins_refused, 2);
  }

  // A key others can read proves nothing.
  ASSERT_EQ(::chmod(dir.file("origin.key").c_str(), 0644), 0);
  report = open_ok(dir.file("open-key.db"))->import_yaml(file, taking_cubins());
  ASSERT_TRUE(bool(report)) << llvm::toString(report.takeError());
  EXPECT_FALSE(report->same_origin);
  EXPECT_NE(report->origin.find("(signed, but not provably by this user: " +
                                dir.file("origin.key") + " is open to others (mode 0644): it "
                                "proves nothing (chmod 600 " + dir.file("origin.key") + "))"),
            std::string::npos)
      << report->origin;
  ::chmod(dir.file("origin.key").c_str(), 0600);
}

TEST_F(TuningDbYaml, BadEntriesAreSkippedWithTheirIndexKeyAndReason) {
  std::string file = dir.file("good.yaml");
  ASSERT_FALSE(bool(source->export_yaml(file, true)));
  std::string text = read_bytes(file);
  // Break entry 1's dtype (remove the key) and entry 2's head_dim_qk (not a
  // number), and one cubin's bytes (hash mismatch).
  auto replace_nth = [&](const std::string &from, const std::string &to, int nth) {
    size_t at = 0;
    for (int i = 0; i <= nth; ++i) {
      at = text.find(from, i ? at + 1 : 0);
      ASSERT_NE(at, std::string::npos) << from;
    }
    text.replace(at, from.size(), to);
  };
  replace_nth("dtype: \"bf16\"", "dtipe: \"bf16\"", 1);
  replace_nth("head_dim_qk: 128", "head_dim_qk: abc", 2);
  replace_nth("blob: ", "blob: AAAA", 0);
  write_bytes(file, text);

  auto target = open_ok(dir.file("target.db"));
  // Stored as they come (the entries are what this test is about; an edited
  // export is no longer this user's own, and its cubins would be verified).
  ImportOptions vouched = taking_cubins();
  vouched.verify = ImportOptions::Verify::never;
  auto report = target->import_yaml(file, vouched);
  ASSERT_TRUE(bool(report)) << llvm::toString(report.takeError());
  EXPECT_FALSE(report->same_origin);
  EXPECT_EQ(report->tunings_added, 1);
  EXPECT_EQ(report->cubins_added, 1);
  EXPECT_TRUE(contains(report->skipped, {"tunings[1]", "problem.dtype", "missing"}))
      << joined(report->skipped);
  EXPECT_TRUE(contains(report->skipped, {"tunings[2]", "problem.head_dim_qk", "'abc'"}))
      << joined(report->skipped);
  EXPECT_TRUE(contains(report->skipped, {"cubins[0]", "blob", "blob_sha256"}))
      << joined(report->skipped);
  EXPECT_EQ(report->skipped.size(), 3u) << joined(report->skipped);
  // Never a partial row: only the intact entry landed.
  ASSERT_EQ(target->list_tunings()->size(), 1u);
  expect_same(target->list_tunings()->front(), full_record(0));
}

TEST_F(TuningDbYaml, HandWrittenEntriesKeepDefaultsForOptionalFields) {
  std::string file = dir.file("hand.yaml");
  write_bytes(file, R"(flashjit_db_export: 1
schema_version: 1
tunings:
  - device: {name: NVIDIA H200, cc_major: 9, cc_minor: 0, sm_count: 132, driver_version: 13000}
    software: {nvrtc_version: 13.0, templates_hash: abc}
    problem: {pass: fwd, dtype: bf16, head_dim_qk: 128, head_dim_v: 128, mask: none,
              window_left: -1, window_right: -1, softcap: false, gqa_ratio: 1,
              seqlen_q_bucket: 12, seqlen_k_bucket: 12, batch_heads_bucket: 6}
    config: {path: sm90, block_m: 128, block_n: 128, warps: 12, stages: 2}
    median_ms: 0.5
  - "not a mapping"
  - device: {name: "", cc_major: 9, cc_minor: 0, sm_count: 132, driver_version: 13000}
)");
  auto target = open_ok(dir.file("target.db"));
  auto report = target->import_yaml(file);
  ASSERT_TRUE(bool(report)) << llvm::toString(report.takeError());
  EXPECT_EQ(report->tunings_added, 1);
  EXPECT_TRUE(contains(report->skipped, {"tunings[1] (line 11)", "not a mapping"}))
      << joined(report->skipped);
  EXPECT_TRUE(contains(report->skipped, {"tunings[2] (line 12)", "device.name", "empty"}))
      << joined(report->skipped);
  auto found = target->find_tuning({"NVIDIA H200", 9, 0, 132, 13000}, {"13.0", "abc"},
                                   target->list_tunings()->front().problem);
  ASSERT_TRUE(found && found->has_value());
  EXPECT_EQ((*found)->config.block_n, 128);
  EXPECT_EQ((*found)->tflops, 0);
  EXPECT_EQ((*found)->problem.window_left, -1);
  // A schema-1 entry has neither decode field: what its kernel ran.
  EXPECT_EQ((*found)->config.splits, 1);
  EXPECT_EQ((*found)->config.pack_gqa, "off");
  EXPECT_EQ((*found)->heuristic_config.splits, 1);
  EXPECT_EQ((*found)->heuristic_config.pack_gqa, "off");
}

TEST_F(TuningDbYaml, SplitsAndPackGqaTravelInTheConfigs) {
  std::string file = dir.file("export.yaml");
  ASSERT_FALSE(bool(source->export_yaml(file)));
  const std::string text = read_bytes(file);
  EXPECT_NE(text.find("schema_version: 5\n"), std::string::npos) << text;
  // full_record: config splits 3, pack_gqa on; the heuristic's 2 and auto.
  EXPECT_NE(text.find("stages: 2\n      splits: 3\n      pack_gqa: \"on\"\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("stages: 3\n      splits: 2\n      pack_gqa: \"auto\"\n"),
            std::string::npos)
      << text;

  auto target = open_ok(dir.file("target.db"));
  auto report = target->import_yaml(file);
  ASSERT_TRUE(bool(report)) << llvm::toString(report.takeError());
  EXPECT_EQ(report->tunings_added, 3);
  const TuningRecord r = target->list_tunings()->front();
  EXPECT_EQ(r.config, (StoredConfig{"sm90", 128, 176, 12, 2, 3, "on"}));
  EXPECT_EQ(r.heuristic_config, (StoredConfig{"sm80", 64, 64, 4, 3, 2, "auto"}));
}

TEST_F(TuningDbYaml, MalformedYamlNamesFileLineAndColumn) {
  std::string file = dir.file("broken.yaml");
  write_bytes(file, "flashjit_db_export: 1\nschema_version: 1\ntunings: [\n  {device: {name: x}\n");
  auto target = open_ok(dir.file("target.db"));
  auto report = target->import_yaml(file);
  ASSERT_FALSE(bool(report));
  std::string error = llvm::toString(report.takeError());
  EXPECT_NE(error.find(file + ":"), std::string::npos) << error;
  EXPECT_TRUE(error.find(":4:") != std::string::npos || error.find(":5:") != std::string::npos)
      << error;
}

TEST_F(TuningDbYaml, WrongDocumentsAreErrors) {
  auto target = open_ok(dir.file("target.db"));
  auto error_of = [&](const std::string &text) {
    std::string file = dir.file("doc.yaml");
    write_bytes(file, text);
    auto report = target->import_yaml(file);
    if (report) return std::string("(imported)");
    return llvm::toString(report.takeError());
  };
  EXPECT_NE(error_of("plans: []\n").find("not a flashjit database export"), std::string::npos);
  EXPECT_NE(error_of("flashjit_db_export: 2\nschema_version: 1\n").find("format '2'"),
            std::string::npos);
  EXPECT_NE(error_of("flashjit_db_export: 1\nschema_version: 7\n").find("newer"),
            std::string::npos);
  EXPECT_NE(error_of("flashjit_db_export: 1\nschema_version: 1\ntunings: 3\n").find("not a list"),
            std::string::npos);
  auto missing = target->import_yaml(dir.file("absent.yaml"));
  ASSERT_FALSE(bool(missing));
  EXPECT_NE(llvm::toString(missing.takeError()).find("absent.yaml: cannot read"),
            std::string::npos);
  EXPECT_TRUE(target->list_tunings()->empty());
}

}  // namespace
}  // namespace flashjit
