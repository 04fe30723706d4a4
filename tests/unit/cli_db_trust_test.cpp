// What `flashjit info` and `query` say of a database's trust (whether a
// call would load its cubins), and the --db-trust flag.
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "cache/tuning_db.h"
#include "cli_files.h"
#include "cli_runner.h"
#include "gtest/gtest.h"

namespace flashjit {
namespace {

using namespace testing_cli;

// A database in its own folder, which each test opens up or closes down.
struct Database {
  TempDir dir;
  std::string folder = std::string(dir.path);
  std::string path = dir.file("f.db");
  Database() {
    auto db = TuningDb::open(path);
    EXPECT_TRUE(bool(db)) << llvm::toString(db.takeError());
  }
};

std::string line_starting(const std::string &text, llvm::StringRef prefix) {
  llvm::SmallVector<llvm::StringRef, 16> lines;
  llvm::StringRef(text).split(lines, '\n');
  for (llvm::StringRef line : lines)
    if (line.startswith(prefix)) return line.str();
  return "";
}

TEST(CliDbTrust, InfoAndQueryShowWhetherCubinsWouldBeLoaded) {
  Database db;
  CliResult r = run_cli({"info", "--db", db.path});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(line_starting(r.out, "Database trust:"),
            "Database trust: trusted (only you and root can write it)");
  r = run_cli({"query", "--hdim", "64", "--arch", "sm_80", "--db", db.path});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(line_starting(r.out, "database "),
            "database   " + db.path + ": trusted (only you and root can write it)");

  ASSERT_EQ(::chmod(db.folder.c_str(), 0777), 0);
  const std::string untrusted = "untrusted: the folder " + db.folder +
                                " is writable by everyone (mode 0777): its cubins are compiled, "
                                "not loaded (fix: chmod go-w " + db.folder + ")";
  r = run_cli({"info", "--db", db.path});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(line_starting(r.out, "Database trust:"), "Database trust: " + untrusted);
  r = run_cli({"info", "--json", "--db", db.path});
  ASSERT_EQ(r.code, 0) << r.err;
  llvm::json::Object info = parse_json(r.out);
  EXPECT_EQ(info.getBoolean("database_trusted"), llvm::Optional<bool>(false));
  EXPECT_EQ(S(info.getString("database_trust")), untrusted);
  r = run_cli({"query", "--json", "--hdim", "64", "--arch", "sm_80", "--db", db.path});
  ASSERT_EQ(r.code, 0) << r.err;
  llvm::json::Object query = parse_json(r.out);
  const llvm::json::Object *trust = query.getObject("database_trust");
  ASSERT_TRUE(trust);
  EXPECT_EQ(trust->getBoolean("trusted"), llvm::Optional<bool>(false));
  EXPECT_EQ(S(trust->getString("state")), untrusted);
  ::chmod(db.folder.c_str(), 0700);
}

TEST(CliDbTrust, TheGroupOptInIsAFlagToo) {
  Database db;
  ASSERT_EQ(::chown(db.folder.c_str(), -1, getegid()), 0);
  ASSERT_EQ(::chmod(db.folder.c_str(), 0770), 0);
  CliResult r = run_cli({"info", "--db-trust=group", "--db", db.path});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(line_starting(r.out, "Database trust:"),
            "Database trust: trusted (only you, root and your groups can write it: "
            "FLASHJIT_DB_TRUST=group)");

  r = run_cli({"info", "--db-trust=everyone", "--db", db.path});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "flashjit: error: --db-trust: expected owner or group, got 'everyone'\n");
  EXPECT_EQ(r.out, "");
  ::chmod(db.folder.c_str(), 0700);
}

}  // namespace
}  // namespace flashjit
