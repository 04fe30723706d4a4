// Whether the cubins of a database may be loaded into this process. Every
// cubin is code that runs with the caller's privileges on the caller's
// tensors, so the database is trusted only as far as the people who can
// write it: its file, its SQLite companions (-wal, -shm, -journal) and its
// folder must be owned by this user or root and writable by no one else,
// as ssh asks of a key and pip of its cache. A database shared with a group
// is trusted only when asked (FLASHJIT_DB_TRUST=group). An untrusted
// database still serves tunings (data, validated before use); its cubins
// are compiled instead of loaded.
//
// The decision is a pure function of the files' owners and modes, so that
// every case (root-owned system files, other users' files) is testable
// without being root; gather_trust_facts reads them from the file system.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

namespace flashjit {

// Who besides this user (and root) may write a database whose cubins are
// loaded: no one, or the members of the groups this user belongs to.
enum class TrustScope { owner, group };
const char *to_string(TrustScope scope);  // "owner" | "group"
// "owner" | "group" (FLASHJIT_DB_TRUST's and --db-trust's values).
llvm::Expected<TrustScope> parse_trust_scope(llvm::StringRef text);
// $FLASHJIT_DB_TRUST, owner when unset. A value that is neither is an
// error: it must not widen the trust by accident, nor be ignored.
llvm::Expected<TrustScope> trust_scope_from_environment();

// One path as stat(2) describes it.
struct FileFacts {
  std::string path;
  bool exists = false;
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint32_t mode = 0;  // st_mode: the type and the permission bits
  // Its group has this user as its only member (a user private group, as
  // Debian and Ubuntu give every user): group write then adds no writer.
  bool private_group = false;
  std::string owner_name;  // for messages; "" when unknown
};

struct TrustFacts {
  FileFacts file;                     // the database, symbolic links resolved
  std::vector<FileFacts> companions;  // -wal, -shm, -journal beside it
  FileFacts directory;                // the folder that holds it
  uint32_t uid = 0;                   // this process's effective user
  std::vector<uint32_t> groups;       // its effective and supplementary groups
  TrustScope scope = TrustScope::owner;
};

struct DbTrust {
  bool trusted = true;
  TrustScope scope = TrustScope::owner;
  // Each path that fails, and why, e.g. "the folder /srv/db is writable by
  // others (mode 0777)".
  std::vector<std::string> problems;
  // What makes it trusted, e.g. "chmod go-w /srv/db".
  std::vector<std::string> fixes;
  // "trusted (only you and root can write it)", or "untrusted: ..." with
  // the problems and fixes: what `flashjit info` and `query` print.
  std::string state() const;
  // The one message an untrusted database is reported with: the path, the
  // problems, what flashjit does instead, and the fixes.
  std::string warning(llvm::StringRef database) const;
};

DbTrust decide_db_trust(const TrustFacts &facts);

// The facts of the database at `path` (":memory:" and "" have none: trusted).
TrustFacts gather_trust_facts(llvm::StringRef path, TrustScope scope);

// gather + decide, with the scope of $FLASHJIT_DB_TRUST (a bad value is an
// untrusted verdict that says so).
DbTrust check_db_trust(llvm::StringRef path);

}  // namespace flashjit
