// Where a forward call's config and cubin come from. Config: the caller's,
// else the database's tuning for this device, software and problem class
// (exact bucket, then the nearest), else the heuristic. Cubin: the process
// cache, else the database's cubin store, else NVRTC (and the result is
// stored). The database is optional: without one (FLASHJIT_DB=off, or a
// file that cannot be opened) everything works from the heuristic and NVRTC.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/tuning_db.h"
#include "flashjit/problem.h"
#include "generator/kernel_spec.h"
#include "generator/source.h"
#include "runtime/device.h"
#include "runtime/loaded_kernel.h"
#include "llvm/Support/Error.h"

namespace flashjit {

enum class ConfigSource { caller, tuned, nearest, heuristic };
const char *to_string(ConfigSource source);

struct ChosenConfig {
  KernelConfig config;
  ConfigSource source = ConfigSource::heuristic;
  std::optional<TuningRecord> record;  // for tuned / nearest
  // Why a database entry was passed over (stale config, database error), for
  // `flashjit query`; empty when nothing was.
  std::string note;
};

// The process's database (opened once, lazily, at TuningDb::default_path());
// null when disabled or unavailable (the reason is kept for `flashjit info`).
TuningDb *process_tuning_db();
std::string process_tuning_db_status();

// Decides nothing itself: reads what the tuner stored, or asks the heuristic.
llvm::Expected<ChosenConfig> choose_forward_config(const Problem &problem,
                                                   const KernelConfig &requested,
                                                   const DeviceInfo &device, TuningDb *db);

// choose_forward_config with the process's database: what a forward call on
// `device` would run, and why (for `flashjit query` and tests).
llvm::Expected<ChosenConfig> explain_forward_config(const Problem &problem,
                                                    const KernelConfig &requested,
                                                    const DeviceInfo &device);

// The cubin for `spec`: from `db`'s cubin store when present and intact,
// else compiled with NVRTC and stored (when `db` is non-null).
struct CubinSource {
  std::vector<char> bytes;
  std::string entry;
  bool compiled = false;  // false: loaded from the database
  double compile_ms = 0;
  std::string key;
};
llvm::Expected<CubinSource> forward_cubin(const KernelSpec &spec, TuningDb *db);
// The same for any generated program (the backward's, the GPU reference's):
// `kernel_id` only labels the stored row.
llvm::Expected<CubinSource> stored_cubin(const GeneratedSource &source, const TargetArch &arch,
                                         llvm::StringRef kernel_id, TuningDb *db);

}  // namespace flashjit
