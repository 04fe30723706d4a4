#include "runtime/kernel_source.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "generator/heuristic.h"
#include "generator/source.h"
#include "runtime/nvrtc_compiler.h"
#include "runtime/runtime_counters.h"
#include "runtime/tuning_key.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit {
namespace {

struct ProcessDb {
  std::unique_ptr<TuningDb> db;  // null: disabled or unavailable
  std::string status;
};

// Opened on first use, not at load: a process that never calls forward never
// touches the file. Never destroyed: kernels may be requested from static
// destructors of other libraries.
const ProcessDb &process_db() {
  static const ProcessDb *state = [] {
    PhaseTimer opening(runtime_counters().database_ns);
    auto *out = new ProcessDb;
    const char *env = std::getenv("FLASHJIT_DB");
    llvm::StringRef setting = env ? llvm::StringRef(env).trim() : llvm::StringRef();
    if (setting.equals_insensitive("off") || setting.equals_insensitive("none")) {
      out->status = llvm::formatv("disabled (FLASHJIT_DB={0})", setting).str();
      return out;
    }
    const std::string path = TuningDb::default_path();
    auto db = TuningDb::open(path);
    if (!db) {
      // Not printed (the library prints only report_untrusted's warning): a
      // caller sees the reason through process_tuning_db_status()
      // (`flashjit info`), and forward keeps working from the heuristic and
      // NVRTC.
      std::string why = llvm::toString(db.takeError());
      out->status = llvm::StringRef(why).contains(path) ? "unavailable: " + why
                                                        : "unavailable (" + path + "): " + why;
      return out;
    }
    out->db = std::move(*db);
    out->status = path;
    return out;
  }();
  return *state;
}

// The NVRTC version and template hash cannot change while the process runs;
// querying them once keeps the first call of every later class cheap.
llvm::Expected<const SoftwareFingerprint &> process_software() {
  struct Cached {
    SoftwareFingerprint fingerprint;
    std::string error;
  };
  static const Cached *cached = [] {
    auto *out = new Cached;
    auto fp = software_fingerprint();
    if (fp)
      out->fingerprint = std::move(*fp);
    else
      out->error = llvm::toString(fp.takeError());
    return out;
  }();
  if (!cached->error.empty())
    return llvm::createStringError(llvm::inconvertibleErrorCode(), cached->error);
  return cached->fingerprint;
}

// A caller's partial config is a requirement: a stored config is used only
// when it agrees with every field the caller set.
bool agrees_with_request(const KernelConfig &stored, const KernelConfig &requested) {
  auto agrees = [](int set, int value) { return set == 0 || set == value; };
  if (requested.path != KernelPath::automatic && requested.path != stored.path) return false;
  return agrees(requested.block_m, stored.block_m) && agrees(requested.block_n, stored.block_n) &&
         agrees(requested.warps, stored.warps) && agrees(requested.stages, stored.stages);
}

void append_note(std::string &notes, const llvm::Twine &note) {
  if (!notes.empty()) notes += "; ";
  notes += note.str();
}

// The stored config of `record` if it is still usable for the call: it may
// predate a change of the traits' rules, or come from a device with more
// shared memory, or be hand-edited.
std::optional<KernelConfig> usable_config(const TuningRecord &record,
                                          const KernelConfig &requested, const PassRules &rules,
                                          llvm::StringRef what, std::string &notes) {
  auto config = from_stored(record.config);
  if (!config) {
    append_note(notes, llvm::formatv("{0} entry ignored: {1}", what,
                                     llvm::toString(config.takeError())));
    return std::nullopt;
  }
  config->deterministic = requested.deterministic;
  if (!agrees_with_request(*config, requested)) {
    append_note(notes, llvm::formatv("{0} entry ({1}) differs from the requested config", what,
                                     describe(*config)));
    return std::nullopt;
  }
  if (llvm::Error invalid = rules.validate(*config)) {
    append_note(notes, llvm::formatv("{0} entry ({1}) no longer validates: {2}", what,
                                     describe(*config), llvm::toString(std::move(invalid))));
    return std::nullopt;
  }
  return *config;
}

// How many of the nearest buckets a call looks through for one whose
// heuristic agrees (a class holds a few dozen tunings at most).
constexpr int kNearestCandidates = 16;

// A config's tiles as "sm90 128x128 w12 s3": what a nearest bucket's
// heuristic is compared on (the decode fields follow each call's shape).
std::string tiles_text(StoredConfig c) {
  c.splits = 1;
  c.pack_gqa = "off";
  return config_text(c);
}

// Every cubin NVRTC writes is an ELF file: anything else in the store is
// damage the blob hash did not catch, and must not reach cuModuleLoadData.
bool looks_like_cubin(llvm::ArrayRef<char> bytes) {
  return bytes.size() > 4 && llvm::StringRef(bytes.data(), 4) == "\x7f" "ELF";
}

// The one thing the library prints: a database whose cubins it will not
// load costs every first call a compile, and its owner must hear why (the
// path, the mode, the fix) to mend it. Once per process and path.
void report_untrusted(const std::string &path, const DbTrust &trust) {
  static std::mutex mutex;
  static auto *reported = new llvm::StringSet<>;
  {
    std::lock_guard lock(mutex);
    if (!reported->insert(path).second) return;
  }
  std::fprintf(stderr, "flashjit: warning: %s\n", trust.warning(path).c_str());
}

}  // namespace

const char *to_string(ConfigSource source) {
  switch (source) {
    case ConfigSource::caller: return "caller";
    case ConfigSource::tuned: return "tuned";
    case ConfigSource::nearest: return "nearest";
    case ConfigSource::heuristic: return "heuristic";
  }
  return "?";
}

TuningDb *process_tuning_db() { return process_db().db.get(); }

std::string process_tuning_db_status() { return process_db().status; }

llvm::Expected<ChosenConfig> choose_config(const Problem &problem, const KernelConfig &requested,
                                           const DeviceInfo &device, TuningDb *db,
                                           const PassRules &rules) {
  ChosenConfig chosen;
  if (requested.is_complete()) {
    chosen.config = requested;
    chosen.source = ConfigSource::caller;
    return chosen;
  }

  // Database trouble of any kind (no NVRTC to fingerprint, a locked or
  // damaged file) costs the tuned config, never the call.
  if (db) {
    auto software = process_software();
    if (!software) {
      append_note(chosen.note, "tunings not consulted: " + llvm::toString(software.takeError()));
    } else {
      const DeviceFingerprint dev = device_fingerprint(device);
      const ProblemClassKey key = problem_class_key(problem, rules.class_pass, rules.modifiers);
      auto take = [&](TuningRecord &record, ConfigSource source, const char *what) {
        auto config = usable_config(record, requested, rules, what, chosen.note);
        if (!config) return false;
        chosen.config = *config;
        chosen.source = source;
        chosen.record = std::move(record);
        return true;
      };
      std::optional<PhaseTimer> reading(std::in_place, runtime_counters().database_ns);
      auto tuned = db->find_tuning(dev, *software, key);
      if (!tuned)
        append_note(chosen.note, "tuned lookup failed: " + llvm::toString(tuned.takeError()));
      else if (*tuned && take(**tuned, ConfigSource::tuned, "tuned"))
        return chosen;
      // A nearest bucket's tuning is a correction of the heuristic measured
      // at another size, so it carries over only where the heuristic picks
      // the same tiles here as it picked there; where it picks others, it
      // knows something of this size that the tuning never measured (H100,
      // d=64 causal 8k: a 1k tuning's 128x128 ran at 432 TFLOP/s, the
      // heuristic's 192x112 at 488).
      auto nearest = db->nearest_tunings(dev, *software, key, kNearestCandidates);
      reading.reset();
      if (!nearest) {
        append_note(chosen.note, "nearest lookup failed: " + llvm::toString(nearest.takeError()));
      } else if (!nearest->empty()) {
        KernelConfig open;
        open.deterministic = requested.deterministic;
        const std::string here = tiles_text(to_stored(rules.heuristic(open)));
        int passed_over = 0;
        std::string first_passed;
        for (TuningRecord &record : *nearest) {
          // The nearest bucket may be this very class, already passed over.
          if (record.problem == key) continue;
          if (const std::string there = tiles_text(record.heuristic_config); there != here) {
            if (passed_over++ == 0)
              first_passed = llvm::formatv("{0}: the heuristic picked {1} there",
                                           record.shape.empty() ? "another size" : record.shape,
                                           there);
            continue;
          }
          if (take(record, ConfigSource::nearest, "nearest")) return chosen;
        }
        if (passed_over)
          append_note(chosen.note,
                      llvm::formatv("{0} nearest {1} passed over, tuned where the heuristic picks "
                                    "other tiles than its {2} here (first: {3})",
                                    passed_over, passed_over == 1 ? "entry" : "entries", here,
                                    first_passed));
      }
    }
  }

  chosen.config = rules.heuristic(requested);
  chosen.source = ConfigSource::heuristic;
  return chosen;
}

llvm::Expected<ChosenConfig> choose_forward_config(const Problem &problem,
                                                   const KernelConfig &requested,
                                                   const DeviceInfo &device, TuningDb *db,
                                                   llvm::StringRef modifiers) {
  PassRules rules;
  rules.class_pass = class_pass(Pass::forward);
  rules.modifiers = modifiers.str();
  rules.validate = [&](const KernelConfig &config) {
    return make_forward_spec(problem, config, device.target(), device.max_smem_per_block_optin,
                             !modifiers.empty())
        .takeError();
  };
  rules.heuristic = [&](const KernelConfig &partial) {
    return default_forward_config(problem, device.target(), device.max_smem_per_block_optin,
                                  partial, device.sm_count, !modifiers.empty());
  };
  auto chosen = choose_config(problem, requested, device, db, rules);
  if (!chosen) return chosen.takeError();
  // The caller's split count and packing win over a tuning's; what is left
  // to the heuristic (a caller's complete tiles say nothing of them) is
  // filled from the problem's shape.
  if (requested.splits) chosen->config.splits = requested.splits;
  if (requested.pack_gqa != GqaPacking::automatic) chosen->config.pack_gqa = requested.pack_gqa;
  chosen->config = with_decode_fields(problem, chosen->config, device.sm_count);
  return chosen;
}

llvm::Expected<ChosenConfig> explain_forward_config(const Problem &problem,
                                                    const KernelConfig &requested,
                                                    const DeviceInfo &device,
                                                    llvm::StringRef modifiers) {
  return choose_forward_config(problem, requested, device, process_tuning_db(), modifiers);
}

llvm::Expected<CubinSource> forward_cubin(const KernelSpec &spec, TuningDb *db) {
  return stored_cubin(generate_forward(spec), spec.arch, spec.id(), db);
}

llvm::Expected<CubinSource> kernel_cubin(const KernelSpec &spec, TuningDb *db) {
  if (spec.pass == Pass::backward)
    return stored_cubin(generate_backward(spec), spec.arch, spec.id(), db);
  return forward_cubin(spec, db);
}

llvm::Expected<CubinSource> stored_cubin(const GeneratedSource &source, const TargetArch &arch,
                                         llvm::StringRef kernel_id, TuningDb *db) {
  CubinSource out;
  out.entry = source.entry;

  // The key needs the NVRTC version; without NVRTC nothing can be compiled
  // either, and compile_to_cubin below reports that clearly.
  auto version = nvrtc_version();
  std::string nvrtc;
  if (version) {
    nvrtc = std::move(*version);
    out.key = cubin_key(source, arch, nvrtc);
  } else {
    llvm::consumeError(version.takeError());
  }

  if (db && !out.key.empty()) {
    PhaseTimer reading(runtime_counters().database_ns);
    // Checked before the first cubin is read: whoever can write the
    // database chooses the code this process runs.
    if (const DbTrust &trust = db->cubin_trust(); !trust.trusted) {
      report_untrusted(db->path(), trust);
    } else if (auto record = db->get_cubin(out.key); !record) {
      llvm::consumeError(record.takeError());  // unreadable store: compile instead
    } else if (*record && looks_like_cubin((*record)->bytes)) {
      out.bytes = std::move((*record)->bytes);
      out.compiled = false;
      return out;
    }
  }

  auto cubin = compile_to_cubin(source, arch);
  if (!cubin) return cubin.takeError();
  out.bytes = std::move(cubin->bytes);
  out.compiled = true;
  out.compile_ms = cubin->compile_ms;

  if (db && !out.key.empty()) {
    CubinRecord record;
    record.key = out.key;
    record.kernel_id = kernel_id.str();
    record.arch = arch.name();
    record.nvrtc_version = nvrtc;
    record.bytes = out.bytes;
    // blob_sha256, created_at and last_used_at are left for the store to
    // fill, so that its integrity check and clock are the only ones.
    record.compile_ms = out.compile_ms;
    // A read-only or busy database only costs the next process a compile.
    PhaseTimer writing(runtime_counters().database_ns);
    llvm::consumeError(db->put_cubin(record));
  }
  return out;
}

}  // namespace flashjit
