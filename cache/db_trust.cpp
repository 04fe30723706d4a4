#include "cache/db_trust.h"

#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"

namespace flashjit {

namespace {

llvm::Error trust_error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

std::string octal_mode(uint32_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", mode & 07777);
  return text;
}

std::string user_name(uid_t uid) {
  struct passwd entry, *found = nullptr;
  char buffer[4096];
  if (getpwuid_r(uid, &entry, buffer, sizeof buffer, &found) != 0 || !found) return {};
  return found->pw_name;
}

// A user private group (Debian's and Ubuntu's convention, where the default
// umask 002 makes every file group-writable): the group named as the user,
// the user's primary group, with no other member listed. Whether another
// account has it as its primary group would take enumerating every account
// (slow or impossible under LDAP), which this does not do.
bool is_private_group(gid_t gid, uid_t uid) {
  struct passwd user, *found_user = nullptr;
  char user_buffer[4096];
  if (getpwuid_r(uid, &user, user_buffer, sizeof user_buffer, &found_user) != 0 || !found_user)
    return false;
  if (found_user->pw_gid != gid) return false;
  struct group group, *found_group = nullptr;
  char group_buffer[16384];
  if (getgrgid_r(gid, &group, group_buffer, sizeof group_buffer, &found_group) != 0 ||
      !found_group)
    return false;
  if (std::strcmp(found_group->gr_name, found_user->pw_name) != 0) return false;
  for (char **member = found_group->gr_mem; member && *member; ++member)
    if (std::strcmp(*member, found_user->pw_name) != 0) return false;
  return true;
}

FileFacts stat_facts(const std::string &path, uid_t uid) {
  FileFacts facts;
  facts.path = path;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return facts;
  facts.exists = true;
  facts.uid = st.st_uid;
  facts.gid = st.st_gid;
  facts.mode = st.st_mode;
  // Only a group-writable path needs its group looked up.
  if (st.st_mode & S_IWGRP) facts.private_group = is_private_group(st.st_gid, uid);
  facts.owner_name = user_name(st.st_uid);
  return facts;
}

std::string owner_text(const FileFacts &f) {
  return f.owner_name.empty() ? llvm::formatv("uid {0}", f.uid).str()
                              : llvm::formatv("uid {0} ({1})", f.uid, f.owner_name).str();
}

void add_once(std::vector<std::string> &list, std::string item) {
  if (!llvm::is_contained(list, item)) list.push_back(std::move(item));
}

}  // namespace

const char *to_string(TrustScope scope) {
  return scope == TrustScope::group ? "group" : "owner";
}

llvm::Expected<TrustScope> parse_trust_scope(llvm::StringRef text) {
  const llvm::StringRef value = text.trim();
  if (value.equals_insensitive("owner")) return TrustScope::owner;
  if (value.equals_insensitive("group")) return TrustScope::group;
  return trust_error(llvm::formatv("expected owner or group, got '{0}'", value));
}

llvm::Expected<TrustScope> trust_scope_from_environment() {
  const char *env = std::getenv("FLASHJIT_DB_TRUST");
  if (!env || !*env) return TrustScope::owner;
  auto scope = parse_trust_scope(env);
  if (!scope) return trust_error("FLASHJIT_DB_TRUST: " + llvm::toString(scope.takeError()));
  return scope;
}

DbTrust decide_db_trust(const TrustFacts &facts) {
  DbTrust out;
  out.scope = facts.scope;
  if (!facts.file.exists) return out;  // nothing on disk to load from
  const bool group_scope = facts.scope == TrustScope::group;
  auto in_groups = [&](uint32_t gid) { return llvm::is_contained(facts.groups, gid); };
  // chmod removes write for whoever the scope does not trust.
  const char *strip = group_scope ? "o-w" : "go-w";

  auto check = [&](const FileFacts &f, llvm::StringRef what) {
    if (!f.exists) return;
    const std::string name = (what + " " + f.path).str();
    const uint32_t perm = f.mode & 07777;
    const bool directory = S_ISDIR(f.mode);

    // Its owner can always make it writable again: only this user and root
    // may own it, or, trusting the group, a member of one of its groups.
    const bool owner_ok =
        f.uid == facts.uid || f.uid == 0 || (group_scope && in_groups(f.gid));
    if (!owner_ok) {
      add_once(out.problems, llvm::formatv("{0} belongs to {1}, not to you (uid {2}) or root", name,
                                           owner_text(f), facts.uid));
      add_once(out.fixes, "point FLASHJIT_DB (or --db) at a database of your own");
    }
    if (perm & S_IWOTH) {
      if (directory && (perm & S_ISVTX)) {
        // ssh's rule for key folders, and for a reason of SQLite's own:
        // the sticky bit stops others from replacing the database, not from
        // creating its -wal or -journal before the first process does, and
        // SQLite merges such a file into the database when it opens it
        // (WAL recovery, hot-journal rollback), after which the database
        // itself looks clean.
        add_once(out.problems,
                 llvm::formatv("{0} is writable by everyone (mode {1}; the sticky bit does not "
                               "stop others from creating the database's -wal or -journal "
                               "first, which SQLite merges into it)",
                               name, octal_mode(perm)));
        add_once(out.fixes, "keep the database in a folder only you can write (the default is "
                            "$XDG_CACHE_HOME/flashjit or ~/.cache/flashjit)");
      } else {
        add_once(out.problems,
                 llvm::formatv("{0} is writable by everyone (mode {1})", name, octal_mode(perm)));
        add_once(out.fixes, llvm::formatv("chmod {0} {1}", strip, f.path));
      }
    } else if (perm & S_IWGRP) {
      if (group_scope && !in_groups(f.gid)) {
        add_once(out.problems,
                 llvm::formatv("{0} is writable by its group (gid {1}, mode {2}), which is not one "
                               "of yours",
                               name, f.gid, octal_mode(perm)));
        add_once(out.fixes, llvm::formatv("chmod g-w {0}", f.path));
      } else if (!group_scope && !f.private_group) {
        add_once(out.problems, llvm::formatv("{0} is writable by its group (gid {1}, mode {2})",
                                             name, f.gid, octal_mode(perm)));
        add_once(out.fixes, llvm::formatv("chmod {0} {1}", strip, f.path));
        if (in_groups(f.gid))
          add_once(out.fixes, "or share it with your group deliberately: FLASHJIT_DB_TRUST=group "
                              "(flashjit --db-trust=group)");
      }
    }
  };
  check(facts.file, "the file");
  for (const FileFacts &companion : facts.companions) check(companion, "the file");
  check(facts.directory, "the folder");
  out.trusted = out.problems.empty();
  // The alternative comes last, after the fixes of the paths themselves.
  auto alternative = llvm::find_if(out.fixes, [](const std::string &fix) {
    return llvm::StringRef(fix).startswith("or share");
  });
  if (alternative != out.fixes.end()) std::rotate(alternative, alternative + 1, out.fixes.end());
  return out;
}

std::string DbTrust::state() const {
  if (trusted)
    return scope == TrustScope::group
               ? "trusted (only you, root and your groups can write it: FLASHJIT_DB_TRUST=group)"
               : "trusted (only you and root can write it)";
  return llvm::formatv("untrusted: {0}: its cubins are compiled, not loaded (fix: {1})",
                       llvm::join(problems, "; "), llvm::join(fixes, "; "))
      .str();
}

std::string DbTrust::warning(llvm::StringRef database) const {
  return llvm::formatv("not loading cubins from the tuning database {0}: {1}. Whoever can write "
                       "it could run code in this process, so kernels are compiled instead. "
                       "Fix: {2}",
                       database, llvm::join(problems, "; "), llvm::join(fixes, "; "))
      .str();
}

TrustFacts gather_trust_facts(llvm::StringRef path, TrustScope scope) {
  TrustFacts facts;
  facts.scope = scope;
  facts.uid = geteuid();
  facts.groups.push_back(getegid());
  if (int n = getgroups(0, nullptr); n > 0) {
    std::vector<gid_t> groups(static_cast<size_t>(n));
    n = getgroups(n, groups.data());
    for (int i = 0; i < n; ++i) facts.groups.push_back(groups[static_cast<size_t>(i)]);
  }
  if (path.empty() || path == ":memory:") return facts;

  // SQLite resolves symbolic links and keeps its companions beside the real
  // file: the facts are those of the files it opens.
  llvm::SmallString<256> real;
  if (llvm::sys::fs::real_path(path, real)) real = path;
  facts.file = stat_facts(std::string(real), facts.uid);
  for (const char *suffix : {"-wal", "-shm", "-journal"}) {
    FileFacts companion = stat_facts(std::string(real) + suffix, facts.uid);
    if (companion.exists) facts.companions.push_back(std::move(companion));
  }
  llvm::StringRef folder = llvm::sys::path::parent_path(real);
  facts.directory = stat_facts(folder.empty() ? std::string(".") : folder.str(), facts.uid);
  return facts;
}

DbTrust check_db_trust(llvm::StringRef path) {
  auto scope = trust_scope_from_environment();
  if (!scope) {
    DbTrust out;
    out.trusted = false;
    out.problems.push_back(llvm::toString(scope.takeError()));
    out.fixes.push_back("set FLASHJIT_DB_TRUST to owner (the default) or group");
    return out;
  }
  return decide_db_trust(gather_trust_facts(path, *scope));
}

}  // namespace flashjit
