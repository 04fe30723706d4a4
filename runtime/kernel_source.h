// Where a call's config and cubin come from. Config: the caller's,
// else the database's tuning for this device, software and problem class
// (exact bucket, then the nearest one tuned where the heuristic picked the
// tiles it picks here), else the heuristic. Cubin: the process
// cache, else the database's cubin store, else NVRTC (and the result is
// stored). The database is optional: without one (FLASHJIT_DB=off, or a
// file that cannot be opened) everything works from the heuristic and NVRTC.
#pragma once

#include <functional>
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

// What the choice needs to know of a pass (the forward, the backward and its
// deterministic mode are classes of their own): the `pass` of its class key
// (class_pass), whether a stored config still builds a valid spec on the
// device (an error says why not), and its heuristic for what is left.
struct PassRules {
  const char *class_pass = "fwd";
  std::string modifiers;  // the caller's modifiers' hash ("": none), part of the class
  std::function<llvm::Error(const KernelConfig &)> validate;
  std::function<KernelConfig(const KernelConfig &requested)> heuristic;
};

// caller > tuned > nearest > heuristic for any pass. A stored config keeps
// the requested `deterministic` (the class key already says which mode was
// tuned).
llvm::Expected<ChosenConfig> choose_config(const Problem &problem, const KernelConfig &requested,
                                           const DeviceInfo &device, TuningDb *db,
                                           const PassRules &rules);

// Decides nothing itself: reads what the tuner stored, or asks the heuristic.
// `modifiers`: the hash of the caller's modifiers ("" for none).
llvm::Expected<ChosenConfig> choose_forward_config(const Problem &problem,
                                                   const KernelConfig &requested,
                                                   const DeviceInfo &device, TuningDb *db,
                                                   llvm::StringRef modifiers = "");

// choose_forward_config with the process's database: what a forward call on
// `device` would run, and why (for `flashjit query` and tests).
llvm::Expected<ChosenConfig> explain_forward_config(const Problem &problem,
                                                    const KernelConfig &requested,
                                                    const DeviceInfo &device,
                                                    llvm::StringRef modifiers = "");

// The cubin for `spec`: from `db`'s cubin store when present and intact
// and the database trusted (TuningDb::cubin_trust; an untrusted one is
// reported once per process on stderr), else compiled with NVRTC and
// stored (when `db` is non-null).
struct CubinSource {
  std::vector<char> bytes;
  std::string entry;
  bool compiled = false;  // false: loaded from the database
  double compile_ms = 0;
  std::string key;
};
llvm::Expected<CubinSource> forward_cubin(const KernelSpec &spec, TuningDb *db);
// The program of `spec`'s pass (the forward's, or the backward's three
// kernels), the same way.
llvm::Expected<CubinSource> kernel_cubin(const KernelSpec &spec, TuningDb *db);
// The same for any generated program (the backward's, the GPU reference's):
// `kernel_id` only labels the stored row.
llvm::Expected<CubinSource> stored_cubin(const GeneratedSource &source, const TargetArch &arch,
                                         llvm::StringRef kernel_id, TuningDb *db);

}  // namespace flashjit
