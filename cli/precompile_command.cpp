// `flashjit precompile --arch sm_90a`: the heuristic config and every
// candidate of each problem class (forward, or backward with --pass bwd or a
// plan's `passes`) compiled into the cubin store, with no
// GPU, so that a fleet of that GPU starts warm (and a later tune compiles
// nothing); with a caller's modifiers (--score-mod ..., or a plan's keys)
// compiled in, under the ids a call with them looks up.
#include "cli/commands.h"
#include "cli/db_common.h"
#include "generator/heuristic.h"
#include "runtime/tuning_key.h"
#include "tuner/tune_backward.h"
#include "tuner/tuner.h"
#include "tuner/worker_process.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

namespace cl = llvm::cl;

namespace flashjit::cli {

PrecompileCommand::PrecompileCommand(cl::OptionCategory &category)
    : arch("arch", cl::desc("The GPU architecture to compile for (required)"),
           cl::value_desc("sm_90a|sm_80|..."), cl::cat(category), cl::sub(sub)),
      plan("plan", cl::desc("Precompile every problem of a YAML plan (instead of problem flags)"),
           cl::value_desc("FILE"), cl::cat(category), cl::sub(sub)),
      threads("threads", cl::desc("Parallel NVRTC compiles (0: one per core)"), cl::init(0),
              cl::value_desc("N"), cl::cat(category), cl::sub(sub)),
      modifiers(category, sub) {}

int PrecompileCommand::run(const CommonOptions &common, const ProblemOptions &problem,
                           const DbPathOption &db) const {
  if (arch.empty())
    return report_error(kExitUsage,
                        "--arch: required: the GPU architecture to compile for, e.g. sm_90a");
  auto target = TargetArch::parse(arch);
  if (!target)
    return report_error(kExitUsage,
                        llvm::formatv("--arch: {0}", llvm::toString(target.takeError())));
  if (threads < 0)
    return report_error(kExitUsage,
                        llvm::formatv("--threads: expected an integer >= 0, got {0}", threads));
  int code = kExitOk;
  auto tuning_plan = plan_or_problem(problem, plan, code, &modifiers);
  if (!tuning_plan) return report_error(code, tuning_plan.takeError());
  auto path = database_path(db.db);
  if (!path) return report_error(kExitUsage, path.takeError());
  auto database = open_database(*path);
  if (!database) return report_error(kExitFailure, database.takeError());

  // The architecture's opt-in limit: the device itself is not here to say.
  const int max_smem = max_smem_per_block(*target);
  llvm::raw_ostream &os = common.json ? llvm::errs() : llvm::outs();
  const size_t total = tuning_plan->entries.size();
  PrecompileOutcome sum;
  int entries_failed = 0;
  llvm::json::Array entries;
  for (size_t i = 0; i < total; ++i) {
    const PlanEntry &entry = tuning_plan->entries[i];
    // Candidates of either pass compile in worker processes: a compiler
    // crash fails one candidate, not the run.
    // A packed batch is sized by its longest sequence and its total, as a
    // call's class is (class_view).
    const Problem sized = class_view(entry.problem, entry.total_q);
    auto outcome = entry.pass == Pass::backward
                       ? precompile_backward(sized, entry.deterministic, *target, max_smem,
                                             **database, threads, current_executable(),
                                             entry.modifiers)
                       : precompile_forward(sized, *target, max_smem, **database, threads,
                                            current_executable(), entry.modifiers);
    llvm::json::Object o{{"name", entry.name},
                         {"pass", class_pass(entry.pass, entry.deterministic)},
                         {"problem", problem_json(entry.problem)}};
    if (!outcome) {
      ++entries_failed;
      const std::string why = first_line(outcome.takeError());
      os << llvm::formatv("[{0}/{1}] {2}: failed: {3}\n", i + 1, total, entry.name, why);
      o["error"] = why;
    } else {
      os << llvm::formatv("[{0}/{1}] {2}: compiled {3}, already stored {4}, failed {5}\n", i + 1,
                          total, entry.name, outcome->compiled, outcome->already_stored,
                          outcome->failed);
      for (const std::string &failure : outcome->failures) os << "  failed: " << failure << "\n";
      sum.compiled += outcome->compiled;
      sum.already_stored += outcome->already_stored;
      sum.failed += outcome->failed;
      llvm::json::Array failures;
      for (const std::string &failure : outcome->failures) failures.push_back(failure);
      o["compiled"] = outcome->compiled;
      o["already_stored"] = outcome->already_stored;
      o["failed"] = outcome->failed;
      o["failures"] = std::move(failures);
    }
    os.flush();
    entries.push_back(std::move(o));
  }
  os << llvm::formatv("total: compiled {0}, already stored {1}, failed {2} ({3}, {4})\n",
                      sum.compiled, sum.already_stored, sum.failed, target->name(), *path);
  if (common.json)
    print_json(llvm::json::Object{{"arch", target->name()},
                                  {"database", *path},
                                  {"entries", std::move(entries)},
                                  {"compiled", sum.compiled},
                                  {"already_stored", sum.already_stored},
                                  {"failed", sum.failed}});
  // A candidate NVRTC rejects is a finding for the tuner (it scores it as
  // failed), not a failure of the warm-up; an entry that could not be
  // precompiled at all is.
  return entries_failed ? kExitFailure : kExitOk;
}

}  // namespace flashjit::cli
