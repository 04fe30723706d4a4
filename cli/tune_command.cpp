// `flashjit tune`: every problem class of a plan (or of the flags) tuned on
// one or several GPUs of this host, the winners stored in the database, and
// a table of what won and by how much.
//
// Several GPUs: one worker thread per GPU pulls entries from a shared
// counter and opens its own TuningDb connection (SQLite connections are not
// shared across threads; WAL and the busy timeout let them write to one
// file side by side).
//
// Candidates are compiled and measured in worker processes of this binary
// (`flashjit worker`, tuner/worker_process.h): a compiler crash, a GPU fault
// or a hang fails one candidate, never the run. A class already tuned for
// this GPU and software is skipped unless --force, so a tune that was
// killed resumes where it stopped.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "cli/commands.h"
#include "cli/db_common.h"
#include "generator/kernel_spec.h"
#include "generator/modifier_source.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"
#include "runtime/device.h"
#include "runtime/modifier_facts.h"
#include "runtime/runtime_counters.h"
#include "runtime/tuning_key.h"
#include "tuner/modifier_inputs.h"
#include "tuner/tune_backward.h"
#include "tuner/tune_class.h"
#include "tuner/tuner.h"
#include "tuner/worker_process.h"

namespace cl = llvm::cl;

namespace flashjit::cli {

TuneCommand::TuneCommand(cl::OptionCategory &category)
    : plan("plan", cl::desc("Tune every problem of a YAML plan (instead of problem flags)"),
           cl::value_desc("FILE"), cl::cat(category), cl::sub(sub)),
      budget_s("budget-s", cl::desc("Soft limit per problem class in seconds (default 60)"),
               cl::init("60"), cl::value_desc("N"), cl::cat(category), cl::sub(sub)),
      devices("devices", cl::desc("GPUs to tune on, one worker each (default 0)"),
              cl::init("0"), cl::value_desc("all|0,1,..."), cl::cat(category), cl::sub(sub)),
      force("force", cl::desc("Tune classes already tuned for this GPU and software again"),
            cl::cat(category), cl::sub(sub)),
      candidate_timeout_s("candidate-timeout-s",
                          cl::desc("Kill a candidate's warm-up or timing after N seconds "
                                   "(a hung kernel; default 60)"),
                          cl::init("60"), cl::value_desc("N"), cl::cat(category), cl::sub(sub)),
      modifiers(category, sub),
      aux_values("aux-value",
                 cl::desc("The value of a scalar aux field of --aux the candidates run with, "
                          "e.g. prefix=1024 (pointer fields get generated arrays)"),
                 cl::value_desc("NAME=VALUE"), cl::cat(category), cl::sub(sub)) {}

namespace {

llvm::Error usage(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

// "all" or a list of distinct ordinals; checked against the GPUs present
// only after the flags, so that bad flags are usage errors on any machine.
llvm::Expected<std::vector<int>> parse_devices(llvm::StringRef text, int count) {
  constexpr const char *kExpected = "all or a list of GPU ordinals like 0,1";
  if (text == "all") {
    std::vector<int> all;
    for (int i = 0; i < count; ++i) all.push_back(i);
    return all;
  }
  std::vector<int> out;
  std::set<int> seen;
  llvm::SmallVector<llvm::StringRef, 8> parts;
  text.split(parts, ',');
  for (llvm::StringRef part : parts) {
    int ordinal = 0;
    if (part.trim().getAsInteger(10, ordinal) || ordinal < 0 || !seen.insert(ordinal).second)
      return usage(llvm::formatv("--devices: expected {0}, got {1}", kExpected, text));
    if (ordinal >= count)
      return usage(llvm::formatv("--devices: GPU {0} does not exist (this machine has {1})",
                                 ordinal, count));
    out.push_back(ordinal);
  }
  return out;
}

struct Row {
  const PlanEntry *entry = nullptr;
  std::optional<PackedBatch> packed;  // a varlen entry's lengths (entry_packed_batch)
  bool done = false;
  bool skipped = false;  // already tuned; outcome.record is the stored row
  std::string error;  // empty: tuned
  TuneOutcome outcome;
  int device = 0;
  double seconds = 0;
};

// A status line rewritten in place on a terminal; plain lines otherwise
// (logs, CI), so that nothing depends on carriage returns.
class Progress {
 public:
  Progress(size_t total) : total_(total), tty_(isatty(STDERR_FILENO)) {}

  void update(int device, const std::string &name, const std::string &text) {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::string line =
        llvm::formatv("[{0}/{1}] GPU {2} {3}: {4}", done_, total_, device, name, text).str();
    if (!tty_) {
      llvm::errs() << line << "\n";
      return;
    }
    // One terminal line: a bar, then as much of the message as fits.
    constexpr int kWidth = 24;
    const int filled = total_ ? int(kWidth * done_ / total_) : 0;
    std::string shown;
    shown.append(1, '[').append(filled, '#').append(kWidth - filled, '.').append("] ");
    shown.append(line);
    if (shown.size() > 118) shown.resize(115), shown.append("...");
    llvm::errs() << "\r\033[K" << shown;
    llvm::errs().flush();
  }

  void finished(const Row &row) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++done_;
    if (tty_) llvm::errs() << "\r\033[K";
    if (row.skipped)
      llvm::errs() << llvm::formatv("[{0}/{1}] GPU {2} {3}: already tuned: {4} (skipped)\n", done_,
                                    total_, row.device, row.entry->name,
                                    config_text(row.outcome.record.config));
    else if (row.error.empty())
      llvm::errs() << llvm::formatv("[{0}/{1}] GPU {2} {3}: {4}, {5:f1} TFLOP/s ({6:f1} s)\n",
                                    done_, total_, row.device, row.entry->name,
                                    config_text(row.outcome.record.config),
                                    row.outcome.record.tflops, row.seconds);
    else
      llvm::errs() << llvm::formatv("[{0}/{1}] GPU {2} {3}: failed: {4}\n", done_, total_,
                                    row.device, row.entry->name, row.error);
    llvm::errs().flush();
  }

 private:
  std::mutex mutex_;
  size_t done_ = 0;
  size_t total_;
  bool tty_;
};

struct WorkerSettings {
  std::string db_path;
  double budget_s = 60;
  int compile_threads = 0;
  double candidate_timeout_s = 60;
  bool force = false;
};

// The key `row`'s tuning is stored under: a packed batch's is the class its
// calls look up (class_view: the longest lengths and the total); a modified
// one's that of its pass's part of the snippets.
ProblemClassKey row_class_key(const Row &row, TuningDb *db = nullptr) {
  Modifiers compiled = modifiers_of_pass(row.entry->modifiers, row.entry->pass);
  // As the tune compiles them on the row's device (resolve_tuned_modifiers).
  if (!compiled.empty()) {
    auto device = cached_device_info(row.device);
    auto resolved = device ? resolve_modifiers(compiled, row.entry->pass, device->target(), db)
                           : llvm::Expected<Modifiers>(device.takeError());
    if (resolved)
      compiled = std::move(*resolved);
    else
      llvm::consumeError(resolved.takeError());
  }
  return problem_class_key(tuning_class_problem(row.entry->problem, row.packed),
                           class_pass(row.entry->pass, row.entry->deterministic),
                           compiled.empty() ? std::string() : modifiers_hash(compiled));
}

// The stored tuning of `row`'s class for this device and software, if any: a
// resumed tune skips it.
std::optional<TuningRecord> already_tuned(TuningDb &db, const Row &row, int device) {
  auto info = query_device(device);
  auto software = software_fingerprint();
  if (!info || !software) {
    if (!info) llvm::consumeError(info.takeError());
    if (!software) llvm::consumeError(software.takeError());
    return std::nullopt;  // the tune reports the same failure clearly
  }
  auto found = db.find_tuning(device_fingerprint(*info), *software, row_class_key(row, &db));
  if (!found) {
    llvm::consumeError(found.takeError());
    return std::nullopt;
  }
  return *found;
}

void worker(int device, const WorkerSettings &settings, std::vector<Row> &rows,
            std::atomic<size_t> &next, Progress &progress) {
  auto db = open_database(settings.db_path);
  std::string db_error = db ? "" : first_line(db.takeError());
  for (size_t i = next++; i < rows.size(); i = next++) {
    Row &row = rows[i];
    row.device = device;
    const auto start = std::chrono::steady_clock::now();
    std::optional<TuningRecord> stored;
    if (db_error.empty() && !settings.force)
      stored = already_tuned(**db, row, device);
    if (!db_error.empty()) {
      row.error = db_error;
    } else if (stored) {
      row.skipped = true;
      row.outcome.record = std::move(*stored);
    } else {
      TuneOptions options;
      options.device = device;
      options.budget_s = settings.budget_s;
      options.compile_threads = settings.compile_threads;
      options.worker_binary = current_executable();
      options.candidate_timeout_s = settings.candidate_timeout_s;
      options.packed = row.packed;
      options.modifiers = {row.entry->modifiers, row.entry->aux_values};
      options.progress = [&](const std::string &text) {
        progress.update(device, row.entry->name, text);
      };
      const PlanEntry &entry = *row.entry;
      auto outcome = entry.pass == Pass::backward
                         ? tune_backward(entry.problem, entry.deterministic, **db, options)
                         : tune_forward(entry.problem, **db, options);
      if (outcome)
        row.outcome = std::move(*outcome);
      else
        row.error = first_line(outcome.takeError());
    }
    row.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    row.done = true;
    progress.finished(row);
  }
}

double gain_of(const TuningRecord &r) {
  return r.heuristic_ms > 0 && r.median_ms > 0 ? r.heuristic_ms / r.median_ms : 0;
}

void print_table(const std::vector<Row> &rows) {
  size_t width = 5;
  for (const Row &row : rows) width = std::max(width, row.entry->name.size());
  llvm::raw_ostream &os = llvm::outs();
  auto padded = [&](std::string text) {
    text.resize(width, ' ');
    return text;
  };
  os << llvm::formatv("{0} {1,-18} {2,8} {3,6} {4,4} {5,8}\n", padded("shape"), "winner",
                      "TFLOP/s", "gain", "GPU", "seconds");
  for (const Row &row : rows) {
    const std::string name = padded(row.entry->name);
    if (!row.error.empty()) {
      os << llvm::formatv("{0} {1,-18} {2,8} {3,6} {4,4} {5,8:f1}\n", name, "FAILED", "-", "-",
                          row.device, row.seconds);
      continue;
    }
    if (row.skipped) {
      os << llvm::formatv("{0} {1,-18} {2,8:f1} {3,6} {4,4} {5,8}\n", name,
                          config_text(row.outcome.record.config), row.outcome.record.tflops,
                          "-", row.device, "skipped");
      continue;
    }
    const TuningRecord &r = row.outcome.record;
    const double gain = gain_of(r);
    os << llvm::formatv("{0} {1,-18} {2,8:f1} {3,6} {4,4} {5,8:f1}\n", name,
                        config_text(r.config), r.tflops,
                        gain > 0 ? llvm::formatv("{0:f2}x", gain).str() : std::string("-"),
                        row.device, row.seconds);
  }
  // A packed batch's row is a class bucketed by its longest lengths and its
  // total: say how, so the row is not read as its sequences' count.
  for (const Row &row : rows)
    if (row.packed)
      os << "class: " << row.entry->name << ": "
         << packed_class_text(row.entry->problem, row.packed->total_q(), row_class_key(row))
         << "\n";
  for (const Row &row : rows)
    if (!row.error.empty()) os << "failed: " << row.entry->name << ": " << row.error << "\n";
}

llvm::json::Value rows_json(const std::vector<Row> &rows, const std::string &db_path) {
  llvm::json::Array entries;
  int failed = 0;
  for (const Row &row : rows) {
    llvm::json::Object o{{"name", row.entry->name},
                         {"pass", class_pass(row.entry->pass, row.entry->deterministic)},
                         {"problem", problem_json(row.entry->problem)},
                         {"class", class_json(row_class_key(row))},
                         {"device", row.device},
                         {"seconds", std::round(row.seconds * 100) / 100}};
    if (row.packed) {
      const Problem sized = tuning_class_problem(row.entry->problem, row.packed);
      llvm::json::Array seqlens_q, seqlens_k;
      for (int64_t n : row.packed->seqlens_q) seqlens_q.push_back(n);
      for (int64_t n : row.packed->seqlens_k) seqlens_k.push_back(n);
      o["packed"] = llvm::json::Object{
          {"sequences", int64_t(row.packed->size())},
          {"seqlens_q", std::move(seqlens_q)},
          {"seqlens_k", std::move(seqlens_k)},
          {"total_q", row.packed->total_q()},
          {"total_k", row.packed->total_k()},
          {"sized_as_batch", sized.batch},
          {"explanation", packed_class_text(row.entry->problem, row.packed->total_q(),
                                            row_class_key(row))}};
    }
    if (!row.error.empty()) {
      ++failed;
      o["error"] = row.error;
    } else if (row.skipped) {
      o["skipped"] = true;
      o["config"] = stored_config_json(row.outcome.record.config);
      o["tflops"] = row.outcome.record.tflops;
    } else {
      const TuningRecord &r = row.outcome.record;
      o["config"] = stored_config_json(r.config);
      o["heuristic_config"] = stored_config_json(r.heuristic_config);
      o["tflops"] = r.tflops;
      o["median_ms"] = r.median_ms;
      o["heuristic_ms"] = r.heuristic_ms;
      if (double gain = gain_of(r); gain > 0) o["gain"] = gain;
      o["candidates_tried"] = r.candidates_tried;
      o["candidates_failed"] = r.candidates_failed;
      llvm::json::Array notes;
      for (const std::string &note : row.outcome.notes) notes.push_back(note);
      o["notes"] = std::move(notes);
    }
    entries.push_back(std::move(o));
  }
  return llvm::json::Object{
      {"database", db_path}, {"entries", std::move(entries)}, {"failed", failed}};
}

}  // namespace

int TuneCommand::run(const CommonOptions &common, const ProblemOptions &problem,
                     const DbPathOption &db) const {
  int code = kExitOk;
  auto tuning_plan = plan_or_problem(problem, plan, code, &modifiers);
  if (!tuning_plan) return report_error(code, tuning_plan.takeError());
  if (!aux_values.empty()) {
    if (!plan.empty())
      return report_error(kExitUsage, "--plan: the plan gives each problem's aux values (key "
                                      "aux_values); drop --aux-value");
    tuning_plan->entries.front().aux_values.assign(aux_values.begin(), aux_values.end());
  }
  // The modifiers and their values are checked before any GPU work: a
  // missing scalar value, a score_mod without its gradient for the backward.
  for (const PlanEntry &entry : tuning_plan->entries) {
    const bool flags = plan.empty();
    if (llvm::Error e = validate_tuned_modifiers(entry.problem, entry.pass,
                                                 {entry.modifiers, entry.aux_values},
                                                 flags ? "--aux-value" : "aux_values"))
      return report_error(kExitUsage, flags ? llvm::toString(std::move(e))
                                            : llvm::formatv("{0}: {1}", entry.name,
                                                            llvm::toString(std::move(e)))
                                                  .str());
  }
  // A packed batch is timed on its lengths (every sequence the longest
  // when only --batch/--seqlen gave it): lengths that do not make a batch
  // of the problem are the flags' or the plan's error, before any GPU.
  std::vector<std::optional<PackedBatch>> packed;
  for (const PlanEntry &entry : tuning_plan->entries) {
    packed.push_back(entry_packed_batch(entry));
    if (packed.back())
      if (llvm::Error e = validate_packed_batch(entry.problem, *packed.back()))
        return report_error(kExitUsage, llvm::formatv("{0}: {1}", entry.name,
                                                      llvm::toString(std::move(e))));
  }
  double budget = 0;
  if (llvm::StringRef(budget_s).getAsDouble(budget) || !std::isfinite(budget) || budget <= 0)
    return report_error(kExitUsage, llvm::formatv("--budget-s: expected a positive number of "
                                                  "seconds, got {0}",
                                                  budget_s.empty() ? "''" : budget_s.getValue()));
  double timeout = 0;
  if (llvm::StringRef(candidate_timeout_s).getAsDouble(timeout) || !std::isfinite(timeout) ||
      timeout <= 0)
    return report_error(kExitUsage,
                        llvm::formatv("--candidate-timeout-s: expected a positive number of "
                                      "seconds, got {0}",
                                      candidate_timeout_s.empty() ? "''"
                                                                  : candidate_timeout_s.getValue()));
  auto path = database_path(db.db);
  if (!path) return report_error(kExitUsage, path.takeError());
  // Ordinals are checked against the GPUs present, so a list is validated
  // for its form first: `--devices x` is a usage error anywhere.
  if (auto form = parse_devices(devices, 1 << 20); !form)
    return report_error(kExitUsage, form.takeError());

  auto count = device_count();
  if (!count || *count == 0) {
    const std::string why = count ? "the driver reports no devices" : first_line(count.takeError());
    return report_error(kExitFailure,
                        llvm::formatv("tune needs a GPU ({0}); without one, `flashjit "
                                      "precompile --arch sm_90a` fills the cubin store",
                                      why));
  }
  auto ordinals = parse_devices(devices, *count);
  if (!ordinals) return report_error(kExitUsage, ordinals.takeError());

  // Open once here so that a bad path is one clear error before any thread
  // starts (and the schema exists before several connections race to it).
  if (auto first = open_database(*path); !first)
    return report_error(kExitFailure, first.takeError());

  std::vector<Row> rows(tuning_plan->entries.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    rows[i].entry = &tuning_plan->entries[i];
    rows[i].packed = packed[i];
  }
  std::atomic<size_t> next{0};
  Progress progress(rows.size());
  WorkerSettings settings;
  settings.db_path = *path;
  settings.budget_s = budget;
  settings.candidate_timeout_s = timeout;
  settings.force = force;
  if (ordinals->size() == 1) {
    worker(ordinals->front(), settings, rows, next, progress);
  } else {
    // The workers compile at the same time: the cores are shared, not
    // multiplied, so a compile phase does not oversubscribe the host.
    const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
    settings.compile_threads = std::max(1, cores / int(ordinals->size()));
    std::vector<std::thread> threads;
    for (int ordinal : *ordinals)
      threads.emplace_back(worker, ordinal, std::cref(settings), std::ref(rows), std::ref(next),
                           std::ref(progress));
    for (std::thread &t : threads) t.join();
  }

  // What this run had to compile: zero after `flashjit precompile` (or an
  // earlier tune) filled the cubin store for this GPU's target.
  const uint64_t compiles = runtime_counters().compiles.load();
  if (common.json) {
    llvm::json::Value value = rows_json(rows, *path);
    if (auto *object = value.getAsObject()) (*object)["nvrtc_compiles"] = int64_t(compiles);
    print_json(std::move(value));
  } else {
    print_table(rows);
    const auto skipped = std::count_if(rows.begin(), rows.end(), [](const Row &r) { return r.skipped; });
    if (skipped)
      llvm::outs() << llvm::formatv("skipped {0} {1} already tuned (use --force to retune)\n",
                                    skipped, skipped == 1 ? "class" : "classes");
    llvm::outs() << llvm::formatv("NVRTC compiles in this run: {0}\n", compiles);
  }
  for (const Row &row : rows)
    if (!row.error.empty()) return kExitFailure;
  return kExitOk;
}

}  // namespace flashjit::cli
