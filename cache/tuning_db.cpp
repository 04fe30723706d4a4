#include "cache/tuning_db.h"

#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "cache/schema.h"
#include "cache/sha256.h"
#include "cache/tuning_db_impl.h"
#include "cache/tuning_fields.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"

namespace flashjit {

namespace {

// Long enough to outlast any single write (a tuner stores one row or one
// cubin per transaction), short enough that a stuck process is reported.
constexpr int kBusyTimeoutMs = 10000;
// get_cubin refreshes last_used_at only when it is older than this: pruning
// counts in days, and a load should not be a write every time.
constexpr int64_t kTouchAfterS = 3600;

using tuning_fields::Field;
using tuning_fields::FieldRef;
using tuning_fields::Role;

llvm::Error db_error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

void bind_field(sqlite::Statement &statement, int index, FieldRef ref) {
  std::visit(
      [&](auto *value) {
        using T = std::remove_pointer_t<decltype(value)>;
        if constexpr (std::is_same_v<T, std::string>)
          statement.bind_text(index, *value);
        else if constexpr (std::is_same_v<T, double>)
          statement.bind_double(index, *value);
        else
          statement.bind_int(index, static_cast<int64_t>(*value));
      },
      ref);
}

void read_field(const sqlite::Statement &statement, int column, FieldRef ref) {
  std::visit(
      [&](auto *value) {
        using T = std::remove_pointer_t<decltype(value)>;
        if constexpr (std::is_same_v<T, std::string>)
          *value = statement.column_text(column);
        else if constexpr (std::is_same_v<T, double>)
          *value = statement.column_double(column);
        else if constexpr (std::is_same_v<T, bool>)
          *value = statement.column_int(column) != 0;
        else
          *value = static_cast<T>(statement.column_int(column));
      },
      ref);
}

TuningRecord read_tuning(const sqlite::Statement &statement) {
  TuningRecord record;
  int column = 0;
  for (const Field &field : tuning_fields::fields()) read_field(statement, column++, field.ref(record));
  return record;
}

// Every row a prepared SELECT of the tuning columns returns, in its order.
llvm::Expected<std::vector<TuningRecord>> read_tunings(sqlite::Statement &statement) {
  std::vector<TuningRecord> out;
  for (;;) {
    llvm::Expected<bool> row = statement.step();
    if (!row) return row.takeError();
    if (!*row) return out;
    out.push_back(read_tuning(statement));
  }
}

// "a = ?1 AND b = ?2 ..." over the fields `pick` selects, numbering from 1.
template <typename Pick>
std::string where_equal(Pick pick, std::vector<const Field *> &bound) {
  std::string out;
  for (const Field &field : tuning_fields::fields()) {
    if (!pick(field)) continue;
    bound.push_back(&field);
    if (!out.empty()) out += " AND ";
    out += llvm::formatv("{0} = ?{1}", field.column(), bound.size()).str();
  }
  return out;
}

const std::string &upsert_tuning_sql() {
  static const std::string sql = [] {
    std::string values, key, update;
    int index = 0;
    for (const Field &field : tuning_fields::fields()) {
      values += llvm::formatv("{0}?{1}", index ? ", " : "", index + 1).str();
      ++index;
      std::string &list = field.in_key() ? key : update;
      if (!list.empty()) list += ", ";
      list += field.in_key() ? field.column() : field.column() + " = excluded." + field.column();
    }
    return "INSERT INTO tunings (" + tuning_fields::column_list() + ") VALUES (" + values +
           ") ON CONFLICT (" + key + ") DO UPDATE SET " + update;
  }();
  return sql;
}

// Column 8 is the blob, or NULL where a listing does not need the bytes (a
// large store is then listed without reading every blob).
constexpr const char *kCubinColumns =
    "key, kernel_id, arch, nvrtc_version, blob_sha256, compile_ms, created_at, last_used_at, blob";
constexpr const char *kCubinColumnsNoBlob =
    "key, kernel_id, arch, nvrtc_version, blob_sha256, compile_ms, created_at, last_used_at, NULL";

CubinRecord read_cubin(const sqlite::Statement &statement, bool with_bytes) {
  CubinRecord record;
  record.key = statement.column_text(0);
  record.kernel_id = statement.column_text(1);
  record.arch = statement.column_text(2);
  record.nvrtc_version = statement.column_text(3);
  record.blob_sha256 = statement.column_text(4);
  record.compile_ms = statement.column_double(5);
  record.created_at = statement.column_int(6);
  record.last_used_at = statement.column_int(7);
  if (with_bytes) record.bytes = statement.column_blob(8);
  return record;
}

llvm::Expected<bool> key_exists(sqlite::Connection &db, llvm::StringRef sql,
                                llvm::function_ref<void(sqlite::Statement &)> bind) {
  auto statement = db.prepare(sql);
  if (!statement) return statement.takeError();
  bind(*statement);
  return statement->step();
}

}  // namespace

// ---- row-level helpers ----------------------------------------------------

namespace cache_detail {

std::string sha256_hex(llvm::ArrayRef<char> bytes) {
  auto digest =
      sha256(llvm::ArrayRef<uint8_t>(reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size()));
  return llvm::toHex(digest, /*LowerCase=*/true);
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

llvm::Error upsert_tuning(sqlite::Connection &db, const TuningRecord &record, bool *replaced) {
  std::vector<const Field *> key_fields;
  std::string where = where_equal([](const Field &f) { return f.in_key(); }, key_fields);
  llvm::Expected<bool> exists =
      key_exists(db, "SELECT 1 FROM tunings WHERE " + where, [&](sqlite::Statement &s) {
        for (size_t i = 0; i < key_fields.size(); ++i)
          bind_field(s, static_cast<int>(i + 1), tuning_fields::ref(*key_fields[i], record));
      });
  if (!exists) return exists.takeError();
  if (replaced) *replaced = *exists;

  auto statement = db.prepare(upsert_tuning_sql());
  if (!statement) return statement.takeError();
  int index = 1;
  for (const Field &field : tuning_fields::fields())
    bind_field(*statement, index++, tuning_fields::ref(field, record));
  return statement->run();
}

llvm::Error upsert_cubin(sqlite::Connection &db, const CubinRecord &record, bool *replaced) {
  llvm::Expected<bool> exists = key_exists(db, "SELECT 1 FROM cubins WHERE key = ?1",
                                           [&](sqlite::Statement &s) { s.bind_text(1, record.key); });
  if (!exists) return exists.takeError();
  if (replaced) *replaced = *exists;

  auto statement = db.prepare(
      "INSERT INTO cubins (key, kernel_id, arch, nvrtc_version, blob_sha256, compile_ms, "
      "created_at, last_used_at, blob, size) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) "
      "ON CONFLICT (key) DO UPDATE SET kernel_id = excluded.kernel_id, arch = excluded.arch, "
      "nvrtc_version = excluded.nvrtc_version, blob_sha256 = excluded.blob_sha256, "
      "compile_ms = excluded.compile_ms, created_at = excluded.created_at, "
      "last_used_at = excluded.last_used_at, blob = excluded.blob, size = excluded.size");
  if (!statement) return statement.takeError();
  int64_t now = unix_now();
  statement->bind_text(1, record.key);
  statement->bind_text(2, record.kernel_id);
  statement->bind_text(3, record.arch);
  statement->bind_text(4, record.nvrtc_version);
  statement->bind_text(5, record.blob_sha256);
  statement->bind_double(6, record.compile_ms);
  statement->bind_int(7, record.created_at ? record.created_at : now);
  statement->bind_int(8, record.last_used_at ? record.last_used_at : now);
  statement->bind_blob(9, record.bytes);
  statement->bind_int(10, static_cast<int64_t>(record.bytes.size()));
  return statement->run();
}

llvm::Expected<std::vector<TuningRecord>> select_tunings(sqlite::Connection &db) {
  auto statement =
      db.prepare("SELECT " + tuning_fields::column_list() + " FROM tunings ORDER BY id");
  if (!statement) return statement.takeError();
  return read_tunings(*statement);
}

llvm::Expected<std::vector<CubinRecord>> select_cubins(sqlite::Connection &db, bool with_bytes) {
  auto statement = db.prepare(std::string("SELECT ") +
                              (with_bytes ? kCubinColumns : kCubinColumnsNoBlob) +
                              " FROM cubins ORDER BY key");
  if (!statement) return statement.takeError();
  std::vector<CubinRecord> out;
  for (;;) {
    llvm::Expected<bool> row = statement->step();
    if (!row) return row.takeError();
    if (!*row) return out;
    out.push_back(read_cubin(*statement, with_bytes));
  }
}

}  // namespace cache_detail

// ---- opening ----------------------------------------------------------------

TuningDb::TuningDb(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TuningDb::~TuningDb() = default;

const std::string &TuningDb::path() const { return impl_->db.path(); }

int64_t TuningDb::refused_cubins() const { return impl_->refused_cubins.load(); }

std::string TuningDb::default_path() {
  auto set = [](const char *name) -> const char * {
    const char *value = std::getenv(name);
    return value && *value ? value : nullptr;
  };
  if (const char *db = set("FLASHJIT_DB")) return db;
  llvm::SmallString<256> path;
  // The XDG spec says a relative XDG_CACHE_HOME is invalid and to be ignored.
  if (const char *xdg = set("XDG_CACHE_HOME"); xdg && llvm::sys::path::is_absolute(xdg)) {
    llvm::sys::path::append(path, xdg, "flashjit", "flashjit.db");
    return std::string(path);
  }
  // $HOME, else the password database's entry.
  if (!llvm::sys::path::home_directory(path)) path = ".";
  llvm::sys::path::append(path, ".cache", "flashjit", "flashjit.db");
  return std::string(path);
}

llvm::Expected<std::unique_ptr<TuningDb>> TuningDb::open(llvm::StringRef path) {
  if (path.empty()) return db_error("no database path given");
  bool in_memory = path == ":memory:";
  if (!in_memory) {
    llvm::StringRef parent = llvm::sys::path::parent_path(path);
    // Writable by its owner only, whatever the umask (002 under Debian's
    // user private groups): a folder others can write makes the database's
    // cubins untrusted (cache/db_trust.h). Folders that exist keep their mode.
    const auto folder_perms = llvm::sys::fs::owner_all | llvm::sys::fs::group_read |
                                  llvm::sys::fs::group_exe | llvm::sys::fs::others_read |
                                  llvm::sys::fs::others_exe;
    if (!parent.empty())
      if (std::error_code ec =
              llvm::sys::fs::create_directories(parent, /*IgnoreExisting=*/true, folder_perms))
        return db_error(llvm::formatv("{0}: cannot create the folder {1}: {2}", path, parent,
                                      ec.message()));
  }

  auto impl = std::make_unique<Impl>();
  auto connection = sqlite::Connection::open(
      path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, kBusyTimeoutMs);
  if (!connection) return connection.takeError();
  impl->db = std::move(*connection);
  sqlite::Connection &db = impl->db;

  // Read before writing anything: a foreign or newer file must stay
  // byte-identical, and even `journal_mode=WAL` rewrites the header.
  llvm::Expected<int> version = schema::inspect(db, kSchemaVersion);
  if (!version) return version.takeError();

  // A new file (no table yet) is created without fsyncs: the switch to WAL
  // and the schema took six of them, a cold process's first call waiting on
  // the disk (~6 ms on a GPU machine), for an empty cache that only an OS
  // crash within those milliseconds could leave damaged (then refused by
  // name, and deleted by its owner).
  const bool creating = *version == 0;
  if (creating)
    if (llvm::Error e = db.exec("PRAGMA synchronous = OFF")) return e;

  // WAL: readers never block the writer nor each other. It persists in the
  // file; the other two are per connection.
  llvm::Expected<std::string> mode = db.query_text("PRAGMA journal_mode = WAL");
  if (!mode) return mode.takeError();
  if (llvm::Error e = db.exec("PRAGMA foreign_keys = ON")) return e;

  if (*version < kSchemaVersion) {
    llvm::Expected<int> migrated = schema::migrate(db, schema::migrations());
    if (!migrated) return migrated.takeError();
  }
  if (llvm::Error e = db.exec("PRAGMA synchronous = NORMAL")) return e;
  return std::unique_ptr<TuningDb>(new TuningDb(std::move(impl)));
}

llvm::Expected<int> TuningDb::schema_version() {
  std::lock_guard lock(impl_->mutex);
  llvm::Expected<std::string> text =
      impl_->db.query_text("SELECT value FROM meta WHERE key = 'schema_version'");
  if (!text) return text.takeError();
  int version = 0;
  if (llvm::StringRef(*text).getAsInteger(10, version))
    return db_error(llvm::formatv("{0}: schema_version '{1}' is not a number", path(), *text));
  return version;
}

// ---- tunings ------------------------------------------------------------------

llvm::Error TuningDb::put_tuning(const TuningRecord &record) {
  std::lock_guard lock(impl_->mutex);
  llvm::Expected<sqlite::Transaction> transaction = sqlite::Transaction::begin(impl_->db);
  if (!transaction) return transaction.takeError();
  if (llvm::Error e = cache_detail::upsert_tuning(impl_->db, record, nullptr)) return e;
  return transaction->commit();
}

llvm::Expected<std::optional<TuningRecord>> TuningDb::find_tuning(
    const DeviceFingerprint &device, const SoftwareFingerprint &software,
    const ProblemClassKey &problem) {
  TuningRecord probe;
  probe.device = device;
  probe.software = software;
  probe.problem = problem;
  std::vector<const Field *> bound;
  std::string where = where_equal([](const Field &f) { return f.in_key(); }, bound);

  std::lock_guard lock(impl_->mutex);
  auto statement = impl_->db.prepare("SELECT " + tuning_fields::column_list() +
                                     " FROM tunings WHERE " + where);
  if (!statement) return statement.takeError();
  for (size_t i = 0; i < bound.size(); ++i)
    bind_field(*statement, static_cast<int>(i + 1), tuning_fields::ref(*bound[i], probe));
  llvm::Expected<bool> row = statement->step();
  if (!row) return row.takeError();
  if (!*row) return std::nullopt;
  return read_tuning(*statement);
}

llvm::Expected<std::vector<TuningRecord>> TuningDb::nearest_tunings(
    const DeviceFingerprint &device, const SoftwareFingerprint &software,
    const ProblemClassKey &problem, int limit) {
  TuningRecord probe;
  probe.device = device;
  probe.software = software;
  probe.problem = problem;
  std::vector<const Field *> bound;
  std::string where = where_equal([](const Field &f) { return f.role == Role::key; }, bound);
  // Distance: the sum of bucket differences. Ties go to the larger seqlen_k
  // bucket (a config tuned for longer keys degrades more gracefully on
  // shorter ones than the reverse), then larger seqlen_q, then batch*heads,
  // so the answer never depends on row order.
  std::string distance, ties;
  for (const Field &field : tuning_fields::fields()) {
    if (field.role != Role::bucket) continue;
    bound.push_back(&field);
    if (!distance.empty()) distance += " + ";
    distance += llvm::formatv("abs({0} - ?{1})", field.column(), bound.size()).str();
  }
  for (const char *name : {"seqlen_k_bucket", "seqlen_q_bucket", "batch_heads_bucket"})
    ties += std::string(", problem_") + name + " DESC";

  std::lock_guard lock(impl_->mutex);
  auto statement =
      impl_->db.prepare("SELECT " + tuning_fields::column_list() + " FROM tunings WHERE " + where +
                        " ORDER BY " + distance + ties +
                        llvm::formatv(" LIMIT {0}", std::max(limit, 0)).str());
  if (!statement) return statement.takeError();
  for (size_t i = 0; i < bound.size(); ++i)
    bind_field(*statement, static_cast<int>(i + 1), tuning_fields::ref(*bound[i], probe));
  return read_tunings(*statement);
}

llvm::Expected<std::vector<TuningRecord>> TuningDb::list_tunings() {
  std::lock_guard lock(impl_->mutex);
  return cache_detail::select_tunings(impl_->db);
}

// ---- cubins -------------------------------------------------------------------

llvm::Error TuningDb::put_cubin(const CubinRecord &record) {
  if (record.key.empty()) return db_error(path() + ": a cubin needs a key");
  CubinRecord stored = record;
  std::string actual = cache_detail::sha256_hex(record.bytes);
  if (!record.blob_sha256.empty() && !llvm::StringRef(record.blob_sha256).equals_insensitive(actual))
    return db_error(llvm::formatv("{0}: cubin {1}: blob_sha256 {2} does not match its bytes ({3})",
                                  path(), record.key, record.blob_sha256, actual));
  stored.blob_sha256 = actual;

  std::lock_guard lock(impl_->mutex);
  llvm::Expected<sqlite::Transaction> transaction = sqlite::Transaction::begin(impl_->db);
  if (!transaction) return transaction.takeError();
  if (llvm::Error e = cache_detail::upsert_cubin(impl_->db, stored, nullptr)) return e;
  return transaction->commit();
}

// Snippet facts live in the meta table (every schema version has it) under
// this prefix, so that keeping them needed no migration.
constexpr const char *kSnippetFactPrefix = "snippet_fact:";

llvm::Expected<std::optional<std::string>> TuningDb::get_snippet_fact(llvm::StringRef key) {
  if (!cubin_trust().trusted) return std::nullopt;
  std::lock_guard lock(impl_->mutex);
  auto statement = impl_->db.prepare("SELECT value FROM meta WHERE key = ?1");
  if (!statement) return statement.takeError();
  statement->bind_text(1, kSnippetFactPrefix + key.str());
  llvm::Expected<bool> row = statement->step();
  if (!row) return row.takeError();
  if (!*row) return std::nullopt;
  return statement->column_text(0);
}

llvm::Error TuningDb::put_snippet_fact(llvm::StringRef key, llvm::StringRef value) {
  std::lock_guard lock(impl_->mutex);
  auto statement = impl_->db.prepare("INSERT OR REPLACE INTO meta (key, value) VALUES (?1, ?2)");
  if (!statement) return statement.takeError();
  statement->bind_text(1, kSnippetFactPrefix + key.str());
  statement->bind_text(2, value);
  llvm::Expected<bool> row = statement->step();
  if (!row) return row.takeError();
  return llvm::Error::success();
}

const DbTrust &TuningDb::cubin_trust() {
  std::lock_guard lock(impl_->mutex);
  if (!impl_->cubin_trust) impl_->cubin_trust = check_db_trust(path());
  return *impl_->cubin_trust;
}

llvm::Expected<std::optional<CubinRecord>> TuningDb::get_cubin(llvm::StringRef key,
                                                               std::string *refused) {
  if (const DbTrust &trust = cubin_trust(); !trust.trusted) {
    if (refused) *refused = trust.warning(path());
    return std::nullopt;
  }
  std::lock_guard lock(impl_->mutex);
  sqlite::Connection &db = impl_->db;
  auto statement =
      db.prepare(std::string("SELECT ") + kCubinColumns + " FROM cubins WHERE key = ?1");
  if (!statement) return statement.takeError();
  statement->bind_text(1, key);
  llvm::Expected<bool> row = statement->step();
  if (!row) return row.takeError();
  if (!*row) return std::nullopt;
  CubinRecord record = read_cubin(*statement, /*with_bytes=*/true);
  statement->reset();  // ends the read before the write below

  std::string actual = cache_detail::sha256_hex(record.bytes);
  if (actual != record.blob_sha256) {
    impl_->refused_cubins.fetch_add(1);
    if (refused)
      *refused = llvm::formatv("{0}: cubin {1} refused: its blob hashes to {2}, not the stored {3} "
                               "(corrupted; it will be recompiled and replaced)",
                               path(), key, actual, record.blob_sha256);
    return std::nullopt;
  }

  int64_t now = cache_detail::unix_now();
  if (record.last_used_at < now - kTouchAfterS) {
    // One autocommit statement is its own transaction. Best effort: a
    // database that stays locked past the busy timeout, or is read-only,
    // must not turn a good cubin into a failure.
    auto touch = db.prepare("UPDATE cubins SET last_used_at = ?1 WHERE key = ?2");
    if (!touch) return touch.takeError();
    touch->bind_int(1, now);
    touch->bind_text(2, key);
    if (llvm::Error e = touch->run())
      llvm::consumeError(std::move(e));
    else
      record.last_used_at = now;
  }
  return record;
}

llvm::Expected<int64_t> TuningDb::count_cubins() {
  std::lock_guard lock(impl_->mutex);
  llvm::Expected<std::string> text = impl_->db.query_text("SELECT count(*) FROM cubins");
  if (!text) return text.takeError();
  return std::strtoll(text->c_str(), nullptr, 10);
}

llvm::Expected<std::vector<CubinRecord>> TuningDb::list_cubins(bool with_bytes) {
  std::lock_guard lock(impl_->mutex);
  return cache_detail::select_cubins(impl_->db, with_bytes);
}

// ---- pruning ------------------------------------------------------------------

llvm::Expected<PruneReport> TuningDb::prune(const SoftwareFingerprint &current, int unused_days) {
  std::lock_guard lock(impl_->mutex);
  sqlite::Connection &db = impl_->db;
  llvm::Expected<sqlite::Transaction> transaction = sqlite::Transaction::begin(db);
  if (!transaction) return transaction.takeError();
  PruneReport report;

  auto tunings = db.prepare(
      "DELETE FROM tunings WHERE software_nvrtc_version != ?1 OR software_templates_hash != ?2");
  if (!tunings) return tunings.takeError();
  tunings->bind_text(1, current.nvrtc_version);
  tunings->bind_text(2, current.templates_hash);
  if (llvm::Error e = tunings->run()) return e;
  report.stale_tunings = static_cast<int>(tunings->changes());

  // Cubins carry no templates hash (their key is a hash of the source
  // itself), so a template change leaves orphans that age out by last use.
  auto cubins = db.prepare(
      "DELETE FROM cubins WHERE nvrtc_version != ?1 OR (?2 > 0 AND last_used_at < ?3)");
  if (!cubins) return cubins.takeError();
  cubins->bind_text(1, current.nvrtc_version);
  cubins->bind_int(2, unused_days);
  cubins->bind_int(3, cache_detail::unix_now() - int64_t(unused_days) * 86400);
  if (llvm::Error e = cubins->run()) return e;
  report.stale_cubins = static_cast<int>(cubins->changes());

  if (llvm::Error e = transaction->commit()) return e;
  return report;
}

}  // namespace flashjit
