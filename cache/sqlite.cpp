#include "cache/sqlite.h"

#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "llvm/Support/FormatVariadic.h"

namespace flashjit::sqlite {

namespace {

// SQLite's busy handler does not run in every lock conflict: it is skipped
// where waiting could deadlock (a reader upgrading to a writer), and while
// another connection recovers the WAL index. Those return SQLITE_BUSY at once,
// so writes retry here too, with a backoff, up to this long in all.
constexpr auto kRetryFor = std::chrono::seconds(30);

// A statement in a message: its first line, whitespace folded, at most ~70
// characters, enough to find it in the source.
std::string describe(llvm::StringRef sql) {
  std::string out;
  for (char c : sql.trim()) {
    bool space = c == ' ' || c == '\n' || c == '\t' || c == '\r';
    if (space && (out.empty() || out.back() == ' ')) continue;
    out.push_back(space ? ' ' : c);
    if (out.size() >= 70) {
      out += "...";
      break;
    }
  }
  return out;
}

template <typename Attempt>
int with_retry(Attempt attempt) {
  auto deadline = std::chrono::steady_clock::now() + kRetryFor;
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    int rc = attempt();
    if (!is_busy(rc) || std::chrono::steady_clock::now() >= deadline) return rc;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

}  // namespace

bool is_busy(int rc) {
  int primary = rc & 0xff;
  return primary == SQLITE_BUSY || primary == SQLITE_LOCKED;
}

// ---- Connection -----------------------------------------------------------

llvm::Expected<Connection> Connection::open(llvm::StringRef path, int flags, int busy_timeout_ms) {
  Connection connection;
  connection.path_ = path.str();
  int rc = sqlite3_open_v2(connection.path_.c_str(), &connection.db_, flags, nullptr);
  if (rc != SQLITE_OK) {
    // sqlite3_open_v2 hands back a handle even on failure, for its message.
    std::string message = connection.db_ ? sqlite3_errmsg(connection.db_) : sqlite3_errstr(rc);
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   llvm::formatv("{0}: cannot open: {1} (code {2})",
                                                 connection.path_, message, rc));
  }
  sqlite3_extended_result_codes(connection.db_, 1);
  sqlite3_busy_timeout(connection.db_, busy_timeout_ms);
  return connection;
}

Connection::Connection(Connection &&other) noexcept
    : db_(std::exchange(other.db_, nullptr)), path_(std::move(other.path_)) {}

Connection &Connection::operator=(Connection &&other) noexcept {
  if (this != &other) {
    if (db_) sqlite3_close_v2(db_);
    db_ = std::exchange(other.db_, nullptr);
    path_ = std::move(other.path_);
  }
  return *this;
}

Connection::~Connection() {
  // _v2: statements still alive (a bug, but not one to crash on) keep the
  // handle open until they are finalized.
  if (db_) sqlite3_close_v2(db_);
}

int Connection::last_error_code() const { return db_ ? sqlite3_extended_errcode(db_) : 0; }

llvm::Error Connection::error(llvm::StringRef what, int rc) const {
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(),
      llvm::formatv("{0}: `{1}`: {2} (code {3})", path_, describe(what),
                    db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc), rc));
}

llvm::Expected<Statement> Connection::prepare(llvm::StringRef sql) {
  sqlite3_stmt *statement = nullptr;
  int rc = with_retry([&] {
    return sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &statement, nullptr);
  });
  if (rc != SQLITE_OK) return error(sql, rc);
  if (!statement) return error(sql, SQLITE_MISUSE);  // empty text
  return Statement(this, statement);
}

llvm::Error Connection::exec(llvm::StringRef sql) {
  std::string text = sql.str();  // sqlite3_exec wants a terminator
  int rc = with_retry([&] { return sqlite3_exec(db_, text.c_str(), nullptr, nullptr, nullptr); });
  if (rc != SQLITE_OK) return error(sql, rc);
  return llvm::Error::success();
}

llvm::Expected<std::string> Connection::query_text(llvm::StringRef sql) {
  auto statement = prepare(sql);
  if (!statement) return statement.takeError();
  llvm::Expected<bool> row = statement->step();
  if (!row) return row.takeError();
  if (!*row) return std::string();
  return statement->column_text(0);
}

// ---- Statement --------------------------------------------------------------

Statement::Statement(Statement &&other) noexcept
    : connection_(other.connection_),
      statement_(std::exchange(other.statement_, nullptr)),
      bind_rc_(other.bind_rc_),
      started_(other.started_) {}

Statement &Statement::operator=(Statement &&other) noexcept {
  if (this != &other) {
    if (statement_) sqlite3_finalize(statement_);
    connection_ = other.connection_;
    statement_ = std::exchange(other.statement_, nullptr);
    bind_rc_ = other.bind_rc_;
    started_ = other.started_;
  }
  return *this;
}

Statement::~Statement() {
  if (statement_) sqlite3_finalize(statement_);
}

llvm::Error Statement::error(int rc) const {
  return connection_->error(sqlite3_sql(statement_), rc);
}

void Statement::note_bind(int rc) {
  if (rc != SQLITE_OK && bind_rc_ == 0) bind_rc_ = rc;
}

void Statement::bind_int(int index, int64_t value) {
  note_bind(sqlite3_bind_int64(statement_, index, value));
}

void Statement::bind_double(int index, double value) {
  note_bind(sqlite3_bind_double(statement_, index, value));
}

void Statement::bind_text(int index, llvm::StringRef value) {
  note_bind(sqlite3_bind_text64(statement_, index, value.data(), value.size(), SQLITE_TRANSIENT,
                                SQLITE_UTF8));
}

void Statement::bind_blob(int index, llvm::ArrayRef<char> value) {
  // A null pointer would bind NULL, not an empty blob.
  static const char empty = 0;
  note_bind(sqlite3_bind_blob64(statement_, index, value.empty() ? &empty : value.data(),
                                value.size(), SQLITE_TRANSIENT));
}

llvm::Expected<bool> Statement::step() {
  if (bind_rc_ != 0) {
    llvm::Error e = llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("{0}: `{1}`: binding a parameter failed: {2} (code {3})",
                      connection_->path(), describe(sqlite3_sql(statement_)),
                      sqlite3_errstr(bind_rc_), bind_rc_));
    return e;
  }
  // A busy first step can simply be run again after a reset (nothing was
  // read yet); later steps read the snapshot the first one took and do not
  // wait for locks. Inside our transactions the write lock is already held
  // (BEGIN IMMEDIATE), so the loop rarely turns.
  int rc;
  if (started_) {
    rc = sqlite3_step(statement_);
  } else {
    rc = with_retry([&] {
      int r = sqlite3_step(statement_);
      if (is_busy(r)) sqlite3_reset(statement_);
      return r;
    });
    started_ = true;
  }
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return error(rc);
}

llvm::Error Statement::run() {
  for (;;) {
    llvm::Expected<bool> row = step();
    if (!row) return row.takeError();
    if (!*row) return llvm::Error::success();
  }
}

int64_t Statement::changes() const { return sqlite3_changes64(connection_->get()); }

void Statement::reset() {
  sqlite3_reset(statement_);
  sqlite3_clear_bindings(statement_);
  bind_rc_ = 0;
  started_ = false;
}

int64_t Statement::column_int(int index) const { return sqlite3_column_int64(statement_, index); }

double Statement::column_double(int index) const {
  return sqlite3_column_double(statement_, index);
}

std::string Statement::column_text(int index) const {
  const unsigned char *text = sqlite3_column_text(statement_, index);
  if (!text) return {};
  return std::string(reinterpret_cast<const char *>(text),
                     static_cast<size_t>(sqlite3_column_bytes(statement_, index)));
}

std::vector<char> Statement::column_blob(int index) const {
  const char *data = static_cast<const char *>(sqlite3_column_blob(statement_, index));
  if (!data) return {};
  return std::vector<char>(data, data + sqlite3_column_bytes(statement_, index));
}

bool Statement::column_is_null(int index) const {
  return sqlite3_column_type(statement_, index) == SQLITE_NULL;
}

// ---- Transaction ------------------------------------------------------------

llvm::Expected<Transaction> Transaction::begin(Connection &connection) {
  if (llvm::Error e = connection.exec("BEGIN IMMEDIATE")) return e;
  return Transaction(&connection);
}

Transaction::Transaction(Transaction &&other) noexcept
    : connection_(std::exchange(other.connection_, nullptr)) {}

Transaction::~Transaction() {
  // Best effort: a failed statement may already have rolled back, and a
  // destructor has nowhere to report to.
  if (connection_) sqlite3_exec(connection_->get(), "ROLLBACK", nullptr, nullptr, nullptr);
}

llvm::Error Transaction::commit() {
  Connection *connection = std::exchange(connection_, nullptr);
  if (llvm::Error e = connection->exec("COMMIT")) {
    sqlite3_exec(connection->get(), "ROLLBACK", nullptr, nullptr, nullptr);
    return e;
  }
  return llvm::Error::success();
}

}  // namespace flashjit::sqlite
