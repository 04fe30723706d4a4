// The database's schema and its migrations. A database records which
// application made it and its schema version in `meta`; opening refuses
// anything else before writing a byte, and migrates older versions forward
// one step at a time inside a single write transaction.
#pragma once

#include "cache/sqlite.h"
#include "llvm/ADT/ArrayRef.h"

namespace flashjit::schema {

// Takes a database from version `to_version - 1` to `to_version`. Steps are
// applied in order; version 2 is one more entry in migrations().
struct Migration {
  int to_version;
  const char *sql;
};

// The real steps; their last to_version is TuningDb::kSchemaVersion.
llvm::ArrayRef<Migration> migrations();

// Reads, writing nothing: 0 for an empty database (no tables), else the
// flashjit schema version. A file that is not SQLite, an SQLite database of
// another application, or a version newer than `newest` is an error.
llvm::Expected<int> inspect(sqlite::Connection &db, int newest);

// Brings the database to the last step's version in one BEGIN IMMEDIATE
// transaction, re-inspecting under the write lock (another process may have
// created or migrated it since). Returns the version it found.
llvm::Expected<int> migrate(sqlite::Connection &db, llvm::ArrayRef<Migration> steps);

}  // namespace flashjit::schema
