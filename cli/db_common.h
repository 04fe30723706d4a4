// What tune, precompile, query, db and info share: the database path and
// connection, a plan from --plan or from the problem flags, and how stored
// configs and fingerprints are printed.
#pragma once

#include <memory>
#include <string>

#include "cache/tuning_db.h"
#include "cli/cli_common.h"
#include "cli/modifier_options.h"
#include "runtime/tuning_key.h"  // config_text
#include "tuner/plan.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

namespace flashjit::cli {

// --db, else TuningDb::default_path(). Fails (a usage error) when the
// database is switched off with FLASHJIT_DB=off and no --db is given.
llvm::Expected<std::string> database_path(llvm::StringRef db_flag);
// Opens (and creates) the database; the message names the path.
llvm::Expected<std::unique_ptr<TuningDb>> open_database(llvm::StringRef path);
// Opens it only when the file exists: reading commands never create one.
// Null (and `note` says why) when there is none or it cannot be opened.
std::unique_ptr<TuningDb> open_existing_database(llvm::StringRef path, std::string &note);

// The problems a command works on: the plan file, or one problem from the
// flags (of the pass --pass and --deterministic say), with the modifiers'
// flags where given (a plan names its own: the flags beside it are an
// error). Both at once is a usage error, as are bad flags and plan errors;
// `exit_code` says which kind of failure it was.
llvm::Expected<TuningPlan> plan_or_problem(const ProblemOptions &problem, llvm::StringRef plan_file,
                                           int &exit_code,
                                           const ModifierOptions *modifiers = nullptr);

llvm::json::Object stored_config_json(const StoredConfig &config);
// "NVIDIA H200 (cc 9.0, 132 SMs, driver 13.0)"
std::string device_text(const DeviceFingerprint &device);
llvm::json::Object device_json(const DeviceFingerprint &device);
std::string driver_text(int version);
// "bf16 d=128/128 causal gqa=4 sq<=2^13 sk<=2^13 bh<=2^9"
std::string class_text(const ProblemClassKey &key);
llvm::json::Object class_json(const ProblemClassKey &key);
// How a packed batch's class is sized ("" for a dense problem): its
// sequences, longest lengths and total (0: unknown), the dense batch it
// counts as (class_view) and `key`'s buckets. query and tune print it.
std::string packed_class_text(const Problem &problem, int64_t total_q, const ProblemClassKey &key);
std::string first_line(llvm::Error error);

}  // namespace flashjit::cli
