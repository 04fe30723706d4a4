// The SQLite store of tuned configs and compiled cubins. It knows nothing of
// kernels beyond keys and bytes: every key is spelled out in plain fields so
// that a row says what it is about without flashjit's code.
//
// Many processes may read while one tunes: WAL mode, a busy timeout, and one
// transaction per write. Rows are never deleted implicitly: entries whose
// software fingerprint differs from the running one are ignored by lookups
// (`prune` removes them on request).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/db_trust.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

namespace flashjit {

// The GPU a tuning was measured on.
struct DeviceFingerprint {
  std::string name;  // "NVIDIA H200"
  int cc_major = 0;
  int cc_minor = 0;
  int sm_count = 0;
  int driver_version = 0;  // 13000
  bool operator==(const DeviceFingerprint &) const = default;
};

// The code that produced a kernel: a different compiler or template text
// makes every tuning and cubin of the old one stale.
struct SoftwareFingerprint {
  std::string nvrtc_version;   // "13.0"
  std::string templates_hash;  // hash of templates + generator version
  bool operator==(const SoftwareFingerprint &) const = default;
};

// A problem class: what changes the compiled code, plus log2 buckets of the
// sizes that change which config is fastest.
struct ProblemClassKey {
  std::string pass = "fwd";  // "fwd" | "bwd" | "bwd-det" (deterministic backward)
  std::string dtype;         // "bf16" | "fp16" | "e4m3" (Q's)
  int head_dim_qk = 0;
  int head_dim_v = 0;
  std::string mask;  // "none" | "causal" | "window"
  int64_t window_left = -1;
  int64_t window_right = -1;
  bool softcap = false;
  int gqa_ratio = 1;
  // Where K and V live: "contiguous", or "paged<N>" (a paged cache of N-row
  // pages; schema 3).
  std::string kv_layout = "contiguous";
  // The caller's modifiers compiled into the kernels: their hash (16 hex
  // digits, generator/modifier_source.h's modifiers_hash), "" for none
  // (schema 4).
  std::string modifiers;
  // K's and V's elements where they differ from Q's: "same" | "e4m3" (an
  // fp8 KV cache under 16-bit queries); O's where it is not the default:
  // "auto" | "bf16" | "fp16" (schema 5).
  std::string kv_dtype = "same";
  std::string out_dtype = "auto";
  int seqlen_q_bucket = 0;     // ceil(log2(seqlen_q))
  int seqlen_k_bucket = 0;     // ceil(log2(seqlen_k))
  int batch_heads_bucket = 0;  // ceil(log2(batch * heads_q))
  bool operator==(const ProblemClassKey &) const = default;
};

struct StoredConfig {
  std::string path;  // "sm80" | "sm90"
  int block_m = 0;
  int block_n = 0;
  int warps = 0;
  int stages = 0;
  // The forward's split-KV count and GQA packing ("auto" | "on" | "off";
  // KernelConfig's). The defaults are what every kernel ran before they
  // existed: rows of schema 1 and exports without them read back so.
  int splits = 1;
  std::string pack_gqa = "off";
  bool operator==(const StoredConfig &) const = default;
};

struct TuningRecord {
  DeviceFingerprint device;
  SoftwareFingerprint software;
  ProblemClassKey problem;
  StoredConfig config;
  std::string shape;  // the exact problem measured, human-readable
  double median_ms = 0;
  double min_ms = 0;
  double max_ms = 0;
  double tflops = 0;
  double heuristic_ms = 0;  // the heuristic's config, same run; 0 if unmeasured
  StoredConfig heuristic_config;
  double occupancy = 0;  // resident CTAs per SM
  int registers = 0;
  int smem_bytes = 0;
  int spill_bytes = 0;
  int candidates_tried = 0;
  int candidates_failed = 0;
  std::string tuned_at;  // ISO 8601 UTC
  std::string flashjit_version;
  std::string cubin_key;  // the winner's row in the cubin store
};

struct CubinRecord {
  std::string key;  // SHA-256 of source + options + NVRTC version + arch
  std::string kernel_id;
  std::string arch;  // "sm_90a"
  std::string nvrtc_version;
  std::vector<char> bytes;
  std::string blob_sha256;  // of `bytes`, checked on every read
  double compile_ms = 0;
  int64_t created_at = 0;    // unix seconds
  int64_t last_used_at = 0;  // unix seconds
};

// How an import treats the file's cubins, which are code.
struct ImportOptions {
  // Take the file's cubins at all (false: skipped, and the report says how
  // many).
  bool accept_cubins = false;
  enum class Verify {
    // Recompile the cubins of any export that is not this user's own
    // (cache/export_origin.h): an unsigned one, another user's or
    // machine's, or one changed since it was signed.
    foreign,
    always,  // recompile every cubin
    never,   // store them as they come: the caller vouches for the file
  };
  Verify verify = Verify::foreign;
  // Whether each cubin reproduces: one string per cubin, in order, "" when
  // it does, else why it is refused. Called once with every cubin to
  // verify, so that it may compile them in parallel, before the import's
  // transaction begins. Without it, cubins that need verifying are refused.
  std::function<std::vector<std::string>(llvm::ArrayRef<CubinRecord>)> reproduce;
};

struct ImportReport {
  int tunings_added = 0;
  int tunings_replaced = 0;
  int cubins_added = 0;
  int cubins_replaced = 0;  // same key already stored (same content, by the key's definition)
  // Where the file says it came from, and whether its signature proves it.
  std::string origin;
  bool same_origin = false;  // signed by this user's origin key, unchanged since
  bool cubins_verified = false;  // its cubins were recompiled before being stored
  int cubins_refused = 0;        // did not reproduce (each also in `skipped`)
  std::vector<std::string> skipped;  // one line each: what and why
};

struct PruneReport {
  int stale_tunings = 0;  // other software fingerprint
  int stale_cubins = 0;   // other NVRTC version, or unused for longer than asked
};

class TuningDb {
 public:
  // 2: the configs' splits and pack_gqa.
  static constexpr int kSchemaVersion = 5;

  // Opens (creating the file, its folder and the schema when absent) and
  // migrates older schemas. A file that is not a flashjit database, or one
  // from a newer flashjit, is an error and is left untouched.
  static llvm::Expected<std::unique_ptr<TuningDb>> open(llvm::StringRef path);
  // $FLASHJIT_DB, else $XDG_CACHE_HOME/flashjit/flashjit.db, else
  // ~/.cache/flashjit/flashjit.db.
  static std::string default_path();

  ~TuningDb();
  TuningDb(const TuningDb &) = delete;
  TuningDb &operator=(const TuningDb &) = delete;

  const std::string &path() const;
  llvm::Expected<int> schema_version();

  // Insert or replace the row of (device, software, problem).
  llvm::Error put_tuning(const TuningRecord &record);
  llvm::Expected<std::optional<TuningRecord>> find_tuning(const DeviceFingerprint &device,
                                                          const SoftwareFingerprint &software,
                                                          const ProblemClassKey &problem);
  // Up to `limit` rows of the same class (every field but the three
  // buckets), closest buckets first (sum of absolute bucket differences;
  // ties: larger seqlen_k), for a caller that passes some over.
  llvm::Expected<std::vector<TuningRecord>> nearest_tunings(const DeviceFingerprint &device,
                                                            const SoftwareFingerprint &software,
                                                            const ProblemClassKey &problem,
                                                            int limit);
  llvm::Expected<std::vector<TuningRecord>> list_tunings();

  // Insert or replace by key. blob_sha256 is computed when empty; a given
  // one that does not match the bytes is an error. created_at and
  // last_used_at default to now when 0.
  llvm::Error put_cubin(const CubinRecord &record);
  // A row whose blob does not hash to its blob_sha256 is reported as absent
  // (and the caller recompiles); a hit updates last_used_at (at most once an
  // hour, so that loading processes rarely write). When a row is refused,
  // `refused` (if given) receives why, and refused_cubins() counts it.
  // Every row of a database cubin_trust() does not trust is absent (and
  // `refused` says why; refused_cubins() does not count it).
  llvm::Expected<std::optional<CubinRecord>> get_cubin(llvm::StringRef key,
                                                       std::string *refused = nullptr);
  // Whether cubins may be loaded from this database (cache/db_trust.h):
  // decided at the first call, under $FLASHJIT_DB_TRUST, for as long as
  // this TuningDb is open.
  const DbTrust &cubin_trust();
  llvm::Expected<int64_t> count_cubins();
  // Every cubin, ordered by key; `bytes` only when `with_bytes` (blob_sha256
  // is always there, but not checked without the bytes).
  llvm::Expected<std::vector<CubinRecord>> list_cubins(bool with_bytes = false);
  // Rows get_cubin refused since this TuningDb was opened.
  int64_t refused_cubins() const;

  // What compiling a probe found about a caller's snippets (whether a
  // mask_mod reads b or h; whether a score_mod defines its gradient), by a
  // key naming the probe, the snippet's hash and the target: kept so that a
  // process served from the database never loads NVRTC for them. Read only
  // where cubins are trusted (cubin_trust), as a wrong fact compiles the
  // wrong kernel; absent otherwise.
  llvm::Expected<std::optional<std::string>> get_snippet_fact(llvm::StringRef key);
  llvm::Error put_snippet_fact(llvm::StringRef key, llvm::StringRef value);

  // Removes tunings and cubins whose software differs from `current`, and
  // cubins unused for `unused_days` (0: keep).
  llvm::Expected<PruneReport> prune(const SoftwareFingerprint &current, int unused_days = 0);

  // YAML, so tunings travel between machines. Cubins are exported only when
  // asked, with the export's origin signed by this user's origin key
  // (cache/export_origin.h), and imported only as `options` say (they are
  // code).
  llvm::Error export_yaml(llvm::StringRef file, bool include_cubins = false);
  llvm::Expected<ImportReport> import_yaml(llvm::StringRef file,
                                           const ImportOptions &options = {});

 private:
  struct Impl;
  explicit TuningDb(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace flashjit
