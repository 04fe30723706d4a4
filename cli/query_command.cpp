// `flashjit query`: the config a forward call of this problem (or, with
// --pass bwd, a backward call) would run, and why: tuned (exact bucket),
// nearest (another bucket of the same class) or heuristic. The device comes from the GPU; without one, from --arch and
// --device-name matched against the database's tunings, so that a machine
// with no GPU can inspect a database filled elsewhere.
#include <cmath>

#include "cli/commands.h"
#include "cli/db_common.h"
#include "cli/problem_flags.h"
#include "generator/backward_spec.h"
#include "generator/bwd_sm90_traits.h"
#include "generator/fwd_sm90_traits.h"
#include "generator/heuristic.h"
#include "generator/modifier_source.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"
#include "runtime/backward_source.h"
#include "runtime/device.h"
#include "runtime/kernel_source.h"
#include "runtime/modifier_facts.h"
#include "runtime/tuning_key.h"

namespace cl = llvm::cl;

namespace flashjit::cli {

QueryCommand::QueryCommand(cl::OptionCategory &category)
    : arch("arch", cl::desc("Ask for this architecture's GPU instead of the one here"),
           cl::value_desc("sm_90a|sm_80|..."), cl::cat(category), cl::sub(sub)),
      device_name("device-name",
                  cl::desc("Ask for the tunings of this GPU model (as `flashjit info` names it)"),
                  cl::value_desc("NAME"), cl::cat(category), cl::sub(sub)),
      modifiers(category, sub) {}

namespace {

// A device that is not here, as the database knows it: the most recent
// tuning of a GPU with this name and/or architecture gives SM count and
// driver (both part of the key).
DeviceInfo device_from_flags(const std::optional<TargetArch> &arch, llvm::StringRef name,
                             TuningDb *db, std::string &note) {
  DeviceInfo device;
  device.name = name.str();
  const TargetArch target = arch ? *arch : TargetArch::for_device(9, 0);
  device.cc_major = target.major;
  device.cc_minor = target.minor;
  std::optional<TuningRecord> best;
  if (db) {
    auto tunings = db->list_tunings();
    if (!tunings) {
      note = first_line(tunings.takeError());
    } else {
      for (TuningRecord &r : *tunings) {
        if (!name.empty() && r.device.name != name) continue;
        if (arch && TargetArch::for_device(r.device.cc_major, r.device.cc_minor) != *arch)
          continue;
        if (!best || r.tuned_at > best->tuned_at) best = std::move(r);
      }
    }
  }
  if (best) {
    device.name = best->device.name;
    device.cc_major = best->device.cc_major;
    device.cc_minor = best->device.cc_minor;
    device.sm_count = best->device.sm_count;
    device.driver_version = best->device.driver_version;
  } else if (note.empty()) {
    note = name.empty() && !arch ? "the heuristic's choice for sm_90a; pass --arch and "
                                   "--device-name for the tunings of another machine"
                                 : "no tunings of that GPU in the database";
  }
  // The architecture's opt-in limit: what the device would report.
  device.max_smem_per_block_optin = max_smem_per_block(device.target());
  return device;
}

llvm::json::Object measurements_json(const TuningRecord &r) {
  llvm::json::Object o{{"tflops", r.tflops},
                       {"median_ms", r.median_ms},
                       {"min_ms", r.min_ms},
                       {"max_ms", r.max_ms},
                       {"heuristic_ms", r.heuristic_ms},
                       {"heuristic_config", stored_config_json(r.heuristic_config)},
                       {"occupancy", r.occupancy},
                       {"registers", r.registers},
                       {"smem_bytes", r.smem_bytes},
                       {"spill_bytes", r.spill_bytes},
                       {"candidates_tried", r.candidates_tried},
                       {"candidates_failed", r.candidates_failed}};
  if (r.heuristic_ms > 0 && r.median_ms > 0) o["gain"] = r.heuristic_ms / r.median_ms;
  return o;
}

llvm::json::Object provenance_json(const TuningRecord &r) {
  return llvm::json::Object{{"tuned_at", r.tuned_at},
                            {"device", device_json(r.device)},
                            {"nvrtc_version", r.software.nvrtc_version},
                            {"templates_hash", r.software.templates_hash},
                            {"flashjit_version", r.flashjit_version},
                            {"shape", r.shape},
                            {"class", class_json(r.problem)}};
}

void print_record(llvm::raw_ostream &os, const TuningRecord &r, bool nearest) {
  os << llvm::formatv("measured   {0:f1} TFLOP/s, median {1:f3} ms (min {2:f3}, max {3:f3})\n",
                      r.tflops, r.median_ms, r.min_ms, r.max_ms);
  if (r.heuristic_ms > 0 && r.median_ms > 0)
    os << llvm::formatv("gain       {0:f2}x over the heuristic ({1}, {2:f3} ms)\n",
                        r.heuristic_ms / r.median_ms, config_text(r.heuristic_config),
                        r.heuristic_ms);
  os << llvm::formatv("resources  occupancy {0} CTAs/SM, {1} registers, {2} bytes smem, {3} "
                      "bytes spills\n",
                      r.occupancy, r.registers, r.smem_bytes, r.spill_bytes);
  os << llvm::formatv("search     {0} candidates tried, {1} failed\n", r.candidates_tried,
                      r.candidates_failed);
  os << llvm::formatv("tuned      {0} on {1}\n", r.tuned_at, device_text(r.device));
  os << llvm::formatv("software   NVRTC {0}, templates {1}, flashjit {2}\n",
                      r.software.nvrtc_version, r.software.templates_hash, r.flashjit_version);
  os << llvm::formatv("{0}  {1} ({2})\n", nearest ? "from      " : "shape     ", class_text(r.problem),
                      r.shape);
}

}  // namespace

int QueryCommand::run(const CommonOptions &common, const ProblemOptions &problem,
                      const DbPathOption &db) const {
  auto parsed = parse_problem_flags(problem.values());
  if (!parsed) return report_error(kExitUsage, parsed.takeError());
  // The caller's modifiers: their hash is part of the class a call looks up.
  auto mods = modifiers.read(parsed->pass);
  if (!mods) return report_error(kExitUsage, mods.takeError());
  std::optional<TargetArch> target;
  if (!arch.empty()) {
    auto t = TargetArch::parse(arch);
    if (!t)
      return report_error(kExitUsage, llvm::formatv("--arch: {0}", llvm::toString(t.takeError())));
    target = *t;
  }
  auto path = database_path(db.db);
  std::string db_note;
  std::unique_ptr<TuningDb> database;
  if (!path) {
    // Switched off: what a forward call would get is then the heuristic.
    db_note = first_line(path.takeError());
  } else {
    database = open_existing_database(*path, db_note);
    if (!database && !db.db.empty() && llvm::StringRef(db_note).startswith("database "))
      return report_error(kExitFailure, db_note);
  }

  // The GPU here answers unless the flags ask about another one.
  std::string device_note;
  std::optional<DeviceInfo> device;
  auto here = query_device(0);
  if (!here) {
    device_note = "no GPU here (" + first_line(here.takeError()) + ")";
  } else if ((!target || here->target() == *target) &&
             (device_name.empty() || here->name == device_name)) {
    device = std::move(*here);
  }
  if (!device) {
    std::string lookup_note;
    device = device_from_flags(target, device_name, database.get(), lookup_note);
    device_note = device_note.empty() ? lookup_note
                  : lookup_note.empty() ? device_note
                                        : device_note + "; " + lookup_note;
  }

  // The modifiers as a call on the device compiles them (whether one block
  // map serves every batch and head): their hash is part of the class.
  auto block_map = block_map_text(*mods, device->target(), database.get());
  if (!block_map) return report_error(kExitFailure, block_map.takeError());
  if (!mods->empty()) {
    auto resolved = resolve_modifiers(*mods, parsed->pass, device->target(), database.get());
    if (!resolved) return report_error(kExitFailure, resolved.takeError());
    *mods = std::move(*resolved);
  }
  const std::string mods_hash = modifiers_hash(modifiers_of_pass(*mods, parsed->pass));

  // Only the class flags (--pass, --deterministic) reach query: the config
  // is what it reports.
  const bool backward = parsed->pass == Pass::backward;
  KernelConfig requested;
  requested.deterministic = parsed->config.deterministic;
  // A packed batch is classed as a call classes it: by its longest sequence
  // and its total (class_view).
  const Problem chooser = class_view(parsed->problem, parsed->total_q);
  auto chosen =
      backward
          ? choose_backward_config(chooser, requested, *device, database.get(), mods_hash)
          : choose_forward_config(chooser, requested, *device, database.get(), mods_hash);
  if (!chosen) return report_error(kExitFailure, chosen.takeError());
  std::string kernel_id;
  const TargetArch target_arch = device->target();
  const int max_smem = device->max_smem_per_block_optin;
  if (auto spec = backward ? make_backward_spec(parsed->problem, chosen->config, target_arch,
                                                max_smem)
                           : make_forward_spec(parsed->problem, chosen->config, target_arch,
                                               max_smem, !mods_hash.empty())) {
    spec->modifiers = *mods;
    kernel_id = spec->id();
  } else
    llvm::consumeError(spec.takeError());
  const ProblemClassKey asked =
      problem_class_key(chooser, class_pass(parsed->pass, requested.deterministic), mods_hash);
  const std::string packed = packed_class_text(parsed->problem, parsed->total_q, asked);
  // On Hopper, why the sm80 family runs where the sm90 one does not serve
  // the class (a head dim it lacks, the deterministic mode).
  std::string family_note;
  if (chosen->config.path == KernelPath::sm80 && target_arch.sm() == 90 &&
      target_arch.arch_specific) {
    const std::string why = backward ? sm90_backward_automatic_reason(parsed->problem, target_arch,
                                                                      requested.deterministic)
                                     : sm90_fallback_reason(parsed->problem, target_arch);
    if (!why.empty()) family_note = "sm80 family: " + why;
  }
  std::vector<std::string> notes;
  for (const std::string *n : {&family_note, &device_note, &db_note, &chosen->note})
    if (!n->empty()) notes.push_back(*n);
  const bool nearest = chosen->source == ConfigSource::nearest;

  if (common.json) {
    llvm::json::Object o{{"source", to_string(chosen->source)},
                         {"config", config_json(chosen->config)},
                         {"kernel_id", kernel_id},
                         {"arch", device->target().name()},
                         {"problem", problem_json(parsed->problem)},
                         {"class", class_json(asked)}};
    if (!block_map->empty()) o["block_map"] = *block_map;
    if (parsed->problem.varlen) {
      llvm::json::Object v{{"sequences", parsed->problem.batch},
                           {"longest_q", parsed->problem.seqlen_q},
                           {"longest_k", parsed->problem.seqlen_k},
                           {"sized_as_batch", chooser.batch},
                           {"explanation", packed}};
      if (parsed->total_q > 0) {
        v["total_q"] = parsed->total_q;
        v["total_k"] = parsed->total_k;
      }
      o["packed"] = std::move(v);
    }
    if (path) o["database"] = *path;
    if (database)
      o["database_trust"] = llvm::json::Object{{"trusted", database->cubin_trust().trusted},
                                               {"state", database->cubin_trust().state()}};
    if (chosen->record) {
      o["measurements"] = measurements_json(*chosen->record);
      o["provenance"] = provenance_json(*chosen->record);
    }
    if (!notes.empty()) {
      llvm::json::Array a;
      for (const std::string &n : notes) a.push_back(n);
      o["notes"] = std::move(a);
    }
    print_json(std::move(o));
    return kExitOk;
  }
  llvm::raw_ostream &os = llvm::outs();
  os << llvm::formatv("source     {0}\n", to_string(chosen->source));
  os << llvm::formatv("config     {0}\n", config_text(to_stored(chosen->config)));
  if (!kernel_id.empty()) os << llvm::formatv("kernel     {0}\n", kernel_id);
  if (!block_map->empty()) os << llvm::formatv("block map  {0}\n", *block_map);
  if (!packed.empty()) os << llvm::formatv("class      {0}\n", packed);
  if (chosen->record) print_record(os, *chosen->record, nearest);
  if (nearest)
    os << llvm::formatv("asked      {0}\n", class_text(asked));
  // Whether a call would load the kernel's cubin from this database or
  // compile it.
  if (database)
    os << llvm::formatv("database   {0}: {1}\n", database->path(),
                        database->cubin_trust().state());
  for (const std::string &n : notes) os << "note       " << n << "\n";
  return kExitOk;
}

}  // namespace flashjit::cli
