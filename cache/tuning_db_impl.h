// TuningDb's state and the row-level operations that run inside a caller's
// transaction; shared by tuning_db.cpp and db_yaml.cpp (import writes many
// rows in one transaction).
#pragma once

#include <atomic>
#include <mutex>
#include <optional>

#include "cache/db_trust.h"
#include "cache/sqlite.h"
#include "cache/tuning_db.h"

namespace flashjit {

struct TuningDb::Impl {
  // One connection per TuningDb; the mutex serialises this process's
  // threads on it (the tuner compiles and stores from a thread pool), while
  // SQLite's locks order other processes.
  std::mutex mutex;
  sqlite::Connection db;
  std::atomic<int64_t> refused_cubins{0};
  // Decided at the first cubin read (under `mutex`), when SQLite's
  // companions exist, and kept while the connection is open.
  std::optional<DbTrust> cubin_trust;
};

namespace cache_detail {

// Lowercase hex SHA-256 of `bytes`.
std::string sha256_hex(llvm::ArrayRef<char> bytes);
int64_t unix_now();

// Insert or replace; `replaced` says which happened. The cubin's blob_sha256
// must already be its bytes' hash.
llvm::Error upsert_tuning(sqlite::Connection &db, const TuningRecord &record, bool *replaced);
llvm::Error upsert_cubin(sqlite::Connection &db, const CubinRecord &record, bool *replaced);

llvm::Expected<std::vector<TuningRecord>> select_tunings(sqlite::Connection &db);
llvm::Expected<std::vector<CubinRecord>> select_cubins(sqlite::Connection &db, bool with_bytes);

}  // namespace cache_detail
}  // namespace flashjit
