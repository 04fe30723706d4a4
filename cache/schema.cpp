#include "cache/schema.h"

#include <sqlite3.h>

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit::schema {

namespace {

constexpr const char *kApplication = "flashjit";

// Version 1. Frozen: a later change is a new migration, never an edit here,
// or databases created before it would silently differ from new ones.
// Column names match tuning_fields.cpp; every key field is NOT NULL so the
// UNIQUE constraint sees no NULLs (which SQLite treats as all distinct).
constexpr const char *kSchemaV1 = R"sql(
CREATE TABLE IF NOT EXISTS meta (
  key TEXT PRIMARY KEY NOT NULL,
  value TEXT NOT NULL
);
CREATE TABLE tunings (
  id INTEGER PRIMARY KEY,
  device_name TEXT NOT NULL,
  device_cc_major INTEGER NOT NULL,
  device_cc_minor INTEGER NOT NULL,
  device_sm_count INTEGER NOT NULL,
  device_driver_version INTEGER NOT NULL,
  software_nvrtc_version TEXT NOT NULL,
  software_templates_hash TEXT NOT NULL,
  problem_pass TEXT NOT NULL,
  problem_dtype TEXT NOT NULL,
  problem_head_dim_qk INTEGER NOT NULL,
  problem_head_dim_v INTEGER NOT NULL,
  problem_mask TEXT NOT NULL,
  problem_window_left INTEGER NOT NULL,
  problem_window_right INTEGER NOT NULL,
  problem_softcap INTEGER NOT NULL,
  problem_gqa_ratio INTEGER NOT NULL,
  problem_seqlen_q_bucket INTEGER NOT NULL,
  problem_seqlen_k_bucket INTEGER NOT NULL,
  problem_batch_heads_bucket INTEGER NOT NULL,
  config_path TEXT NOT NULL,
  config_block_m INTEGER NOT NULL,
  config_block_n INTEGER NOT NULL,
  config_warps INTEGER NOT NULL,
  config_stages INTEGER NOT NULL,
  shape TEXT NOT NULL,
  median_ms REAL NOT NULL,
  min_ms REAL NOT NULL,
  max_ms REAL NOT NULL,
  tflops REAL NOT NULL,
  heuristic_ms REAL NOT NULL,
  occupancy REAL NOT NULL,
  registers INTEGER NOT NULL,
  smem_bytes INTEGER NOT NULL,
  spill_bytes INTEGER NOT NULL,
  candidates_tried INTEGER NOT NULL,
  candidates_failed INTEGER NOT NULL,
  tuned_at TEXT NOT NULL,
  flashjit_version TEXT NOT NULL,
  cubin_key TEXT NOT NULL,
  heuristic_config_path TEXT NOT NULL,
  heuristic_config_block_m INTEGER NOT NULL,
  heuristic_config_block_n INTEGER NOT NULL,
  heuristic_config_warps INTEGER NOT NULL,
  heuristic_config_stages INTEGER NOT NULL,
  -- The buckets last: the index's prefix then serves the nearest lookup,
  -- which fixes everything but the buckets.
  UNIQUE (device_name, device_cc_major, device_cc_minor, device_sm_count,
          device_driver_version, software_nvrtc_version, software_templates_hash,
          problem_pass, problem_dtype, problem_head_dim_qk, problem_head_dim_v,
          problem_mask, problem_window_left, problem_window_right, problem_softcap,
          problem_gqa_ratio, problem_seqlen_q_bucket, problem_seqlen_k_bucket,
          problem_batch_heads_bucket)
);
CREATE TABLE cubins (
  key TEXT PRIMARY KEY NOT NULL,
  kernel_id TEXT NOT NULL,
  arch TEXT NOT NULL,
  nvrtc_version TEXT NOT NULL,
  size INTEGER NOT NULL,
  blob BLOB NOT NULL,
  blob_sha256 TEXT NOT NULL,
  compile_ms REAL NOT NULL,
  created_at INTEGER NOT NULL,
  last_used_at INTEGER NOT NULL
);
CREATE INDEX cubins_by_last_use ON cubins (last_used_at);
)sql";

// Version 2: the forward's split-KV count and GQA packing, in the tuned
// config and the heuristic's. Rows written before ran neither: 1 split and
// no packing (StoredConfig's defaults). Frozen, as version 1.
constexpr const char *kSchemaV2 = R"sql(
ALTER TABLE tunings ADD COLUMN config_splits INTEGER NOT NULL DEFAULT 1;
ALTER TABLE tunings ADD COLUMN config_pack_gqa TEXT NOT NULL DEFAULT 'off';
ALTER TABLE tunings ADD COLUMN heuristic_config_splits INTEGER NOT NULL DEFAULT 1;
ALTER TABLE tunings ADD COLUMN heuristic_config_pack_gqa TEXT NOT NULL DEFAULT 'off';
)sql";

// Version 3: the problem class's KV layout ('contiguous', or 'paged<N>' for
// a paged cache of N-row pages), a key column. SQLite cannot change a
// table's UNIQUE constraint, so the table is rebuilt with the column in the
// key (before the buckets, which the nearest lookup leaves open); rows
// written before were all contiguous. Frozen, as version 1.
constexpr const char *kSchemaV3 = R"sql(
CREATE TABLE tunings_v3 (
  id INTEGER PRIMARY KEY,
  device_name TEXT NOT NULL,
  device_cc_major INTEGER NOT NULL,
  device_cc_minor INTEGER NOT NULL,
  device_sm_count INTEGER NOT NULL,
  device_driver_version INTEGER NOT NULL,
  software_nvrtc_version TEXT NOT NULL,
  software_templates_hash TEXT NOT NULL,
  problem_pass TEXT NOT NULL,
  problem_dtype TEXT NOT NULL,
  problem_head_dim_qk INTEGER NOT NULL,
  problem_head_dim_v INTEGER NOT NULL,
  problem_mask TEXT NOT NULL,
  problem_window_left INTEGER NOT NULL,
  problem_window_right INTEGER NOT NULL,
  problem_softcap INTEGER NOT NULL,
  problem_gqa_ratio INTEGER NOT NULL,
  problem_seqlen_q_bucket INTEGER NOT NULL,
  problem_seqlen_k_bucket INTEGER NOT NULL,
  problem_batch_heads_bucket INTEGER NOT NULL,
  config_path TEXT NOT NULL,
  config_block_m INTEGER NOT NULL,
  config_block_n INTEGER NOT NULL,
  config_warps INTEGER NOT NULL,
  config_stages INTEGER NOT NULL,
  shape TEXT NOT NULL,
  median_ms REAL NOT NULL,
  min_ms REAL NOT NULL,
  max_ms REAL NOT NULL,
  tflops REAL NOT NULL,
  heuristic_ms REAL NOT NULL,
  occupancy REAL NOT NULL,
  registers INTEGER NOT NULL,
  smem_bytes INTEGER NOT NULL,
  spill_bytes INTEGER NOT NULL,
  candidates_tried INTEGER NOT NULL,
  candidates_failed INTEGER NOT NULL,
  tuned_at TEXT NOT NULL,
  flashjit_version TEXT NOT NULL,
  cubin_key TEXT NOT NULL,
  heuristic_config_path TEXT NOT NULL,
  heuristic_config_block_m INTEGER NOT NULL,
  heuristic_config_block_n INTEGER NOT NULL,
  heuristic_config_warps INTEGER NOT NULL,
  heuristic_config_stages INTEGER NOT NULL,
  config_splits INTEGER NOT NULL,
  config_pack_gqa TEXT NOT NULL,
  heuristic_config_splits INTEGER NOT NULL,
  heuristic_config_pack_gqa TEXT NOT NULL,
  problem_kv_layout TEXT NOT NULL DEFAULT 'contiguous',
  -- The buckets last, as in version 1.
  UNIQUE (device_name, device_cc_major, device_cc_minor, device_sm_count,
          device_driver_version, software_nvrtc_version, software_templates_hash,
          problem_pass, problem_dtype, problem_head_dim_qk, problem_head_dim_v,
          problem_mask, problem_window_left, problem_window_right, problem_softcap,
          problem_gqa_ratio, problem_kv_layout, problem_seqlen_q_bucket,
          problem_seqlen_k_bucket, problem_batch_heads_bucket)
);
INSERT INTO tunings_v3 (
  id, device_name, device_cc_major, device_cc_minor, device_sm_count,
  device_driver_version, software_nvrtc_version, software_templates_hash, problem_pass,
  problem_dtype, problem_head_dim_qk, problem_head_dim_v, problem_mask,
  problem_window_left, problem_window_right, problem_softcap, problem_gqa_ratio,
  problem_seqlen_q_bucket, problem_seqlen_k_bucket, problem_batch_heads_bucket,
  config_path, config_block_m, config_block_n, config_warps, config_stages, shape,
  median_ms, min_ms, max_ms, tflops, heuristic_ms, occupancy, registers, smem_bytes,
  spill_bytes, candidates_tried, candidates_failed, tuned_at, flashjit_version, cubin_key,
  heuristic_config_path, heuristic_config_block_m, heuristic_config_block_n,
  heuristic_config_warps, heuristic_config_stages, config_splits, config_pack_gqa,
  heuristic_config_splits, heuristic_config_pack_gqa)
SELECT
  id, device_name, device_cc_major, device_cc_minor, device_sm_count,
  device_driver_version, software_nvrtc_version, software_templates_hash, problem_pass,
  problem_dtype, problem_head_dim_qk, problem_head_dim_v, problem_mask,
  problem_window_left, problem_window_right, problem_softcap, problem_gqa_ratio,
  problem_seqlen_q_bucket, problem_seqlen_k_bucket, problem_batch_heads_bucket,
  config_path, config_block_m, config_block_n, config_warps, config_stages, shape,
  median_ms, min_ms, max_ms, tflops, heuristic_ms, occupancy, registers, smem_bytes,
  spill_bytes, candidates_tried, candidates_failed, tuned_at, flashjit_version, cubin_key,
  heuristic_config_path, heuristic_config_block_m, heuristic_config_block_n,
  heuristic_config_warps, heuristic_config_stages, config_splits, config_pack_gqa,
  heuristic_config_splits, heuristic_config_pack_gqa
FROM tunings;
DROP TABLE tunings;
ALTER TABLE tunings_v3 RENAME TO tunings;
)sql";

// Version 4: the problem class's modifiers (the hash of a caller's
// score_mod/mask_mod/score_mod_grad and aux declarations, 16 hex digits;
// '' for none), a key column, so that a modified call takes only tunings
// of its own snippets. The table is rebuilt as for version 3; rows written
// before had no modifiers. Frozen, as version 1.
constexpr const char *kSchemaV4 = R"sql(
CREATE TABLE tunings_v4 (
  id INTEGER PRIMARY KEY,
  device_name TEXT NOT NULL,
  device_cc_major INTEGER NOT NULL,
  device_cc_minor INTEGER NOT NULL,
  device_sm_count INTEGER NOT NULL,
  device_driver_version INTEGER NOT NULL,
  software_nvrtc_version TEXT NOT NULL,
  software_templates_hash TEXT NOT NULL,
  problem_pass TEXT NOT NULL,
  problem_dtype TEXT NOT NULL,
  problem_head_dim_qk INTEGER NOT NULL,
  problem_head_dim_v INTEGER NOT NULL,
  problem_mask TEXT NOT NULL,
  problem_window_left INTEGER NOT NULL,
  problem_window_right INTEGER NOT NULL,
  problem_softcap INTEGER NOT NULL,
  problem_gqa_ratio INTEGER NOT NULL,
  problem_seqlen_q_bucket INTEGER NOT NULL,
  problem_seqlen_k_bucket INTEGER NOT NULL,
  problem_batch_heads_bucket INTEGER NOT NULL,
  config_path TEXT NOT NULL,
  config_block_m INTEGER NOT NULL,
  config_block_n INTEGER NOT NULL,
  config_warps INTEGER NOT NULL,
  config_stages INTEGER NOT NULL,
  shape TEXT NOT NULL,
  median_ms REAL NOT NULL,
  min_ms REAL NOT NULL,
  max_ms REAL NOT NULL,
  tflops REAL NOT NULL,
  heuristic_ms REAL NOT NULL,
  occupancy REAL NOT NULL,
  registers INTEGER NOT NULL,
  smem_bytes INTEGER NOT NULL,
  spill_bytes INTEGER NOT NULL,
  candidates_tried INTEGER NOT NULL,
  candidates_failed INTEGER NOT NULL,
  tuned_at TEXT NOT NULL,
  flashjit_version TEXT NOT NULL,
  cubin_key TEXT NOT NULL,
  heuristic_config_path TEXT NOT NULL,
  heuristic_config_block_m INTEGER NOT NULL,
  heuristic_config_block_n INTEGER NOT NULL,
  heuristic_config_warps INTEGER NOT NULL,
  heuristic_config_stages INTEGER NOT NULL,
  config_splits INTEGER NOT NULL,
  config_pack_gqa TEXT NOT NULL,
  heuristic_config_splits INTEGER NOT NULL,
  heuristic_config_pack_gqa TEXT NOT NULL,
  problem_kv_layout TEXT NOT NULL DEFAULT 'contiguous',
  problem_modifiers TEXT NOT NULL DEFAULT '',
  -- The buckets last, as in version 1.
  UNIQUE (device_name, device_cc_major, device_cc_minor, device_sm_count,
          device_driver_version, software_nvrtc_version, software_templates_hash,
          problem_pass, problem_dtype, problem_head_dim_qk, problem_head_dim_v,
          problem_mask, problem_window_left, problem_window_right, problem_softcap,
          problem_gqa_ratio, problem_kv_layout, problem_modifiers, problem_seqlen_q_bucket,
          problem_seqlen_k_bucket, problem_batch_heads_bucket)
);
INSERT INTO tunings_v4 (
  id, device_name, device_cc_major, device_cc_minor, device_sm_count,
  device_driver_version, software_nvrtc_version, software_templates_hash, problem_pass,
  problem_dtype, problem_head_dim_qk, problem_head_dim_v, problem_mask,
  problem_window_left, problem_window_right, problem_softcap, problem_gqa_ratio,
  problem_seqlen_q_bucket, problem_seqlen_k_bucket, problem_batch_heads_bucket,
  config_path, config_block_m, config_block_n, config_warps, config_stages, shape,
  median_ms, min_ms, max_ms, tflops, heuristic_ms, occupancy, registers, smem_bytes,
  spill_bytes, candidates_tried, candidates_failed, tuned_at, flashjit_version, cubin_key,
  heuristic_config_path, heuristic_config_block_m, heuristic_config_block_n,
  heuristic_config_warps, heuristic_config_stages, config_splits, config_pack_gqa,
  heuristic_config_splits, heuristic_config_pack_gqa, problem_kv_layout)
SELECT
  id, device_name, device_cc_major, device_cc_minor, device_sm_count,
  device_driver_version, software_nvrtc_version, software_templates_hash, problem_pass,
  problem_dtype, problem_head_dim_qk, problem_head_dim_v, problem_mask,
  problem_window_left, problem_window_right, problem_softcap, problem_gqa_ratio,
  problem_seqlen_q_bucket, problem_seqlen_k_bucket, problem_batch_heads_bucket,
  config_path, config_block_m, config_block_n, config_warps, config_stages, shape,
  median_ms, min_ms, max_ms, tflops, heuristic_ms, occupancy, registers, smem_bytes,
  spill_bytes, candidates_tried, candidates_failed, tuned_at, flashjit_version, cubin_key,
  heuristic_config_path, heuristic_config_block_m, heuristic_config_block_n,
  heuristic_config_warps, heuristic_config_stages, config_splits, config_pack_gqa,
  heuristic_config_splits, heuristic_config_pack_gqa, problem_kv_layout
FROM tunings;
DROP TABLE tunings;
ALTER TABLE tunings_v4 RENAME TO tunings;
)sql";

// Version 5: the problem class's element types beyond Q's dtype: kv_dtype
// ('same', or 'e4m3' for an fp8 KV cache under 16-bit queries) and out_dtype
// ('auto', or the output's type where it is not the default one), key
// columns, so that a tuning of a bf16 cache never serves an fp8 one, nor a
// tuning of one output type another. The
// table is rebuilt as for version 3; rows written before were all 'same'
// and 'auto'. Frozen, as version 1.
constexpr const char *kSchemaV5 = R"sql(
CREATE TABLE tunings_v5 (
  id INTEGER PRIMARY KEY,
  device_name TEXT NOT NULL,
  device_cc_major INTEGER NOT NULL,
  device_cc_minor INTEGER NOT NULL,
  device_sm_count INTEGER NOT NULL,
  device_driver_version INTEGER NOT NULL,
  software_nvrtc_version TEXT NOT NULL,
  software_templates_hash TEXT NOT NULL,
  problem_pass TEXT NOT NULL,
  problem_dtype TEXT NOT NULL,
  problem_head_dim_qk INTEGER NOT NULL,
  problem_head_dim_v INTEGER NOT NULL,
  problem_mask TEXT NOT NULL,
  problem_window_left INTEGER NOT NULL,
  problem_window_right INTEGER NOT NULL,
  problem_softcap INTEGER NOT NULL,
  problem_gqa_ratio INTEGER NOT NULL,
  problem_seqlen_q_bucket INTEGER NOT NULL,
  problem_seqlen_k_bucket INTEGER NOT NULL,
  problem_batch_heads_bucket INTEGER NOT NULL,
  config_path TEXT NOT NULL,
  config_block_m INTEGER NOT NULL,
  config_block_n INTEGER NOT NULL,
  config_warps INTEGER NOT NULL,
  config_stages INTEGER NOT NULL,
  shape TEXT NOT NULL,
  median_ms REAL NOT NULL,
  min_ms REAL NOT NULL,
  max_ms REAL NOT NULL,
  tflops REAL NOT NULL,
  heuristic_ms REAL NOT NULL,
  occupancy REAL NOT NULL,
  registers INTEGER NOT NULL,
  smem_bytes INTEGER NOT NULL,
  spill_bytes INTEGER NOT NULL,
  candidates_tried INTEGER NOT NULL,
  candidates_failed INTEGER NOT NULL,
  tuned_at TEXT NOT NULL,
  flashjit_version TEXT NOT NULL,
  cubin_key TEXT NOT NULL,
  heuristic_config_path TEXT NOT NULL,
  heuristic_config_block_m INTEGER NOT NULL,
  heuristic_config_block_n INTEGER NOT NULL,
  heuristic_config_warps INTEGER NOT NULL,
  heuristic_config_stages INTEGER NOT NULL,
  config_splits INTEGER NOT NULL,
  config_pack_gqa TEXT NOT NULL,
  heuristic_config_splits INTEGER NOT NULL,
  heuristic_config_pack_gqa TEXT NOT NULL,
  problem_kv_layout TEXT NOT NULL DEFAULT 'contiguous',
  problem_modifiers TEXT NOT NULL DEFAULT '',
  problem_kv_dtype TEXT NOT NULL DEFAULT 'same',
  problem_out_dtype TEXT NOT NULL DEFAULT 'auto',
  -- The buckets last, as in version 1.
  UNIQUE (device_name, device_cc_major, device_cc_minor, device_sm_count,
          device_driver_version, software_nvrtc_version, software_templates_hash,
          problem_pass, problem_dtype, problem_head_dim_qk, problem_head_dim_v,
          problem_mask, problem_window_left, problem_window_right, problem_softcap,
          problem_gqa_ratio, problem_kv_layout, problem_modifiers, problem_kv_dtype,
          problem_out_dtype, problem_seqlen_q_bucket, problem_seqlen_k_bucket,
          problem_batch_heads_bucket)
);
INSERT INTO tunings_v5 (
  id, device_name, device_cc_major, device_cc_minor, device_sm_count,
  device_driver_version, software_nvrtc_version, software_templates_hash, problem_pass,
  problem_dtype, problem_head_dim_qk, problem_head_dim_v, problem_mask,
  problem_window_left, problem_window_right, problem_softcap, problem_gqa_ratio,
  problem_seqlen_q_bucket, problem_seqlen_k_bucket, problem_batch_heads_bucket,
  config_path, config_block_m, config_block_n, config_warps, config_stages, shape,
  median_ms, min_ms, max_ms, tflops, heuristic_ms, occupancy, registers, smem_bytes,
  spill_bytes, candidates_tried, candidates_failed, tuned_at, flashjit_version, cubin_key,
  heuristic_config_path, heuristic_config_block_m, heuristic_config_block_n,
  heuristic_config_warps, heuristic_config_stages, config_splits, config_pack_gqa,
  heuristic_config_splits, heuristic_config_pack_gqa, problem_kv_layout, problem_modifiers)
SELECT
  id, device_name, device_cc_major, device_cc_minor, device_sm_count,
  device_driver_version, software_nvrtc_version, software_templates_hash, problem_pass,
  problem_dtype, problem_head_dim_qk, problem_head_dim_v, problem_mask,
  problem_window_left, problem_window_right, problem_softcap, problem_gqa_ratio,
  problem_seqlen_q_bucket, problem_seqlen_k_bucket, problem_batch_heads_bucket,
  config_path, config_block_m, config_block_n, config_warps, config_stages, shape,
  median_ms, min_ms, max_ms, tflops, heuristic_ms, occupancy, registers, smem_bytes,
  spill_bytes, candidates_tried, candidates_failed, tuned_at, flashjit_version, cubin_key,
  heuristic_config_path, heuristic_config_block_m, heuristic_config_block_n,
  heuristic_config_warps, heuristic_config_stages, config_splits, config_pack_gqa,
  heuristic_config_splits, heuristic_config_pack_gqa, problem_kv_layout, problem_modifiers
FROM tunings;
DROP TABLE tunings;
ALTER TABLE tunings_v5 RENAME TO tunings;
)sql";

const Migration kMigrations[] = {
    {1, kSchemaV1},
    {2, kSchemaV2},
    {3, kSchemaV3},
    {4, kSchemaV4},
    {5, kSchemaV5},
};

llvm::Error refuse(const sqlite::Connection &db, const llvm::Twine &why) {
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(),
      llvm::formatv("{0} is not usable as a flashjit database: {1}; the file was left untouched "
                    "(choose another file with --db or $FLASHJIT_DB)",
                    db.path(), why.str()));
}

}  // namespace

llvm::ArrayRef<Migration> migrations() { return kMigrations; }

llvm::Expected<int> inspect(sqlite::Connection &db, int newest) {
  // The first read of a file that is not SQLite fails here, with "file is
  // not a database"; nothing has been written to it.
  llvm::Expected<std::string> tables = db.query_text("SELECT count(*) FROM sqlite_master");
  if (!tables) {
    if ((db.last_error_code() & 0xff) != SQLITE_NOTADB) return tables.takeError();
    llvm::consumeError(tables.takeError());
    return refuse(db, "it is not an SQLite database");
  }
  if (*tables == "0") return 0;

  llvm::Expected<std::string> has_meta = db.query_text(
      "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'");
  if (!has_meta) return has_meta.takeError();
  if (*has_meta == "0")
    return refuse(db, "it is an SQLite database of another application (no flashjit `meta` table)");

  auto meta = [&](llvm::StringRef key) -> llvm::Expected<std::string> {
    auto statement = db.prepare("SELECT value FROM meta WHERE key = ?1");
    if (!statement) return statement.takeError();
    statement->bind_text(1, key);
    llvm::Expected<bool> row = statement->step();
    if (!row) return row.takeError();
    return *row ? statement->column_text(0) : std::string();
  };
  llvm::Expected<std::string> application = meta("application");
  if (!application)
    return refuse(db, "its `meta` table is not flashjit's: " +
                          llvm::toString(application.takeError()));
  if (*application != kApplication)
    return refuse(db, llvm::formatv("it belongs to application '{0}', not flashjit",
                                    *application));

  llvm::Expected<std::string> version_text = meta("schema_version");
  if (!version_text) return version_text.takeError();
  int version = 0;
  if (llvm::StringRef(*version_text).getAsInteger(10, version) || version < 0)
    return refuse(db, llvm::formatv("its schema_version '{0}' is not a version number",
                                    *version_text));
  if (version > newest)
    return refuse(db, llvm::formatv("it has schema version {0}, newer than this flashjit's {1} "
                                    "(written by a newer flashjit: upgrade to use it)",
                                    version, newest));
  return version;
}

llvm::Expected<int> migrate(sqlite::Connection &db, llvm::ArrayRef<Migration> steps) {
  int target = steps.empty() ? 0 : steps.back().to_version;
  llvm::Expected<sqlite::Transaction> transaction = sqlite::Transaction::begin(db);
  if (!transaction) return transaction.takeError();
  llvm::Expected<int> found = inspect(db, target);
  if (!found) return found.takeError();
  if (*found == target) return *found;  // the transaction rolls back: nothing to write

  for (const Migration &step : steps) {
    if (step.to_version <= *found) continue;
    if (llvm::Error e = db.exec(step.sql))
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          llvm::formatv("migrating {0} to schema version {1}: {2}", db.path(), step.to_version,
                        llvm::toString(std::move(e))));
  }
  auto set = db.prepare(
      "INSERT INTO meta (key, value) VALUES (?1, ?2) "
      "ON CONFLICT (key) DO UPDATE SET value = excluded.value");
  if (!set) return set.takeError();
  for (auto [key, value] : {std::pair<std::string, std::string>{"application", kApplication},
                            {"schema_version", std::to_string(target)}}) {
    set->reset();
    set->bind_text(1, key);
    set->bind_text(2, value);
    if (llvm::Error e = set->run()) return e;
  }
  if (llvm::Error e = transaction->commit()) return e;
  return *found;
}

}  // namespace flashjit::schema
