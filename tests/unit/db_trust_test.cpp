// Whose databases flashjit loads cubins from (cache/db_trust.h): the
// decision over injected owners and modes (every case, as root or not),
// then real files whose modes the running user can set, and, as root only,
// files of another owner.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "cache/db_trust.h"
#include "cache/tuning_db.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "tuning_db_test_util.h"

namespace flashjit {
namespace {

using namespace testing_db;

constexpr uint32_t kMe = 1000;
constexpr uint32_t kOther = 1001;
constexpr uint32_t kMyGroup = 1000;
constexpr uint32_t kTeam = 50;
constexpr uint32_t kStrangers = 77;

FileFacts file(const std::string &path, uint32_t uid, uint32_t gid, uint32_t permissions) {
  FileFacts f;
  f.path = path;
  f.exists = true;
  f.uid = uid;
  f.gid = gid;
  f.mode = S_IFREG | permissions;
  return f;
}

FileFacts folder(const std::string &path, uint32_t uid, uint32_t gid, uint32_t permissions) {
  FileFacts f = file(path, uid, gid, permissions);
  f.mode = S_IFDIR | permissions;
  return f;
}

// This user's database as flashjit makes it: 0644 in a 0755 folder, with
// the companions SQLite creates beside it in the file's mode.
TrustFacts own_database() {
  TrustFacts t;
  t.uid = kMe;
  t.groups = {kMyGroup, kTeam};
  t.file = file("/home/me/db/f.db", kMe, kMyGroup, 0644);
  t.companions = {file("/home/me/db/f.db-wal", kMe, kMyGroup, 0644),
                  file("/home/me/db/f.db-shm", kMe, kMyGroup, 0644)};
  t.directory = folder("/home/me/db", kMe, kMyGroup, 0755);
  return t;
}

std::string joined_problems(const DbTrust &trust) { return llvm::join(trust.problems, " | "); }
std::string joined_fixes(const DbTrust &trust) { return llvm::join(trust.fixes, " | "); }

TEST(DbTrust, DecidesFromOwnersAndModes) {
  struct Case {
    const char *what;
    std::function<void(TrustFacts &)> edit;
    bool trusted;
    std::string problems;  // joined with " | "
    std::string fixes;     // joined with " | " ("" when trusted)
  };
  const std::string group_fix =
      "or share it with your group deliberately: FLASHJIT_DB_TRUST=group (flashjit "
      "--db-trust=group)";
  const Case cases[] = {
      {"this user's own database", [](TrustFacts &) {}, true, "", ""},
      {"not created yet", [](TrustFacts &t) { t.file.exists = false; }, true, "", ""},
      {"a world-writable file",
       [](TrustFacts &t) { t.file.mode = S_IFREG | 0666; }, false,
       "the file /home/me/db/f.db is writable by everyone (mode 0666)",
       "chmod go-w /home/me/db/f.db"},
      {"a group-writable file",
       [](TrustFacts &t) {
         t.file.mode = S_IFREG | 0664;
         t.file.gid = kTeam;
       },
       false, "the file /home/me/db/f.db is writable by its group (gid 50, mode 0664)",
       "chmod go-w /home/me/db/f.db | " + group_fix},
      {"a group-writable file of a user private group (umask 002)",
       [](TrustFacts &t) {
         t.file.mode = S_IFREG | 0664;
         t.file.private_group = true;
         t.directory.mode = S_IFDIR | 0775;
         t.directory.private_group = true;
       },
       true, "", ""},
      {"a world-writable -wal",
       [](TrustFacts &t) { t.companions[0].mode = S_IFREG | 0666; }, false,
       "the file /home/me/db/f.db-wal is writable by everyone (mode 0666)",
       "chmod go-w /home/me/db/f.db-wal"},
      {"a -shm of another user",
       [](TrustFacts &t) {
         t.companions[1].uid = kOther;
         t.companions[1].owner_name = "mallory";
       },
       false, "the file /home/me/db/f.db-shm belongs to uid 1001 (mallory), not to you (uid 1000) or root",
       "point FLASHJIT_DB (or --db) at a database of your own"},
      {"a -journal someone planted",
       [](TrustFacts &t) { t.companions.push_back(file("/home/me/db/f.db-journal", kOther, kOther, 0666)); },
       false,
       "the file /home/me/db/f.db-journal belongs to uid 1001, not to you (uid 1000) or root | "
       "the file /home/me/db/f.db-journal is writable by everyone (mode 0666)",
       "point FLASHJIT_DB (or --db) at a database of your own | chmod go-w /home/me/db/f.db-journal"},
      {"a world-writable folder", [](TrustFacts &t) { t.directory.mode = S_IFDIR | 0777; }, false,
       "the folder /home/me/db is writable by everyone (mode 0777)", "chmod go-w /home/me/db"},
      {"a sticky world-writable folder of root's (/tmp)",
       [](TrustFacts &t) { t.directory = folder("/tmp", 0, 0, 01777); }, false,
       "the folder /tmp is writable by everyone (mode 1777; the sticky bit does not stop others "
       "from creating the database's -wal or -journal first, which SQLite merges into it)",
       "keep the database in a folder only you can write (the default is "
       "$XDG_CACHE_HOME/flashjit or ~/.cache/flashjit)"},
      {"a file of another user, read-only",
       [](TrustFacts &t) { t.file.uid = kOther; }, false,
       "the file /home/me/db/f.db belongs to uid 1001, not to you (uid 1000) or root",
       "point FLASHJIT_DB (or --db) at a database of your own"},
      {"a folder of another user", [](TrustFacts &t) { t.directory.uid = kOther; }, false,
       "the folder /home/me/db belongs to uid 1001, not to you (uid 1000) or root",
       "point FLASHJIT_DB (or --db) at a database of your own"},
      {"root's read-only system database",
       [](TrustFacts &t) {
         t.file = file("/usr/share/flashjit/h100.db", 0, 0, 0444);
         t.companions.clear();
         t.directory = folder("/usr/share/flashjit", 0, 0, 0755);
       },
       true, "", ""},
      {"root's system database writable by root's group",
       [](TrustFacts &t) {
         t.file = file("/usr/share/flashjit/h100.db", 0, 0, 0664);
         t.companions.clear();
         t.directory = folder("/usr/share/flashjit", 0, 0, 0755);
       },
       false, "the file /usr/share/flashjit/h100.db is writable by its group (gid 0, mode 0664)",
       "chmod go-w /usr/share/flashjit/h100.db"},
      {"root running another user's database",
       [](TrustFacts &t) {
         t.uid = 0;
         t.groups = {0};
       },
       false,
       "the file /home/me/db/f.db belongs to uid 1000, not to you (uid 0) or root | the file "
       "/home/me/db/f.db-wal belongs to uid 1000, not to you (uid 0) or root | the file "
       "/home/me/db/f.db-shm belongs to uid 1000, not to you (uid 0) or root | the folder "
       "/home/me/db belongs to uid 1000, not to you (uid 0) or root",
       "point FLASHJIT_DB (or --db) at a database of your own"},
      // FLASHJIT_DB_TRUST=group: a team's database, written by its members.
      {"group trust: a team folder and file written by another member",
       [](TrustFacts &t) {
         t.scope = TrustScope::group;
         t.file = file("/srv/team/f.db", kOther, kTeam, 0664);
         t.companions = {file("/srv/team/f.db-wal", kOther, kTeam, 0664)};
         t.directory = folder("/srv/team", kOther, kTeam, 02775);
       },
       true, "", ""},
      {"group trust: a group this user is not in",
       [](TrustFacts &t) {
         t.scope = TrustScope::group;
         t.file.mode = S_IFREG | 0664;
         t.file.gid = kStrangers;
       },
       false,
       "the file /home/me/db/f.db is writable by its group (gid 77, mode 0664), which is not one "
       "of yours",
       "chmod g-w /home/me/db/f.db"},
      {"group trust: a file of a stranger in a group this user is not in",
       [](TrustFacts &t) {
         t.scope = TrustScope::group;
         t.file = file("/home/me/db/f.db", kOther, kStrangers, 0644);
       },
       false, "the file /home/me/db/f.db belongs to uid 1001, not to you (uid 1000) or root",
       "point FLASHJIT_DB (or --db) at a database of your own"},
      {"group trust never covers everyone",
       [](TrustFacts &t) {
         t.scope = TrustScope::group;
         t.directory.mode = S_IFDIR | 0777;
       },
       false, "the folder /home/me/db is writable by everyone (mode 0777)",
       "chmod o-w /home/me/db"},
  };
  for (const Case &c : cases) {
    TrustFacts facts = own_database();
    c.edit(facts);
    const DbTrust trust = decide_db_trust(facts);
    EXPECT_EQ(trust.trusted, c.trusted) << c.what;
    EXPECT_EQ(joined_problems(trust), c.problems) << c.what;
    EXPECT_EQ(joined_fixes(trust), c.fixes) << c.what;
  }
}

TEST(DbTrust, SaysWhatItDoesAndHowToFixIt) {
  TrustFacts facts = own_database();
  facts.directory.mode = S_IFDIR | 0777;
  const DbTrust trust = decide_db_trust(facts);
  EXPECT_EQ(trust.warning("/home/me/db/f.db"),
            "not loading cubins from the tuning database /home/me/db/f.db: the folder /home/me/db "
            "is writable by everyone (mode 0777). Whoever can write it could run code in this "
            "process, so kernels are compiled instead. Fix: chmod go-w /home/me/db");
  EXPECT_EQ(trust.state(),
            "untrusted: the folder /home/me/db is writable by everyone (mode 0777): its cubins "
            "are compiled, not loaded (fix: chmod go-w /home/me/db)");
  EXPECT_EQ(decide_db_trust(own_database()).state(), "trusted (only you and root can write it)");
  TrustFacts group = own_database();
  group.scope = TrustScope::group;
  EXPECT_EQ(decide_db_trust(group).state(),
            "trusted (only you, root and your groups can write it: FLASHJIT_DB_TRUST=group)");
}

TEST(DbTrust, ParsesTheScope) {
  EXPECT_EQ(*parse_trust_scope("owner"), TrustScope::owner);
  EXPECT_EQ(*parse_trust_scope(" Group "), TrustScope::group);
  auto bad = parse_trust_scope("everyone");
  ASSERT_FALSE(bool(bad));
  EXPECT_EQ(llvm::toString(bad.takeError()), "expected owner or group, got 'everyone'");
}

// A database in a folder only the running user can write (as TempDir makes
// it, whatever the umask), with its companions present.
struct RealDatabase {
  TempDir dir;
  std::string path = dir.file("real.db");
  std::unique_ptr<TuningDb> db;
  RealDatabase() {
    ::chmod(dir.file(".").c_str(), 0700);
    db = open_ok(path);
  }
};

TEST(DbTrust, RealFilesAreJudgedByTheirModes) {
  ScopedEnv scope("FLASHJIT_DB_TRUST", nullptr);
  RealDatabase real;
  ASSERT_TRUE(real.db);
  ASSERT_TRUE(llvm::sys::fs::exists(real.path + "-wal"));
  ASSERT_TRUE(llvm::sys::fs::exists(real.path + "-shm"));
  EXPECT_TRUE(check_db_trust(real.path).trusted) << check_db_trust(real.path).state();
  EXPECT_TRUE(real.db->cubin_trust().trusted);

  auto expect_untrusted = [&](const std::string &path, const std::string &problem) {
    const DbTrust trust = check_db_trust(real.path);
    EXPECT_FALSE(trust.trusted) << path;
    ASSERT_EQ(trust.problems.size(), 1u) << trust.state();
    EXPECT_EQ(trust.problems[0], problem);
  };
  const std::string folder = std::string(llvm::StringRef(real.path).rsplit('/').first);
  ::chmod(real.path.c_str(), 0666);
  expect_untrusted(real.path, "the file " + real.path + " is writable by everyone (mode 0666)");
  ::chmod(real.path.c_str(), 0644);
  ::chmod((real.path + "-wal").c_str(), 0646);
  expect_untrusted(real.path + "-wal",
                   "the file " + real.path + "-wal is writable by everyone (mode 0646)");
  ::chmod((real.path + "-wal").c_str(), 0644);
  ::chmod((real.path + "-shm").c_str(), 0666);
  expect_untrusted(real.path + "-shm",
                   "the file " + real.path + "-shm is writable by everyone (mode 0666)");
  ::chmod((real.path + "-shm").c_str(), 0644);
  ::chmod(folder.c_str(), 0777);
  expect_untrusted(folder, "the folder " + folder + " is writable by everyone (mode 0777)");
  ::chmod(folder.c_str(), 01777);
  expect_untrusted(folder, "the folder " + folder +
                               " is writable by everyone (mode 1777; the sticky bit does not "
                               "stop others from creating the database's -wal or -journal "
                               "first, which SQLite merges into it)");
  ::chmod(folder.c_str(), 0700);
  EXPECT_TRUE(check_db_trust(real.path).trusted);

  // The verdict of an open TuningDb is its first one: decided once, before
  // its first cubin, as the process database's is.
  ::chmod(real.path.c_str(), 0666);
  EXPECT_TRUE(real.db->cubin_trust().trusted);
  auto reopened = open_ok(real.path);
  EXPECT_FALSE(reopened->cubin_trust().trusted);
  std::string refused;
  ASSERT_FALSE(bool(reopened->put_cubin(cubin("k1", 64))));
  auto row = reopened->get_cubin("k1", &refused);
  ASSERT_TRUE(bool(row)) << llvm::toString(row.takeError());
  EXPECT_FALSE(row->has_value()) << "an untrusted database serves no cubin";
  EXPECT_EQ(refused, reopened->cubin_trust().warning(real.path));
  EXPECT_EQ(reopened->refused_cubins(), 0) << "not a corrupted row";
  ::chmod(real.path.c_str(), 0644);
}

TEST(DbTrust, GroupTrustIsAnOptIn) {
  RealDatabase real;
  ASSERT_TRUE(real.db);
  // Group-writable by this process's own group (a team's share).
  ::chown(real.path.c_str(), -1, getegid());
  ::chmod(real.path.c_str(), 0664);
  {
    ScopedEnv scope("FLASHJIT_DB_TRUST", nullptr);
    const DbTrust trust = check_db_trust(real.path);
    // A user private group needs no opt-in; any other group does.
    const bool private_group = gather_trust_facts(real.path, TrustScope::owner).file.private_group;
    EXPECT_EQ(trust.trusted, private_group) << trust.state();
  }
  {
    ScopedEnv scope("FLASHJIT_DB_TRUST", "group");
    EXPECT_TRUE(check_db_trust(real.path).trusted) << check_db_trust(real.path).state();
    auto opened = open_ok(real.path);
    EXPECT_TRUE(opened->cubin_trust().trusted);
    EXPECT_EQ(opened->cubin_trust().scope, TrustScope::group);
  }
  {
    // Never everyone.
    ScopedEnv scope("FLASHJIT_DB_TRUST", "group");
    ::chmod(real.path.c_str(), 0666);
    EXPECT_FALSE(check_db_trust(real.path).trusted);
  }
  {
    // A typo does not widen the trust, nor pass unnoticed.
    ScopedEnv scope("FLASHJIT_DB_TRUST", "grop");
    ::chmod(real.path.c_str(), 0644);
    const DbTrust trust = check_db_trust(real.path);
    EXPECT_FALSE(trust.trusted);
    EXPECT_EQ(trust.state(),
              "untrusted: FLASHJIT_DB_TRUST: expected owner or group, got 'grop': its cubins are "
              "compiled, not loaded (fix: set FLASHJIT_DB_TRUST to owner (the default) or group)");
  }
}

TEST(DbTrust, ALinkIsJudgedByTheDatabaseItPointsTo) {
  ScopedEnv scope("FLASHJIT_DB_TRUST", nullptr);
  RealDatabase real;
  ASSERT_TRUE(real.db);
  TempDir other;
  ::chmod(other.file(".").c_str(), 0700);
  const std::string link = other.file("link.db");
  ASSERT_FALSE(llvm::sys::fs::create_link(real.path, link));
  EXPECT_TRUE(check_db_trust(link).trusted);
  const std::string folder = std::string(llvm::StringRef(real.path).rsplit('/').first);
  ::chmod(folder.c_str(), 0777);
  const DbTrust trust = check_db_trust(link);
  EXPECT_FALSE(trust.trusted);
  ASSERT_EQ(trust.problems.size(), 1u);
  EXPECT_EQ(trust.problems[0], "the folder " + folder + " is writable by everyone (mode 0777)");
  ::chmod(folder.c_str(), 0700);
}

TEST(DbTrust, InMemoryDatabasesHaveNoFilesToDistrust) {
  EXPECT_TRUE(check_db_trust(":memory:").trusted);
  auto db = open_ok(":memory:");
  EXPECT_TRUE(db->cubin_trust().trusted);
}

TEST(DbTrust, FoldersFlashjitCreatesAreWritableByTheirOwnerOnly) {
  TempDir dir;
  const mode_t old_umask = ::umask(002);  // Debian's for users with private groups
  auto db = open_ok(dir.file("new/folder/f.db"));
  ::umask(old_umask);
  ASSERT_TRUE(db);
  struct stat st;
  ASSERT_EQ(::stat(dir.file("new/folder").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  ASSERT_EQ(::stat(dir.file("new").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
}

// Only root can give a file to someone else: the real-file cases of other
// owners (the decision's own cases above run for everyone).
TEST(DbTrust, AsRootFilesOfOtherUsersAreNotLoadedAndRootsOwnAre) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to chown (the decision cases cover it)";
  ScopedEnv scope("FLASHJIT_DB_TRUST", nullptr);
  RealDatabase real;
  ASSERT_TRUE(real.db);
  // Root's own read-only database in a read-only folder: a system install.
  const std::string folder = std::string(llvm::StringRef(real.path).rsplit('/').first);
  ::chmod(real.path.c_str(), 0444);
  ::chmod(folder.c_str(), 0555);
  EXPECT_TRUE(check_db_trust(real.path).trusted) << check_db_trust(real.path).state();
  ::chmod(folder.c_str(), 0700);
  ::chmod(real.path.c_str(), 0644);

  ASSERT_EQ(::chown((real.path + "-wal").c_str(), 4242, 4242), 0);
  DbTrust trust = check_db_trust(real.path);
  EXPECT_FALSE(trust.trusted);
  ASSERT_EQ(trust.problems.size(), 1u) << trust.state();
  EXPECT_EQ(llvm::StringRef(trust.problems[0]).startswith("the file " + real.path +
                                                          "-wal belongs to uid 4242"),
            true)
      << trust.problems[0];
  ASSERT_EQ(::chown((real.path + "-wal").c_str(), 0, 0), 0);
  ASSERT_EQ(::chown(folder.c_str(), 4242, 4242), 0);
  trust = check_db_trust(real.path);
  EXPECT_FALSE(trust.trusted);
  ASSERT_EQ(trust.problems.size(), 1u) << trust.state();
  EXPECT_EQ(llvm::StringRef(trust.problems[0]).startswith("the folder " + folder +
                                                          " belongs to uid 4242"),
            true)
      << trust.problems[0];
  ASSERT_EQ(::chown(folder.c_str(), 0, 0), 0);
}

}  // namespace
}  // namespace flashjit
