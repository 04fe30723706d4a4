// Thin RAII over SQLite's C API: a connection, prepared statements and a
// write transaction. Every failure becomes an llvm::Error that names the
// database file, the statement and sqlite3_errmsg, so a "database is locked"
// or "disk I/O error" says where it came from.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

struct sqlite3;
struct sqlite3_stmt;

namespace flashjit::sqlite {

class Statement;

class Connection {
 public:
  // `flags` are SQLITE_OPEN_*; the busy timeout applies to every lock wait.
  static llvm::Expected<Connection> open(llvm::StringRef path, int flags, int busy_timeout_ms);

  Connection() = default;
  Connection(Connection &&other) noexcept;
  Connection &operator=(Connection &&other) noexcept;
  Connection(const Connection &) = delete;
  Connection &operator=(const Connection &) = delete;
  ~Connection();

  sqlite3 *get() const { return db_; }
  const std::string &path() const { return path_; }

  llvm::Expected<Statement> prepare(llvm::StringRef sql);
  // Runs one or more statements that return no rows we need, retrying while
  // another connection holds a lock that the busy handler gave up on.
  llvm::Error exec(llvm::StringRef sql);
  // The first column of the first row of `sql` as text (PRAGMAs).
  llvm::Expected<std::string> query_text(llvm::StringRef sql);

  // The extended result code of the connection's last failure.
  int last_error_code() const;
  // "<file>: <what>: <errmsg> (code N)" from the connection's last error.
  llvm::Error error(llvm::StringRef what, int rc) const;

 private:
  sqlite3 *db_ = nullptr;
  std::string path_;
};

class Statement {
 public:
  Statement() = default;
  Statement(Statement &&other) noexcept;
  Statement &operator=(Statement &&other) noexcept;
  Statement(const Statement &) = delete;
  Statement &operator=(const Statement &) = delete;
  ~Statement();

  // Parameters are 1-based, as in SQL's ?N. A failing bind is remembered and
  // reported by the next step(), so call sites stay a flat list of binds.
  void bind_int(int index, int64_t value);
  void bind_double(int index, double value);
  void bind_text(int index, llvm::StringRef value);
  void bind_blob(int index, llvm::ArrayRef<char> value);

  // true: a row is ready to read; false: done.
  llvm::Expected<bool> step();
  // Steps to completion, ignoring rows (INSERT, UPDATE, DELETE).
  llvm::Error run();
  // Rows changed by the last run() (sqlite3_changes).
  int64_t changes() const;
  void reset();

  // Columns are 0-based, as in sqlite3_column_*.
  int64_t column_int(int index) const;
  double column_double(int index) const;
  std::string column_text(int index) const;
  std::vector<char> column_blob(int index) const;
  bool column_is_null(int index) const;

 private:
  friend class Connection;
  Statement(const Connection *connection, sqlite3_stmt *statement)
      : connection_(connection), statement_(statement) {}
  llvm::Error error(int rc) const;
  void note_bind(int rc);

  const Connection *connection_ = nullptr;
  sqlite3_stmt *statement_ = nullptr;
  int bind_rc_ = 0;  // first failing sqlite3_bind_* code, 0 when none failed
  bool started_ = false;  // stepped since the last reset
};

// BEGIN IMMEDIATE: takes the write lock up front, so a transaction never
// fails half-way on a lock upgrade (SQLITE_BUSY_SNAPSHOT in WAL mode). Rolls
// back on destruction unless committed.
class Transaction {
 public:
  static llvm::Expected<Transaction> begin(Connection &connection);
  Transaction(Transaction &&other) noexcept;
  Transaction &operator=(Transaction &&) = delete;
  Transaction(const Transaction &) = delete;
  ~Transaction();

  llvm::Error commit();

 private:
  explicit Transaction(Connection *connection) : connection_(connection) {}
  Connection *connection_ = nullptr;  // null once committed or rolled back
};

// true for the codes that mean "another connection holds the lock".
bool is_busy(int rc);

}  // namespace flashjit::sqlite
