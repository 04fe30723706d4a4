// `flashjit db list | export FILE | import FILE | verify | prune`: thin
// wrappers over TuningDb, so that tunings travel between machines as YAML,
// cubins are checked by recompiling them (cli/db_verify.h), and stale rows
// go only when asked.
#include <cstdlib>

#include "cli/commands.h"
#include "cli/db_common.h"
#include "cli/db_verify.h"
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
    : args(cl::Positional, cl::desc("list | export FILE | import FILE | verify | prune"),
           cl::ZeroOrMore, cl::sub(sub)),
      with_cubins("with-cubins",
                  cl::desc("export: include the compiled cubins (signed with your origin key)"),
                  cl::cat(category), cl::sub(sub)),
      accept_cubins("accept-cubins",
                    cl::desc("import: take the file's cubins too (they are code: those of an "
                             "export that is not your own are recompiled, and stored only if "
                             "they reproduce)"),
                    cl::cat(category), cl::sub(sub)),
      verify("verify",
             cl::desc("import: take the file's cubins, each only if recompiling it here "
                      "reproduces it (the default for an export that is not your own)"),
             cl::cat(category), cl::sub(sub)),
      no_verify("no-verify",
                cl::desc("import: with --accept-cubins, store the cubins of a foreign export "
                         "without recompiling them (you vouch for the file)"),
                cl::cat(category), cl::sub(sub)),
      sample("sample", cl::desc("verify: recompile N cubins chosen at random (default 0: all)"),
             cl::init("0"), cl::value_desc("N"), cl::cat(category), cl::sub(sub)),
      repair("repair",
             cl::desc("verify: replace each cubin that differs with the one recompiled here"),
             cl::cat(category), cl::sub(sub)),
      threads("threads",
              cl::desc("verify, import: parallel NVRTC compiles (default 0: one per core)"),
              cl::init("0"), cl::value_desc("N"), cl::cat(category), cl::sub(sub)),
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

int import(const std::string &path, llvm::StringRef file, const ImportOptions &options) {
  auto db = open_database(path);
  if (!db) return report_error(kExitFailure, db.takeError());
  auto report = (*db)->import_yaml(file, options);
  if (!report) return report_error(kExitFailure, report.takeError());
  llvm::raw_ostream &os = llvm::outs();
  os << "origin: " << report->origin << "\n";
  os << llvm::formatv("tunings: {0} added, {1} replaced\n", report->tunings_added,
                      report->tunings_replaced);
  std::string how;
  if (report->cubins_verified)
    how = llvm::formatv(" (verified by recompiling; {0} refused)", report->cubins_refused).str();
  else if (report->cubins_added + report->cubins_replaced)
    how = report->same_origin ? " (your own export: not recompiled)"
                              : " (not verified: --no-verify)";
  os << llvm::formatv("cubins: {0} added, {1} replaced{2}\n", report->cubins_added,
                      report->cubins_replaced, how);
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

// A count flag's value: an integer >= 0.
bool count_value(llvm::StringRef text, int &out) {
  return !text.getAsInteger(10, out) && out >= 0;
}

int DbCommand::run(const CommonOptions &common, const DbPathOption &db) const {
  constexpr const char *kExpected = "list, export FILE, import FILE, verify or prune";
  if (args.empty())
    return report_error(kExitUsage, llvm::formatv("db: expected {0}", kExpected));
  const std::string &action = args.front();
  const size_t want = action == "export" || action == "import" ? 2 : 1;
  if (action != "list" && action != "export" && action != "import" && action != "verify" &&
      action != "prune")
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
  if ((verify || no_verify) && action != "import")
    return report_error(kExitUsage,
                        llvm::formatv("--{0}: only for db import", verify ? "verify" : "no-verify"));
  if (verify && no_verify) return report_error(kExitUsage, "--verify and --no-verify: pick one");
  if (no_verify && !accept_cubins)
    return report_error(kExitUsage, "--no-verify: only with --accept-cubins");
  if (sample.getNumOccurrences() && action != "verify")
    return report_error(kExitUsage, "--sample: only for db verify");
  if (repair && action != "verify") return report_error(kExitUsage, "--repair: only for db verify");
  if (threads.getNumOccurrences() && action != "verify" && action != "import")
    return report_error(kExitUsage, "--threads: only for db verify and db import");
  int sample_count = 0, thread_count = 0;
  if (!count_value(sample, sample_count))
    return report_error(kExitUsage,
                        llvm::formatv("--sample: expected an integer >= 0, got {0}",
                                      sample.empty() ? std::string("''") : std::string(sample)));
  if (!count_value(threads, thread_count))
    return report_error(kExitUsage,
                        llvm::formatv("--threads: expected an integer >= 0, got {0}",
                                      threads.empty() ? std::string("''") : std::string(threads)));
  if (common.json && action != "list" && action != "verify")
    return report_error(kExitUsage, "--json: only for db list and db verify");
  auto path = database_path(db.db);
  if (!path) return report_error(kExitUsage, path.takeError());

  if (action == "list") return list(common, *path);
  if (action == "verify") return verify_database(common, *path, sample_count, thread_count, repair);
  if (action == "import") {
    ImportOptions options;
    // --verify takes the cubins too: those it stores reproduce here.
    options.accept_cubins = accept_cubins || verify;
    options.verify = verify      ? ImportOptions::Verify::always
                     : no_verify ? ImportOptions::Verify::never
                                 : ImportOptions::Verify::foreign;
    options.reproduce = import_verifier(thread_count);
    return import(*path, args[1], options);
  }
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
