#include "tuner/tune_class.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <limits>
#include <optional>

#include "generator/modifier_source.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "runtime/device.h"
#include "runtime/kernel_source.h"
#include "runtime/modifier_facts.h"
#include "runtime/nvrtc_compiler.h"
#include "runtime/program_kernel.h"
#include "runtime/tuning_key.h"
#include "tuner/candidate_runner.h"
#include "tuner/cubin_batch.h"
#include "tuner/search.h"
#include "tuner/worker_compile.h"
#include "tuner/worker_process.h"
#include "tuner/worker_runner.h"

namespace flashjit {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kInfinity = std::numeric_limits<double>::infinity();
// The GPU idles between tunes and boosts its clock under load; the first
// candidate timed on a cold GPU would look slower than it is.
constexpr double kWarmUpMs = 50;
// A winner that fails the accuracy check is replaced by the next one; more
// failures than this mean the kernel family, not a config, is broken.
constexpr int kMaxAccuracyAttempts = 4;
// One candidate's compile in a precompile worker (TuneOptions::compile_timeout_s).
constexpr double kPrecompileTimeoutS = 600;

llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string iso8601_utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

// One candidate through the pipeline; `outcome` is what the caller sees.
struct Candidate {
  CandidateOutcome outcome;
  std::optional<KernelSpec> spec;
  LoadedCandidate loaded;
  bool runnable = false;
};

// The cubins of `specs` (candidates[i] is spec i's index in the tune): in
// worker processes when `worker_binary` is set, else on threads of this one.
std::vector<CubinResult> candidate_cubins(llvm::ArrayRef<KernelSpec> specs,
                                          llvm::ArrayRef<int> candidates, TuningDb &db,
                                          int threads, const std::string &worker_binary,
                                          double timeout_s,
                                          const std::function<void(const std::string &)> &progress) {
  if (worker_binary.empty()) return cubins_for(specs, &db, threads, progress);
  return cubins_in_workers(specs, candidates, worker_binary, db.path(), threads, timeout_s,
                           progress);
}

llvm::Error workers_need_a_file(const TuningDb &db) {
  if (db.path() != ":memory:") return llvm::Error::success();
  return error("worker processes share cubins through the database file; an in-memory "
               "database cannot be used with workers (set no worker binary, or use a file)");
}

class Tune {
 public:
  Tune(const Problem &problem, const PassSearch &search, TuningDb &db, const TuneOptions &options)
      : problem_(problem), search_(search), db_(db), options_(options) {}
  llvm::Expected<TuneOutcome> run();

 private:
  void say(const llvm::Twine &line) const {
    if (options_.progress) options_.progress(line.str());
  }
  llvm::Error compile_and_load(const DeviceInfo &device);
  llvm::Expected<std::unique_ptr<CandidateRunner>> make_runner() const;
  llvm::Error measure(const DeviceInfo &device, TuneOutcome &outcome);
  llvm::Expected<int> pick_checked_winner(TuneOutcome &outcome);

  const Problem &problem_;
  const PassSearch &search_;
  TuningDb &db_;
  const TuneOptions &options_;
  const std::string worker_binary_ = resolve_worker_binary(options_.worker_binary);
  const Clock::time_point start_ = Clock::now();
  std::vector<Candidate> candidates_;
  KernelConfig heuristic_config_;
  int heuristic_index_ = -1;  // 0 unless the heuristic's config was pruned
  std::vector<PrunedConfig> pruned_;
  std::vector<int> ranking_;  // candidate indices, best first (measured ones)
  std::unique_ptr<CandidateRunner> runner_;
};

llvm::Expected<std::unique_ptr<CandidateRunner>> Tune::make_runner() const {
  // The pass's part of the caller's modifiers, with the caller's values.
  TunedModifiers modifiers{search_.modifiers, options_.modifiers.aux_values};
  if (worker_binary_.empty()) {
    auto runner = InProcessRunner::make(search_.pass, problem_, options_.packed, options_.device,
                                        &db_, modifiers);
    if (!runner) return runner.takeError();
    return std::unique_ptr<CandidateRunner>(std::move(*runner));
  }
  WorkerTimeouts timeouts;
  timeouts.request_s = options_.candidate_timeout_s;
  timeouts.compile_s = options_.compile_timeout_s;
  auto runner = WorkerRunner::make(worker_binary_, db_.path(), search_.pass, problem_,
                                   options_.packed, options_.device, timeouts, modifiers);
  if (!runner) return runner.takeError();
  return std::unique_ptr<CandidateRunner>(std::move(*runner));
}

llvm::Error Tune::compile_and_load(const DeviceInfo &device) {
  const TargetArch arch = device.target();
  const int max_smem = device.max_smem_per_block_optin;
  CandidateSet set = search_.candidates(arch, max_smem);
  pruned_ = std::move(set.pruned);
  heuristic_config_ = search_.heuristic(arch, max_smem);
  if (!set.configs.empty() && set.configs.front() == heuristic_config_) heuristic_index_ = 0;
  if (set.configs.empty()) {
    std::vector<std::string> why;
    for (const PrunedConfig &p : pruned_) why.push_back(p.reason);
    return error("no candidate config fits " + search_.what + " on " + device.name + ": " +
                 llvm::join(why, "; "));
  }

  std::vector<KernelSpec> specs;
  std::vector<int> spec_owner;  // spec -> candidate index
  candidates_.resize(set.configs.size());
  for (size_t i = 0; i < set.configs.size(); ++i) {
    Candidate &c = candidates_[i];
    c.outcome.config = set.configs[i];
    c.outcome.median_ms = kInfinity;
    auto spec = search_.spec(set.configs[i], arch, max_smem);
    if (!spec) {
      c.outcome.failure = "invalid: " + llvm::toString(spec.takeError());
      continue;
    }
    c.spec = *spec;
    c.outcome.id = spec->id();
    specs.push_back(*spec);
    spec_owner.push_back(int(i));
  }
  say(llvm::formatv("{0} candidates ({1} pruned before compiling)", candidates_.size(),
                    pruned_.size()));

  std::vector<CubinResult> cubins =
      candidate_cubins(specs, spec_owner, db_, options_.compile_threads, worker_binary_,
                       options_.compile_timeout_s, options_.progress);
  auto runner = make_runner();
  if (!runner) return runner.takeError();
  runner_ = std::move(*runner);
  int loaded = 0;
  for (size_t s = 0; s < specs.size(); ++s) {
    Candidate &c = candidates_[spec_owner[s]];
    CubinResult &cubin = cubins[s];
    c.outcome.cubin_key = cubin.key;
    c.outcome.compile_ms = cubin.compile_ms;
    c.outcome.cubin_from_store = cubin.from_store;
    if (!cubin.error.empty()) {
      c.outcome.failure = "compile: " + cubin.error;
      continue;
    }
    auto kernel = runner_->load(spec_owner[s], *c.spec, cubin);
    if (!kernel) {
      c.outcome.failure = "load: " + llvm::toString(kernel.takeError());
      continue;
    }
    c.loaded = *kernel;
    c.outcome.registers = kernel->registers;
    c.outcome.spill_bytes = kernel->spill_bytes;
    c.outcome.occupancy = kernel->occupancy;
    if (!kernel->rejected.empty()) {
      c.outcome.failure = "pruned after compiling: " + kernel->rejected;
      continue;
    }
    c.runnable = true;
    ++loaded;
  }
  say(llvm::formatv("loaded {0} of {1} candidates", loaded, candidates_.size()));
  if (loaded == 0) {
    std::vector<std::string> why;
    for (const Candidate &c : candidates_) why.push_back(c.outcome.id + ": " + c.outcome.failure);
    return error("no candidate for " + search_.what + " compiled and loaded: " +
                 llvm::join(why, "; "));
  }
  return llvm::Error::success();
}

llvm::Error Tune::measure(const DeviceInfo &device, TuneOutcome &outcome) {
  outcome.input_sets = runner_->input_sets();

  std::vector<int> runnable;  // halving index -> candidate index
  for (size_t i = 0; i < candidates_.size(); ++i)
    if (candidates_[i].runnable) runnable.push_back(int(i));
  {
    if (llvm::Error e = runner_->warm_up(runnable.front(), kWarmUpMs)) {
      // The first candidate faulted while warming up: it scores infinity in
      // the halving below like any launch failure (or the bench is broken).
      llvm::consumeError(std::move(e));
    }
  }

  HalvingOptions halving;
  halving.initial_repeats = std::max(1, options_.initial_repeats);
  halving.final_repeats = std::max(halving.initial_repeats, options_.final_repeats);
  // When the heuristic's config runs, it is timed with the finalists so the
  // record's gain over it is like for like.
  if (heuristic_index_ == 0 && runnable.front() == 0) halving.always_final.push_back(0);
  // Half of what is left: the estimate (median x repeats) leaves out the
  // warm-up launches and host work, and the accuracy check comes after.
  const double left_ms = options_.budget_s * 1000 - seconds_since(start_) * 1000;
  if (options_.budget_s > 0) halving.budget_ms = std::max(1.0, 0.5 * left_ms);
  halving.progress = options_.progress;

  const Clock::time_point measure_start = Clock::now();
  auto timer = [&](int index, int repeats) -> llvm::Expected<Measurement> {
    return runner_->time(runnable[index], repeats);
  };
  std::vector<CandidateScore> scores =
      successive_halving(int(runnable.size()), timer, halving);
  outcome.measure_s = seconds_since(measure_start);

  for (const CandidateScore &s : scores) {
    const int i = runnable[s.index];
    CandidateOutcome &o = candidates_[i].outcome;
    o.median_ms = s.median_ms;
    o.min_ms = s.min_ms;
    o.max_ms = s.max_ms;
    o.repeats = s.repeats;
    o.rounds = s.rounds;
    if (!s.failure.empty()) {
      o.failure = "launch: " + s.failure;
      continue;
    }
    ranking_.push_back(i);
  }
  if (!runner_->broken().empty())
    return error(llvm::formatv("tuning {0} on device {1} stopped: a candidate broke the CUDA "
                               "context ({2}); nothing was stored, and this process cannot use "
                               "the device any more",
                               search_.what, device.ordinal, runner_->broken())
                     .str());
  if (ranking_.empty()) return error("no candidate for " + search_.what + " ran");
  if (halving.budget_ms > 0 && outcome.measure_s * 1000 > halving.budget_ms)
    outcome.notes.push_back(llvm::formatv("measuring took {0:f1} s, over its share of the "
                                          "budget ({1:f1} s)",
                                          outcome.measure_s, halving.budget_ms / 1000)
                                .str());
  return llvm::Error::success();
}

llvm::Expected<int> Tune::pick_checked_winner(TuneOutcome &outcome) {
  if (!options_.check_winner) return ranking_.front();
  int attempts = 0;
  for (int i : ranking_) {
    if (attempts++ == kMaxAccuracyAttempts) break;
    Candidate &c = candidates_[i];
    say("checking " + c.outcome.id + " against " + search_.check_against);
    auto report = runner_->check(i);
    const std::string why = report ? *report : llvm::toString(report.takeError());
    if (why.empty()) return i;
    c.outcome.failure = "accuracy check: " + why;
    outcome.notes.push_back(c.outcome.id + " was fastest but failed the accuracy check (" + why +
                            "); trying the next");
    if (!runner_->broken().empty())
      return error("the accuracy check of " + c.outcome.id + " broke the CUDA context: " +
                   runner_->broken() + "; nothing was stored");
  }
  return error("no candidate for " + search_.what + " passed the accuracy check: " +
               llvm::join(outcome.notes, "; "));
}

llvm::Expected<TuneOutcome> Tune::run() {
  if (llvm::Error e = validate_problem(problem_)) return e;
  auto packed = packed_batch_for(problem_, options_.packed);
  if (!packed) return packed.takeError();
  if (!worker_binary_.empty())
    if (llvm::Error e = workers_need_a_file(db_)) return e;
  // The CUDA context (in this process, or in the measuring worker) comes
  // with the runner, after the compiles.
  auto device = query_device(options_.device);
  if (!device) return device.takeError();
  auto software = software_fingerprint();
  if (!software) return software.takeError();

  TuneOutcome outcome;
  outcome.problem = problem_;
  outcome.device = options_.device;
  say("tuning " + search_.what + " on device " + llvm::Twine(options_.device) + " (" +
      device->name + ")");

  const Clock::time_point compile_start = Clock::now();
  if (llvm::Error e = compile_and_load(*device)) return e;
  outcome.compile_s = seconds_since(compile_start);
  if (llvm::Error e = measure(*device, outcome)) return e;
  auto winner_index = pick_checked_winner(outcome);
  if (const auto *workers = dynamic_cast<const WorkerRunner *>(runner_.get()))
    outcome.measuring_workers = workers->workers_started();
  if (!winner_index) return winner_index.takeError();
  Candidate &winner = candidates_[*winner_index];
  winner.outcome.winner = true;

  int failed = 0;
  for (const Candidate &c : candidates_)
    if (!c.outcome.failure.empty()) ++failed;

  TuningRecord &r = outcome.record;
  r.device = device_fingerprint(*device);
  r.software = *software;
  // A packed batch's class is the one its calls look up (class_view: the
  // longest lengths and the total), and its TFLOP/s count the sequences'
  // own work, not the padded batch x longest lengths.
  // A modified class is the one a call with the same snippets looks up.
  r.problem = problem_class_key(
      tuning_class_problem(problem_, options_.packed),
      class_pass(search_.pass, search_.deterministic),
      search_.modifiers.empty() ? std::string() : modifiers_hash(search_.modifiers));
  r.config = to_stored(winner.outcome.config);
  r.shape = *packed ? describe_packed(problem_, **packed) : describe(problem_);
  r.median_ms = winner.outcome.median_ms;
  r.min_ms = winner.outcome.min_ms;
  r.max_ms = winner.outcome.max_ms;
  const double flops =
      *packed ? packed_forward_flops(problem_, **packed) : problem_.forward_flops();
  r.tflops = search_.flops_factor * flops / (r.median_ms * 1e-3) / 1e12;
  r.heuristic_config = to_stored(heuristic_config_);
  // Only a heuristic timed in the final round compares like for like.
  if (heuristic_index_ >= 0) {
    const CandidateOutcome &h = candidates_[heuristic_index_].outcome;
    if (std::isfinite(h.median_ms) && h.repeats >= winner.outcome.repeats)
      r.heuristic_ms = h.median_ms;
  }
  r.occupancy = winner.outcome.occupancy;
  r.registers = winner.outcome.registers;
  r.smem_bytes = winner.loaded.dynamic_smem_bytes + winner.loaded.static_smem_bytes;
  r.spill_bytes = winner.outcome.spill_bytes;
  r.candidates_tried = int(candidates_.size());
  r.candidates_failed = failed;
  r.tuned_at = iso8601_utc_now();
  r.flashjit_version = FLASHJIT_VERSION;
  r.cubin_key = winner.outcome.cubin_key;
  if (llvm::Error e = db_.put_tuning(r)) return e;
  say(llvm::formatv("stored {0}: {1:f3} ms, {2:f1} TFLOP/s (heuristic {3:f3} ms)",
                    winner.outcome.id, r.median_ms, r.tflops, r.heuristic_ms));

  // Best first: measured by rank, then the failed, then those pruned before
  // compiling.
  std::vector<bool> listed(candidates_.size(), false);
  for (int i : ranking_) {
    outcome.candidates.push_back(candidates_[i].outcome);
    listed[i] = true;
  }
  for (size_t i = 0; i < candidates_.size(); ++i)
    if (!listed[i]) outcome.candidates.push_back(candidates_[i].outcome);
  for (const PrunedConfig &p : pruned_) {
    CandidateOutcome o;
    o.config = p.config;
    o.median_ms = kInfinity;
    o.failure = "pruned before compiling: " + p.reason;
    outcome.candidates.push_back(std::move(o));
  }
  outcome.wall_s = seconds_since(start_);
  return outcome;
}

}  // namespace

llvm::Expected<TuneOutcome> tune_class(const Problem &problem, const PassSearch &search,
                                       TuningDb &db, const TuneOptions &options) {
  return Tune(problem, search, db, options).run();
}

llvm::Expected<std::optional<PackedBatch>> packed_batch_to_tune(const Problem &problem,
                                                                const TuneOptions &options) {
  if (!problem.varlen) {
    if (options.packed)
      return error("packed lengths were given for " + describe(problem) + ", which is not varlen");
    return std::nullopt;
  }
  PackedBatch batch = options.packed ? *options.packed : equal_lengths(problem);
  if (llvm::Error e = validate_packed_batch(problem, batch)) return e;
  return batch;
}

llvm::Error validate_tuned_modifiers(const Problem &problem, Pass pass,
                                     const TunedModifiers &modifiers, llvm::StringRef given_as) {
  if (modifiers.modifiers.empty()) {
    if (!modifiers.aux_values.empty())
      return error(llvm::formatv("{0}: given without --aux fields to set", given_as).str());
    return llvm::Error::success();
  }
  if (llvm::Error e = validate_modifiers(modifiers.modifiers)) return e;
  if (pass == Pass::backward)
    if (llvm::Error e = check_score_mod_grad(modifiers.modifiers)) return e;
  if (problem.varlen)
    return error("tuning a packed batch (varlen) with modifiers is not supported: the tuner "
                 "checks a packed batch's winner without them. Tune the dense problem of the "
                 "same head dims and mask, or give the call a config");
  auto parsed = parse_modifier_inputs(modifiers.modifiers, modifiers.aux_values, given_as);
  if (!parsed) return parsed.takeError();
  return llvm::Error::success();
}

llvm::Error resolve_tuned_modifiers(TuneOptions &options, Pass pass, TuningDb &db) {
  if (options.modifiers.modifiers.empty()) return llvm::Error::success();
  auto device = cached_device_info(options.device);
  if (!device) return device.takeError();
  auto resolved = resolve_modifiers(options.modifiers.modifiers, pass, device->target(), &db);
  if (!resolved) return resolved.takeError();
  options.modifiers.modifiers = std::move(*resolved);
  return llvm::Error::success();
}

void store_reference(const GeneratedSource &source, const std::string &name,
                     const Modifiers &modifiers, const TargetArch &arch, TuningDb &db,
                     PrecompileOutcome &outcome) {
  auto reference = stored_cubin(source, arch, program_id(name, arch, modifiers), &db);
  if (!reference) {
    ++outcome.failed;
    outcome.failures.push_back(name + ": " + llvm::toString(reference.takeError()));
  } else if (reference->compiled) {
    ++outcome.compiled;
  } else {
    ++outcome.already_stored;
  }
}

Problem tuning_class_problem(const Problem &problem, const std::optional<PackedBatch> &packed) {
  return class_view(problem, packed ? packed->total_q() : 0);
}

llvm::Expected<PrecompileOutcome> precompile_class(const Problem &problem, const PassSearch &search,
                                                   const TargetArch &arch, int max_smem_bytes,
                                                   TuningDb &db, int threads,
                                                   const std::string &worker_binary) {
  if (llvm::Error e = validate_problem(problem)) return e;
  const std::string workers = resolve_worker_binary(worker_binary);
  if (!workers.empty())
    if (llvm::Error e = workers_need_a_file(db)) return e;
  // Without NVRTC every candidate would fail alike: one clear error instead.
  if (auto version = nvrtc_version(); !version) return version.takeError();
  const CandidateSet set = search.candidates(arch, max_smem_bytes);
  if (set.configs.empty())
    return error(llvm::formatv("no {0} config fits {1} on {2}: {3}",
                               search.pass == Pass::forward ? "forward" : "backward",
                               describe(problem), arch.name(),
                               set.pruned.empty() ? std::string("no candidates")
                                                  : set.pruned.front().reason)
                     .str());
  PrecompileOutcome outcome;
  std::vector<KernelSpec> specs;
  std::vector<int> candidates;  // spec -> index in set.configs (what plants name)
  for (size_t i = 0; i < set.configs.size(); ++i) {
    auto spec = search.spec(set.configs[i], arch, max_smem_bytes);
    if (!spec) {
      ++outcome.failed;
      outcome.failures.push_back(describe(set.configs[i]) + ": " + llvm::toString(spec.takeError()));
      continue;
    }
    specs.push_back(std::move(*spec));
    candidates.push_back(int(i));
  }
  const std::vector<CubinResult> cubins =
      candidate_cubins(specs, candidates, db, threads, workers, kPrecompileTimeoutS, {});
  for (size_t i = 0; i < specs.size(); ++i) {
    const CubinResult &r = cubins[i];
    if (!r.error.empty()) {
      ++outcome.failed;
      outcome.failures.push_back(specs[i].id() + ": " + r.error);
    } else if (r.from_store) {
      ++outcome.already_stored;
    } else {
      ++outcome.compiled;
    }
  }
  return outcome;
}

}  // namespace flashjit
