// `flashjit info`: what this machine offers flashjit. Never fails for a
// missing GPU or NVRTC: saying so is its job.
#include <cstdlib>
#include <optional>

#include "cli/commands.h"
#include "cli/db_common.h"
#include "generator/source.h"
#include "runtime/cuda_driver.h"
#include "runtime/device.h"
#include "runtime/nvrtc_compiler.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

namespace flashjit::cli {

namespace {

// The database's path and what is in it, without creating it: `info` only
// looks.
struct DatabaseState {
  std::string path;
  int64_t tunings = -1;  // -1: unknown
  int64_t cubins = -1;
  std::string note;  // why there are no counts
  // Whether its cubins would be loaded, and why (empty: no file to judge).
  std::optional<DbTrust> trust;
};

DatabaseState database_state(llvm::StringRef db_flag) {
  DatabaseState state;
  auto path = database_path(db_flag);
  if (!path) {
    llvm::consumeError(path.takeError());
    state.path = "disabled";
    state.note = std::string("FLASHJIT_DB=") + std::getenv("FLASHJIT_DB");
    return state;
  }
  state.path = *path;
  if (!llvm::sys::fs::exists(state.path)) {
    state.note = "not created yet: tune or precompile creates it";
    return state;
  }
  auto db = open_existing_database(state.path, state.note);
  if (!db) return state;
  state.trust = db->cubin_trust();
  auto tunings = db->list_tunings();
  auto cubins = db->count_cubins();
  if (!tunings) state.note = first_line(tunings.takeError());
  if (!cubins) state.note = first_line(cubins.takeError());
  if (tunings && cubins) {
    state.tunings = int64_t(tunings->size());
    state.cubins = *cubins;
  }
  return state;
}

}  // namespace

int InfoCommand::run(const CommonOptions &common, const DbPathOption &db_option) const {
  llvm::json::Array gpus;
  std::string gpu_note;
  std::string driver_library;
  int driver_version = 0;
  if (auto driver = cuda_driver()) {
    driver_library = driver->library;
    auto count = device_count();
    if (!count) {
      gpu_note = first_line(count.takeError());
    } else if (*count == 0) {
      gpu_note = "the driver reports no devices";
    }
    for (int i = 0; count && i < *count; ++i) {
      auto device = query_device(i);
      if (!device) {
        gpu_note = first_line(device.takeError());
        break;
      }
      driver_version = device->driver_version;
      gpus.push_back(llvm::json::Object{
          {"ordinal", device->ordinal},
          {"name", device->name},
          {"compute_capability", llvm::formatv("{0}.{1}", device->cc_major, device->cc_minor).str()},
          {"target", device->target().name()},
          {"sms", device->sm_count},
          {"smem_per_block_optin", device->max_smem_per_block_optin},
          {"smem_per_sm", device->max_smem_per_sm},
          {"l2_bytes", device->l2_bytes},
          {"memory_bytes", int64_t(device->total_memory)}});
    }
  } else {
    gpu_note = first_line(driver.takeError());
  }

  std::string nvrtc_version_text, nvrtc_library, nvrtc_note;
  if (auto version = nvrtc_version()) {
    nvrtc_version_text = *version;
    auto api = detail::load_nvrtc(
        detail::nvrtc_search_list(std::getenv("FLASHJIT_NVRTC"), std::getenv("CUDA_HOME")));
    if (api)
      nvrtc_library = api->library;
    else
      llvm::consumeError(api.takeError());
  } else {
    nvrtc_note = first_line(version.takeError());
  }
  const DatabaseState db = database_state(db_option.db);

  if (common.json) {
    llvm::json::Object o{{"gpus", std::move(gpus)},
                         {"templates_hash", templates_hash()},
                         {"database", db.path},
                         {"version", FLASHJIT_VERSION}};
    if (db.tunings >= 0) {
      o["database_tunings"] = db.tunings;
      o["database_cubins"] = db.cubins;
    }
    if (!db.note.empty()) o["database_note"] = db.note;
    if (db.trust) {
      o["database_trusted"] = db.trust->trusted;
      o["database_trust"] = db.trust->state();
    }
    if (!gpu_note.empty()) o["gpu_note"] = gpu_note;
    if (!driver_library.empty()) o["driver_library"] = driver_library;
    if (driver_version) o["driver_version"] = driver_text(driver_version);
    if (!nvrtc_version_text.empty()) o["nvrtc_version"] = nvrtc_version_text;
    if (!nvrtc_library.empty()) o["nvrtc_library"] = nvrtc_library;
    if (!nvrtc_note.empty()) o["nvrtc_note"] = nvrtc_note;
    print_json(std::move(o));
    return kExitOk;
  }

  llvm::raw_ostream &os = llvm::outs();
  os << "flashjit " << FLASHJIT_VERSION << "\n";
  if (gpus.empty()) os << "GPU: none (" << gpu_note << ")\n";
  for (const llvm::json::Value &value : gpus) {
    const llvm::json::Object &g = *value.getAsObject();
    os << llvm::formatv(
        "GPU {0}: {1}, compute capability {2} ({3}), {4} SMs, {5} KB smem/block opt-in, "
        "{6} MB L2, {7:f1} GB memory\n",
        *g.getInteger("ordinal"), *g.getString("name"), *g.getString("compute_capability"),
        *g.getString("target"), *g.getInteger("sms"), *g.getInteger("smem_per_block_optin") / 1024,
        *g.getInteger("l2_bytes") / (1024 * 1024),
        double(*g.getInteger("memory_bytes")) / (1024.0 * 1024 * 1024));
  }
  if (driver_version)
    os << "Driver: " << driver_text(driver_version) << " (" << driver_library << ")\n";
  if (!nvrtc_version_text.empty())
    os << "NVRTC: " << nvrtc_version_text << " ("
       << (nvrtc_library.empty() ? "path unknown" : nvrtc_library) << ")\n";
  else
    os << "NVRTC: none (" << nvrtc_note << ")\n";
  os << "Templates: " << templates_hash() << "\n";
  if (db.tunings >= 0)
    os << llvm::formatv("Database: {0} ({1} tunings, {2} cubins)\n", db.path, db.tunings,
                        db.cubins);
  else
    os << "Database: " << db.path << " (" << db.note << ")\n";
  if (db.trust) os << "Database trust: " << db.trust->state() << "\n";
  return kExitOk;
}

}  // namespace flashjit::cli
