#include "tuner/tuner.h"

#include "runtime/kernel_source.h"

#include "reference/gpu_reference.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <limits>
#include <optional>

#include "generator/heuristic.h"
#include "generator/kernel_spec.h"
#include "runtime/device.h"
#include "runtime/loaded_kernel.h"
#include "runtime/nvrtc_compiler.h"
#include "runtime/tuning_key.h"
#include "tuner/candidates.h"
#include "tuner/cubin_batch.h"
#include "tuner/device_context.h"
#include "tuner/forward_bench.h"
#include "tuner/search.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

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
  LoadedKernel kernel;
  LaunchGeometry geometry;
  bool runnable = false;
};

class Tune {
 public:
  Tune(const Problem &problem, TuningDb &db, const TuneOptions &options)
      : problem_(problem), db_(db), options_(options) {}
  llvm::Expected<TuneOutcome> run();

 private:
  void say(const llvm::Twine &line) const {
    if (options_.progress) options_.progress(line.str());
  }
  llvm::Error compile_and_load(const DeviceInfo &device);
  llvm::Error measure(const DeviceInfo &device, TuneOutcome &outcome);
  llvm::Expected<int> pick_checked_winner(TuneOutcome &outcome);

  const Problem &problem_;
  TuningDb &db_;
  const TuneOptions &options_;
  const Clock::time_point start_ = Clock::now();
  std::vector<Candidate> candidates_;
  KernelConfig heuristic_config_;
  int heuristic_index_ = -1;  // 0 unless the heuristic's config was pruned
  std::vector<PrunedConfig> pruned_;
  std::vector<int> ranking_;  // candidate indices, best first (measured ones)
  std::unique_ptr<ForwardBench> bench_;
};

llvm::Error Tune::compile_and_load(const DeviceInfo &device) {
  const TargetArch arch = device.target();
  const int max_smem = device.max_smem_per_block_optin;
  CandidateSet set = forward_candidates(problem_, arch, max_smem);
  pruned_ = std::move(set.pruned);
  heuristic_config_ = default_forward_config(problem_, arch, max_smem);
  if (!set.configs.empty() && set.configs.front() == heuristic_config_) heuristic_index_ = 0;
  if (set.configs.empty()) {
    std::vector<std::string> why;
    for (const PrunedConfig &p : pruned_) why.push_back(p.reason);
    return error("no candidate config fits " + describe(problem_) + " on " + device.name + ": " +
                 llvm::join(why, "; "));
  }

  std::vector<KernelSpec> specs;
  std::vector<int> spec_owner;
  candidates_.resize(set.configs.size());
  for (size_t i = 0; i < set.configs.size(); ++i) {
    Candidate &c = candidates_[i];
    c.outcome.config = set.configs[i];
    c.outcome.median_ms = kInfinity;
    auto spec = make_forward_spec(problem_, set.configs[i], arch, max_smem);
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
      cubins_for(specs, &db_, options_.compile_threads, options_.progress);
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
    c.geometry = forward_launch_geometry(*c.spec, problem_);
    auto kernel = LoadedKernel::load(cubin.bytes, cubin.entry, c.geometry.dynamic_smem_bytes);
    if (!kernel) {
      c.outcome.failure = "load: " + llvm::toString(kernel.takeError());
      continue;
    }
    c.kernel = std::move(*kernel);
    const KernelAttributes &a = c.kernel.attributes();
    c.outcome.registers = a.registers;
    c.outcome.spill_bytes = a.local_bytes;
    auto occupancy = c.kernel.occupancy(int(c.geometry.block.x));
    if (!occupancy) {
      c.outcome.failure = "occupancy: " + llvm::toString(occupancy.takeError());
      continue;
    }
    c.outcome.occupancy = *occupancy;
    if (auto reason = reject_compiled(a.local_bytes, *occupancy)) {
      c.outcome.failure = "pruned after compiling: " + *reason;
      continue;
    }
    c.runnable = true;
    ++loaded;
  }
  say(llvm::formatv("loaded {0} of {1} kernels", loaded, candidates_.size()));
  if (loaded == 0) {
    std::vector<std::string> why;
    for (const Candidate &c : candidates_) why.push_back(c.outcome.id + ": " + c.outcome.failure);
    return error("no candidate for " + describe(problem_) + " compiled and loaded: " +
                 llvm::join(why, "; "));
  }
  return llvm::Error::success();
}

llvm::Error Tune::measure(const DeviceInfo &device, TuneOutcome &outcome) {
  auto bench = ForwardBench::make(problem_, device);
  if (!bench) return bench.takeError();
  bench_ = std::move(*bench);
  outcome.input_sets = bench_->sets();

  std::vector<int> runnable;  // halving index -> candidate index
  for (size_t i = 0; i < candidates_.size(); ++i)
    if (candidates_[i].runnable) runnable.push_back(int(i));
  {
    const Candidate &first = candidates_[runnable.front()];
    if (llvm::Error e = bench_->warm_up(first.kernel, *first.spec, first.geometry, kWarmUpMs)) {
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
    const Candidate &c = candidates_[runnable[index]];
    return bench_->time(c.kernel, *c.spec, c.geometry, repeats);
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
  if (!bench_->broken().empty())
    return error(llvm::formatv("tuning {0} on device {1} stopped: a candidate broke the CUDA "
                               "context ({2}); nothing was stored, and this process cannot use "
                               "the device any more",
                               describe(problem_), device.ordinal, bench_->broken())
                     .str());
  if (ranking_.empty()) return error("no candidate for " + describe(problem_) + " ran");
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
    say("checking " + c.outcome.id + " against the reference");
    auto report = check_forward_kernel(c.kernel, *c.spec, problem_, bench_->stream(), &db_);
    std::string why;
    if (!report)
      why = llvm::toString(report.takeError());
    else if (!report->passed)
      why = report->describe();
    else
      return i;
    c.outcome.failure = "accuracy check: " + why;
    outcome.notes.push_back(c.outcome.id + " was fastest but failed the accuracy check (" + why +
                            "); trying the next");
    if (llvm::Error health = check_context_health())
      return error("the accuracy check of " + c.outcome.id + " broke the CUDA context: " +
                   llvm::toString(std::move(health)) + "; nothing was stored");
  }
  return error("no candidate for " + describe(problem_) + " passed the accuracy check: " +
               llvm::join(outcome.notes, "; "));
}

llvm::Expected<TuneOutcome> Tune::run() {
  if (llvm::Error e = validate_problem(problem_)) return e;
  // First, so that it is destroyed last: every kernel and buffer below lives
  // in this context and must be released while it is current.
  auto scope = ScopedDeviceContext::make(options_.device);
  if (!scope) return scope.takeError();
  auto device = query_device(options_.device);
  if (!device) return device.takeError();
  auto software = software_fingerprint();
  if (!software) return software.takeError();

  TuneOutcome outcome;
  outcome.problem = problem_;
  outcome.device = options_.device;
  say("tuning " + describe(problem_) + " on device " + llvm::Twine(options_.device) + " (" +
      device->name + ")");

  const Clock::time_point compile_start = Clock::now();
  if (llvm::Error e = compile_and_load(*device)) return e;
  outcome.compile_s = seconds_since(compile_start);
  if (llvm::Error e = measure(*device, outcome)) return e;
  auto winner_index = pick_checked_winner(outcome);
  if (!winner_index) return winner_index.takeError();
  Candidate &winner = candidates_[*winner_index];
  winner.outcome.winner = true;

  int failed = 0;
  for (const Candidate &c : candidates_)
    if (!c.outcome.failure.empty()) ++failed;

  TuningRecord &r = outcome.record;
  r.device = device_fingerprint(*device);
  r.software = *software;
  r.problem = problem_class_key(problem_, "fwd");
  r.config = to_stored(winner.outcome.config);
  r.shape = describe(problem_);
  r.median_ms = winner.outcome.median_ms;
  r.min_ms = winner.outcome.min_ms;
  r.max_ms = winner.outcome.max_ms;
  r.tflops = problem_.forward_flops() / (r.median_ms * 1e-3) / 1e12;
  r.heuristic_config = to_stored(heuristic_config_);
  // Only a heuristic timed in the final round compares like for like.
  if (heuristic_index_ >= 0) {
    const CandidateOutcome &h = candidates_[heuristic_index_].outcome;
    if (std::isfinite(h.median_ms) && h.repeats >= winner.outcome.repeats)
      r.heuristic_ms = h.median_ms;
  }
  r.occupancy = winner.outcome.occupancy;
  r.registers = winner.outcome.registers;
  r.smem_bytes = winner.geometry.dynamic_smem_bytes + winner.kernel.attributes().static_smem_bytes;
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

llvm::Expected<TuneOutcome> tune_forward(const Problem &problem, TuningDb &db,
                                         const TuneOptions &options) {
  return Tune(problem, db, options).run();
}

llvm::Expected<PrecompileOutcome> precompile_forward(const Problem &problem,
                                                     const TargetArch &arch, int max_smem_bytes,
                                                     TuningDb &db, int threads) {
  if (llvm::Error e = validate_problem(problem)) return e;
  // Without NVRTC every candidate would fail alike: one clear error instead.
  if (auto version = nvrtc_version(); !version) return version.takeError();
  // The heuristic's config is the first candidate, so a fleet that never
  // tunes still starts with its default kernel compiled.
  CandidateSet set = forward_candidates(problem, arch, max_smem_bytes);
  PrecompileOutcome outcome;
  std::vector<KernelSpec> specs;
  for (const KernelConfig &config : set.configs) {
    auto spec = make_forward_spec(problem, config, arch, max_smem_bytes);
    if (!spec) {
      ++outcome.failed;
      outcome.failures.push_back(describe(config) + ": " + llvm::toString(spec.takeError()));
      continue;
    }
    specs.push_back(std::move(*spec));
  }
  const std::vector<CubinResult> cubins = cubins_for(specs, &db, threads);
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
  // The tuner checks its winner against the GPU reference: store that
  // kernel too, so a tune on this target compiles nothing at all.
  auto reference = stored_cubin(generate_reference_attention(), arch,
                                "reference_attention_" + arch.name(), &db);
  if (!reference) {
    ++outcome.failed;
    outcome.failures.push_back("reference_attention: " + llvm::toString(reference.takeError()));
  } else if (reference->compiled) {
    ++outcome.compiled;
  } else {
    ++outcome.already_stored;
  }
  return outcome;
}

}  // namespace flashjit
