// Shared by the unit and GPU tests: SQLite's own verdict on a database file
// ("ok" when every page, index and constraint is consistent).
#pragma once

#include <sqlite3.h>

#include <string>

#include "cache/sqlite.h"

namespace flashjit::testing {

inline std::string integrity_check(const std::string &path) {
  auto connection = sqlite::Connection::open(path, SQLITE_OPEN_READONLY, 5000);
  if (!connection) return "cannot open: " + llvm::toString(connection.takeError());
  auto verdict = connection->query_text("PRAGMA integrity_check");
  if (!verdict) return "cannot check: " + llvm::toString(verdict.takeError());
  return *verdict;
}

}  // namespace flashjit::testing
