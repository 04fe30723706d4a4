// `flashjit db verify` and `db import --verify` on real cubins: a database
// precompiled by this build verifies; a blob replaced by another valid
// cubin (its blob_sha256 recomputed) is named by verify, refused by import
// (which keeps the rest) and replaced by verify --repair; a cubin whose
// program the database cannot rebuild is never counted as verified.
#include <string>
#include <vector>

#include "cache/tuning_db.h"
#include "cli_files.h"
#include "cli_runner.h"
#include "gtest/gtest.h"
#include "runtime/nvrtc_compiler.h"
#include "tuning_db_test_util.h"

namespace flashjit {
namespace {

using testing_cli::CliResult;
using testing_cli::run_cli;

std::vector<std::string> lines_starting(const std::string &text, llvm::StringRef prefix) {
  llvm::SmallVector<llvm::StringRef, 64> lines;
  llvm::StringRef(text).split(lines, '\n');
  std::vector<std::string> out;
  for (llvm::StringRef line : lines)
    if (line.startswith(prefix)) out.push_back(line.str());
  return out;
}

class DbVerifyCli : public ::testing::Test {
 protected:
  void SetUp() override {
    auto version = nvrtc_version();
    if (!version) GTEST_SKIP() << "no NVRTC: " << llvm::toString(version.takeError());
    nvrtc_ = *version;
  }
  testing_cli::TempDir dir;
  // This user's origin key lives in the test's folder, not in ~/.config.
  testing_db::ScopedEnv key{"FLASHJIT_ORIGIN_KEY", dir.file("origin.key").c_str()};
  std::string nvrtc_;
};

TEST_F(DbVerifyCli, APrecompiledDatabaseVerifiesAndAReplacedBlobIsNamedAndRefused) {
  const std::string db = dir.file("fleet.db");
  CliResult r = run_cli({"precompile", "--arch", "sm_80", "--hdim", "32", "--db", db});
  ASSERT_EQ(r.code, 0) << r.err;
  std::vector<CubinRecord> rows;
  {
    auto opened = testing_db::open_ok(db);
    rows = *opened->list_cubins();
  }
  ASSERT_GT(rows.size(), 10u);
  const std::string n = std::to_string(rows.size());

  r = run_cli({"db", "verify", "--db", db});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(lines_starting(r.out, "reproduced").size(), rows.size()) << r.out;
  EXPECT_EQ(lines_starting(r.out, "total:"),
            std::vector<std::string>{"total: " + n + " reproduced, 0 differ, 0 cannot be verified"});
  EXPECT_EQ(r.err, "");

  // The first row's blob becomes the second's, a valid cubin of another
  // kernel, with that blob's own (correct) blob_sha256.
  const CubinRecord &victim = rows[0];
  testing_db::raw_sql(db, "UPDATE cubins SET (blob, blob_sha256, size) = (SELECT blob, "
                          "blob_sha256, size FROM cubins WHERE key = '" + rows[1].key +
                              "') WHERE key = '" + victim.key + "'");
  const std::string named =
      victim.kernel_id + " (key " + victim.key.substr(0, 16) + "): ";
  r = run_cli({"db", "verify", "--db", db});
  EXPECT_EQ(r.code, 1);
  const std::vector<std::string> differs = lines_starting(r.out, "DIFFERS");
  ASSERT_EQ(differs.size(), 1u) << r.out;
  EXPECT_EQ(llvm::StringRef(differs[0]).startswith("DIFFERS        " + named + "section "), true)
      << differs[0];
  const std::string m = std::to_string(rows.size() - 1);
  EXPECT_EQ(r.err, "flashjit: error: db verify: " + m +
                       " reproduced, 1 differ, 0 cannot be verified: a cubin that differs was "
                       "changed after it was compiled, and calls load it until it is replaced "
                       "(db verify --repair)\n");

  // Exported as it is now (signed: this user's own export, as it would be
  // on the machine it was made on), imported where the key is another.
  const std::string file = dir.file("fleet.yaml");
  r = run_cli({"db", "export", "--with-cubins", "--db", db, file});
  ASSERT_EQ(r.code, 0) << r.err;
  {
    testing_db::ScopedEnv elsewhere("FLASHJIT_ORIGIN_KEY", dir.file("elsewhere.key").c_str());
    // The default for a foreign export (--verify, which asks for it
    // whatever the origin, follows).
    for (const char *how : {"--accept-cubins"}) {
      const std::string target = dir.file(std::string("imported") + how + ".db");
      r = run_cli({"db", "import", how, "--db", target, file});
      ASSERT_EQ(r.code, 0) << how << ": " << r.err;
      EXPECT_EQ(lines_starting(r.out, "cubins:"),
                std::vector<std::string>{"cubins: " + m +
                                         " added, 0 replaced (verified by recompiling; 1 refused)"})
          << how << ": " << r.out;
      const std::vector<std::string> refused = lines_starting(r.out, "  cubins[");
      ASSERT_EQ(refused.size(), 1u) << r.out;
      EXPECT_NE(refused[0].find("refused: " + named +
                                "differs from its recompiled program: section "),
                std::string::npos)
          << refused[0];
      auto imported = testing_db::open_ok(target);
      EXPECT_EQ(*imported->count_cubins(), int64_t(rows.size() - 1)) << how;
      EXPECT_FALSE(imported->get_cubin(victim.key)->has_value()) << how;
      EXPECT_TRUE(imported->get_cubin(rows[1].key)->has_value()) << how;
    }
  }
  // Where it was signed it is this user's own export, stored as it comes
  // unless verification is asked for: --verify refuses the row there too.
  r = run_cli({"db", "import", "--accept-cubins", "--db", dir.file("own.db"), file});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(lines_starting(r.out, "cubins:"),
            std::vector<std::string>{"cubins: " + n +
                                     " added, 0 replaced (your own export: not recompiled)"});
  r = run_cli({"db", "import", "--verify", "--db", dir.file("verified.db"), file});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(lines_starting(r.out, "cubins:"),
            std::vector<std::string>{"cubins: " + m +
                                     " added, 0 replaced (verified by recompiling; 1 refused)"})
      << r.out;
  EXPECT_NE(r.out.find("refused: " + named + "differs from its recompiled program"),
            std::string::npos)
      << r.out;
  {
    auto imported = testing_db::open_ok(dir.file("verified.db"));
    EXPECT_EQ(*imported->count_cubins(), int64_t(rows.size() - 1));
    EXPECT_FALSE(imported->get_cubin(victim.key)->has_value());
  }

  r = run_cli({"db", "verify", "--repair", "--db", db});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(lines_starting(r.out, "total:"),
            std::vector<std::string>{"total: " + m +
                                     " reproduced, 1 differ (1 replaced), 0 cannot be verified"});
  r = run_cli({"db", "verify", "--json", "--sample", "1", "--db", db});
  EXPECT_EQ(r.code, 0) << r.err;
  llvm::json::Object o = testing_cli::parse_json(r.out);
  EXPECT_EQ(o.getInteger("checked"), llvm::Optional<int64_t>(1));
  EXPECT_EQ(o.getInteger("stored"), llvm::Optional<int64_t>(int64_t(rows.size())));
  EXPECT_EQ(o.getInteger("reproduced"), llvm::Optional<int64_t>(1));
}

TEST_F(DbVerifyCli, ACubinOfACallersModifiersIsNeverCountedAsVerified) {
  const std::string db = dir.file("mods.db");
  {
    auto opened = testing_db::open_ok(db);
    CubinRecord row = testing_db::cubin("k-mod", 256, nvrtc_);
    row.kernel_id =
        "fwd_sm80_bf16_hdqk64_hdv64_causal_nocap_bm64_bn64_w4_s2_mod0123456789abcdef_sm_80";
    row.arch = "sm_80";
    ASSERT_FALSE(bool(opened->put_cubin(row)));
  }
  CliResult r = run_cli({"db", "verify", "--db", db});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(lines_starting(r.out, "CANNOT VERIFY"),
            std::vector<std::string>{
                "CANNOT VERIFY  "
                "fwd_sm80_bf16_hdqk64_hdv64_causal_nocap_bm64_bn64_w4_s2_mod0123456789abcdef_sm_80 "
                "(key k-mod): it was compiled with a caller's modifiers (mod0123456789abcdef), "
                "whose source the database does not hold"});
  EXPECT_EQ(r.err, "flashjit: error: db verify: 0 reproduced, 0 differ, 1 cannot be verified: a "
                   "cubin that cannot be verified is never counted as verified\n");

  const std::string file = dir.file("mods.yaml");
  ASSERT_EQ(run_cli({"db", "export", "--with-cubins", "--db", db, file}).code, 0);
  r = run_cli({"db", "import", "--verify", "--db", dir.file("target.db"), file});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(lines_starting(r.out, "cubins:"),
            std::vector<std::string>{
                "cubins: 0 added, 0 replaced (verified by recompiling; 1 refused)"});
  const std::vector<std::string> refused = lines_starting(r.out, "  cubins[0]");
  ASSERT_EQ(refused.size(), 1u) << r.out;
  EXPECT_NE(refused[0].find("refused: "
                            "fwd_sm80_bf16_hdqk64_hdv64_causal_nocap_bm64_bn64_w4_s2_"
                            "mod0123456789abcdef_sm_80 (key k-mod): cannot be verified: it was "
                            "compiled with a caller's modifiers"),
            std::string::npos)
      << refused[0];
}

}  // namespace
}  // namespace flashjit
