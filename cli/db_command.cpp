// `flashjit db list | export FILE | import FILE | prune`: thin wrappers over
// TuningDb, so that tunings travel between machines as YAML and stale rows
// go only when asked.
#include <cstdlib>

#include "cli/commands.h"
#include "cli/db_common.h"
#include "runtime/tuning_key.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

namespace cl = llvm::cl;

namespace flashjit::cli {

DbPathOption::DbPathOption(cl::OptionCategory &category, const Subs &subs)
    : db("db", cl::desc("The tuning database (default $FLASHJIT_DB, else "
                        "$XDG_CACHE_HOME/flashjit/flashjit.db)"),
         cl::value_desc("PATH"), cl::cat(category), subs) {}

DbTrustOption::DbTrustOption(cl::OptionCategory &category, const Subs &subs)
    : scope("db-trust",
            cl::desc("Who besides you and root may write a database whose cubins are loaded: "
                     "owner (nobody; the default) or group (your groups). Default "
                     "$FLASHJIT_DB_TRUST"),
            cl::value_desc("owner|group"), cl::cat(category), subs) {}

llvm::Error DbTrustOption::apply() const {
  if (scope.getNumOccurrences() == 0) return llvm::Error::success();
  auto parsed = parse_trust_scope(scope);
  if (!parsed)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "--db-trust: " + llvm::toString(parsed.takeError()));
  setenv("FLASHJIT_DB_TRUST", to_string(*parsed), 1);
  return llvm::Error::success();
}

DbCommand::DbCommand(cl::OptionCategory &category)
    : args(cl::Positional, cl::desc("list | export FILE | import FILE | prune"), cl::ZeroOrMore,
           cl::sub(sub)),
      with_cubins("with-cubins", cl::desc("export: include the compiled cubins"),
                  cl::cat(category), cl::sub(sub)),
      accept_cubins("accept-cubins",
                    cl::desc("import: take the file's cubins too (they are code: only from a "
                             "source you trust)"),
                    cl::cat(category), cl::sub(sub)),
      unused_days("unused-days",
                  cl::desc("prune: also remove cubins unused for N days (default 0: keep)"),
                  cl::init("0"), cl::value_desc("N"), cl::cat(category), cl::sub(sub)) {}

namespace {

int list(const CommonOptions &common, const std::string &path) {
  std::string note;
  auto db = open_existing_database(path, note);
  std::vector<TuningRecord> tunings;
  std::vector<CubinRecord> cubins;
  if (db) {
    auto t = db->list_tunings();
    if (!t) return report_error(kExitFailure, t.takeError());
    tunings = std::move(*t);
    auto c = db->list_cubins(/*with_bytes=*/false);
    if (!c) return report_error(kExitFailure, c.takeError());
    cubins = std::move(*c);
  } else if (llvm::StringRef(note).startswith("database ")) {
    return report_error(kExitFailure, note);
  }

  if (common.json) {
    llvm::json::Array t, c;
    for (const TuningRecord &r : tunings)
      t.push_back(llvm::json::Object{{"device", device_json(r.device)},
                                     {"nvrtc_version", r.software.nvrtc_version},
                                     {"templates_hash", r.software.templates_hash},
                                     {"class", class_json(r.problem)},
                                     {"config", stored_config_json(r.config)},
                                     {"shape", r.shape},
                                     {"tflops", r.tflops},
                                     {"median_ms", r.median_ms},
                                     {"heuristic_ms", r.heuristic_ms},
                                     {"tuned_at", r.tuned_at},
                                     {"cubin_key", r.cubin_key}});
    for (const CubinRecord &r : cubins)
      c.push_back(llvm::json::Object{{"key", r.key},
                                     {"kernel_id", r.kernel_id},
                                     {"arch", r.arch},
                                     {"nvrtc_version", r.nvrtc_version},
                                     {"compile_ms", r.compile_ms},
                                     {"created_at", r.created_at},
                                     {"last_used_at", r.last_used_at}});
    llvm::json::Object o{{"database", path}, {"tunings", std::move(t)}, {"cubins", std::move(c)}};
    if (!note.empty()) o["note"] = note;
    print_json(std::move(o));
    return kExitOk;
  }
  llvm::raw_ostream &os = llvm::outs();
  if (!db) {
    os << note << "\n";
    return kExitOk;
  }
  os << llvm::formatv("{0}: {1} tunings, {2} cubins\n", path, tunings.size(), cubins.size());
  for (const TuningRecord &r : tunings)
    os << llvm::formatv("{0}  {1,-18} {2,7:f1} TFLOP/s  {3}  {4}\n", class_text(r.problem),
                        config_text(r.config), r.tflops, r.device.name, r.tuned_at);
  for (const CubinRecord &r : cubins) os << llvm::formatv("cubin {0} ({1})\n", r.kernel_id, r.arch);
  return kExitOk;
}

int import(const std::string &path, llvm::StringRef file, bool accept_cubins) {
  auto db = open_database(path);
  if (!db) return report_error(kExitFailure, db.takeError());
  auto report = (*db)->import_yaml(file, accept_cubins);
  if (!report) return report_error(kExitFailure, report.takeError());
  llvm::raw_ostream &os = llvm::outs();
  os << llvm::formatv("tunings: {0} added, {1} replaced\n", report->tunings_added,
                      report->tunings_replaced);
  os << llvm::formatv("cubins: {0} added, {1} replaced\n", report->cubins_added,
                      report->cubins_replaced);
  os << llvm::formatv("skipped: {0}\n", report->skipped.size());
  for (const std::string &why : report->skipped) os << "  " << why << "\n";
  return kExitOk;
}

int prune(const std::string &path, llvm::StringRef days_text) {
  int days = 0;
  if (days_text.getAsInteger(10, days) || days < 0)
    return report_error(kExitUsage,
                        llvm::formatv("--unused-days: expected an integer >= 0, got {0}",
                                      days_text.empty() ? "''" : days_text));
  // Stale means "another software fingerprint than this flashjit's".
  auto software = software_fingerprint();
  if (!software)
    return report_error(kExitFailure, "prune needs NVRTC to know which entries are current: " +
                                          first_line(software.takeError()));
  auto db = open_database(path);
  if (!db) return report_error(kExitFailure, db.takeError());
  auto report = (*db)->prune(*software, days);
  if (!report) return report_error(kExitFailure, report.takeError());
  llvm::outs() << llvm::formatv("removed {0} stale tunings, {1} cubins\n", report->stale_tunings,
                                report->stale_cubins);
  return kExitOk;
}

}  // namespace

int DbCommand::run(const CommonOptions &common, const DbPathOption &db) const {
  constexpr const char *kExpected = "list, export FILE, import FILE or prune";
  if (args.empty())
    return report_error(kExitUsage, llvm::formatv("db: expected {0}", kExpected));
  const std::string &action = args.front();
  const size_t want = action == "export" || action == "import" ? 2 : 1;
  if (action != "list" && action != "export" && action != "import" && action != "prune")
    return report_error(kExitUsage, llvm::formatv("db: expected {0}, got {1}", kExpected, action));
  if (args.size() < want)
    return report_error(kExitUsage, llvm::formatv("db {0}: expected a FILE", action));
  if (args.size() > want)
    return report_error(kExitUsage,
                        llvm::formatv("db {0}: unexpected argument '{1}'", action, args[want]));
  if (with_cubins && action != "export")
    return report_error(kExitUsage, "--with-cubins: only for db export");
  if (accept_cubins && action != "import")
    return report_error(kExitUsage, "--accept-cubins: only for db import");
  if (unused_days.getNumOccurrences() && action != "prune")
    return report_error(kExitUsage, "--unused-days: only for db prune");
  if (common.json && action != "list") return report_error(kExitUsage, "--json: only for db list");
  auto path = database_path(db.db);
  if (!path) return report_error(kExitUsage, path.takeError());

  if (action == "list") return list(common, *path);
  if (action == "import") return import(*path, args[1], accept_cubins);
  if (action == "prune") return prune(*path, unused_days);
  auto database = open_database(*path);
  if (!database) return report_error(kExitFailure, database.takeError());
  if (auto e = (*database)->export_yaml(args[1], with_cubins)) return report_error(kExitFailure, std::move(e));
  auto tunings = (*database)->list_tunings();
  auto cubins = (*database)->count_cubins();
  llvm::outs() << llvm::formatv("exported {0} tunings{1} to {2}\n",
                                tunings ? tunings->size() : 0,
                                with_cubins ? llvm::formatv(" and {0} cubins", cubins ? *cubins : 0).str() : "",
                                args[1]);
  if (!tunings) llvm::consumeError(tunings.takeError());
  if (!cubins) llvm::consumeError(cubins.takeError());
  return kExitOk;
}

}  // namespace flashjit::cli
