#include "tuner/tune_backward.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <limits>
#include <optional>

#include "generator/backward_spec.h"
#include "generator/backward_steps.h"
#include "runtime/device.h"
#include "runtime/nvrtc_compiler.h"
#include "runtime/tuning_key.h"
#include "tuner/backward_bench.h"
#include "tuner/backward_candidates.h"
#include "tuner/cubin_batch.h"
#include "tuner/device_context.h"
#include "tuner/search.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kInfinity = std::numeric_limits<double>::infinity();
// As the forward tuner: the GPU boosts its clock under load, so the first
// candidate timed on an idle GPU would look slower than it is.
constexpr double kWarmUpMs = 50;
// A winner that fails the gradient check is replaced by the next; more
// failures than this mean the kernel family, not a config, is broken.
constexpr int kMaxAccuracyAttempts = 4;
// FlashAttention's convention: the backward does 2.5x the forward's FLOPs.
constexpr double kBackwardFlopsFactor = 2.5;

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

struct Candidate {
  CandidateOutcome outcome;
  std::optional<KernelSpec> spec;
  std::optional<BackwardKernels> kernels;
  bool runnable = false;
};

class BackwardTune {
 public:
  BackwardTune(const Problem &problem, bool deterministic, TuningDb &db,
               const TuneOptions &options)
      : problem_(problem), deterministic_(deterministic), db_(db), options_(options) {}
  llvm::Expected<TuneOutcome> run();

 private:
  void say(const llvm::Twine &line) const {
    if (options_.progress) options_.progress(line.str());
  }
  std::string what() const {
    return describe(problem_) + (deterministic_ ? " backward (deterministic)" : " backward");
  }
  llvm::Error compile_and_load(const DeviceInfo &device);
  llvm::Error measure(const DeviceInfo &device, TuneOutcome &outcome);
  llvm::Expected<int> pick_checked_winner(TuneOutcome &outcome);
  void fill_record(const DeviceInfo &device, const SoftwareFingerprint &software,
                   const Candidate &winner, TuningRecord &r) const;

  const Problem &problem_;
  const bool deterministic_;
  TuningDb &db_;
  const TuneOptions &options_;
  const Clock::time_point start_ = Clock::now();
  std::vector<Candidate> candidates_;
  KernelConfig heuristic_config_;
  int heuristic_index_ = -1;  // 0 unless the heuristic's config was pruned
  std::vector<PrunedConfig> pruned_;
  std::vector<int> ranking_;  // measured candidate indices, best first
  std::unique_ptr<BackwardBench> bench_;
};

llvm::Error BackwardTune::compile_and_load(const DeviceInfo &device) {
  const TargetArch arch = device.target();
  const int max_smem = device.max_smem_per_block_optin;
  CandidateSet set = backward_candidates(problem_, arch, max_smem, deterministic_);
  pruned_ = std::move(set.pruned);
  KernelConfig mode;
  mode.deterministic = deterministic_;
  heuristic_config_ = default_backward_config(problem_, arch, max_smem, mode);
  if (!set.configs.empty() && set.configs.front() == heuristic_config_) heuristic_index_ = 0;
  if (set.configs.empty()) {
    std::vector<std::string> why;
    for (const PrunedConfig &p : pruned_) why.push_back(p.reason);
    return error("no candidate config fits the " + what() + " on " + device.name + ": " +
                 llvm::join(why, "; "));
  }

  std::vector<KernelSpec> specs;
  std::vector<int> spec_owner;
  candidates_.resize(set.configs.size());
  for (size_t i = 0; i < set.configs.size(); ++i) {
    Candidate &c = candidates_[i];
    c.outcome.config = set.configs[i];
    c.outcome.median_ms = kInfinity;
    auto spec = make_backward_spec(problem_, set.configs[i], arch, max_smem);
    if (!spec) {
      c.outcome.failure = "invalid: " + llvm::toString(spec.takeError());
      continue;
    }
    c.spec = *spec;
    c.outcome.id = spec->id();
    specs.push_back(*spec);
    spec_owner.push_back(int(i));
  }
  say(llvm::formatv("{0} backward candidates ({1} pruned before compiling)", candidates_.size(),
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
    auto kernels = BackwardKernels::load(*c.spec, cubin.bytes, cubin.entry);
    if (!kernels) {
      c.outcome.failure = "load: " + llvm::toString(kernels.takeError());
      continue;
    }
    c.kernels = std::move(*kernels);
    const LoadedKernel &main = c.kernels->main();
    c.outcome.registers = main.attributes().registers;
    c.outcome.spill_bytes = main.attributes().local_bytes;
    // Every kernel of the program must be worth running: the deterministic
    // dQ kernel does a third of the work and could spill on its own.
    std::optional<std::string> rejected;
    const auto steps = backward_steps(*c.spec, problem_);
    for (size_t k = 0; k < steps.size() && !rejected; ++k) {
      const LoadedKernel &kernel = c.kernels->kernels[k];
      auto occupancy = kernel.occupancy(int(steps[k].geometry.block.x));
      if (!occupancy) {
        rejected = "occupancy of " + kernel.entry() + ": " + llvm::toString(occupancy.takeError());
        break;
      }
      if (&kernel == &main) c.outcome.occupancy = *occupancy;
      if (auto reason = reject_compiled(kernel.attributes().local_bytes, *occupancy))
        rejected = "pruned after compiling: " + kernel.entry() + " " + *reason;
    }
    if (rejected) {
      c.outcome.failure = *rejected;
      continue;
    }
    c.runnable = true;
    ++loaded;
  }
  say(llvm::formatv("loaded {0} of {1} backward programs", loaded, candidates_.size()));
  if (loaded == 0) {
    std::vector<std::string> why;
    for (const Candidate &c : candidates_) why.push_back(c.outcome.id + ": " + c.outcome.failure);
    return error("no candidate for the " + what() + " compiled and loaded: " +
                 llvm::join(why, "; "));
  }
  return llvm::Error::success();
}

llvm::Error BackwardTune::measure(const DeviceInfo &device, TuneOutcome &outcome) {
  auto bench = BackwardBench::make(problem_, device);
  if (!bench) return bench.takeError();
  bench_ = std::move(*bench);
  outcome.input_sets = bench_->sets();

  std::vector<int> runnable;  // halving index -> candidate index
  for (size_t i = 0; i < candidates_.size(); ++i)
    if (candidates_[i].runnable) runnable.push_back(int(i));
  // A fault while warming up scores the first candidate infinity below, like
  // any launch failure (or shows the bench is broken).
  llvm::consumeError(bench_->warm_up(*candidates_[runnable.front()].kernels, kWarmUpMs));

  HalvingOptions halving;
  halving.initial_repeats = std::max(1, options_.initial_repeats);
  halving.final_repeats = std::max(halving.initial_repeats, options_.final_repeats);
  if (heuristic_index_ == 0 && runnable.front() == 0) halving.always_final.push_back(0);
  // Half of what is left: the accuracy check and host work come after.
  const double left_ms = options_.budget_s * 1000 - seconds_since(start_) * 1000;
  if (options_.budget_s > 0) halving.budget_ms = std::max(1.0, 0.5 * left_ms);
  halving.progress = options_.progress;

  const Clock::time_point measure_start = Clock::now();
  auto timer = [&](int index, int repeats) -> llvm::Expected<Measurement> {
    return bench_->time(*candidates_[runnable[index]].kernels, repeats);
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
    return error(llvm::formatv("tuning the {0} on device {1} stopped: a candidate broke the "
                               "CUDA context ({2}); nothing was stored, and this process cannot "
                               "use the device any more",
                               what(), device.ordinal, bench_->broken())
                     .str());
  if (ranking_.empty()) return error("no candidate for the " + what() + " ran");
  if (halving.budget_ms > 0 && outcome.measure_s * 1000 > halving.budget_ms)
    outcome.notes.push_back(llvm::formatv("measuring took {0:f1} s, over its share of the "
                                          "budget ({1:f1} s)",
                                          outcome.measure_s, halving.budget_ms / 1000)
                                .str());
  return llvm::Error::success();
}

llvm::Expected<int> BackwardTune::pick_checked_winner(TuneOutcome &outcome) {
  if (!options_.check_winner) return ranking_.front();
  int attempts = 0;
  for (int i : ranking_) {
    if (attempts++ == kMaxAccuracyAttempts) break;
    Candidate &c = candidates_[i];
    say("checking " + c.outcome.id + " against the float64 reference gradients");
    auto report = check_backward_kernels(*c.kernels, problem_, bench_->stream());
    std::string why;
    if (!report)
      why = llvm::toString(report.takeError());
    else if (!report->passed())
      why = report->describe();
    else
      return i;
    c.outcome.failure = "accuracy check: " + why;
    outcome.notes.push_back(c.outcome.id + " was fastest but failed the gradient check (" + why +
                            "); trying the next");
    if (llvm::Error health = check_context_health())
      return error("the gradient check of " + c.outcome.id + " broke the CUDA context: " +
                   llvm::toString(std::move(health)) + "; nothing was stored");
  }
  return error("no candidate for the " + what() + " passed the gradient check: " +
               llvm::join(outcome.notes, "; "));
}

void BackwardTune::fill_record(const DeviceInfo &device, const SoftwareFingerprint &software,
                               const Candidate &winner, TuningRecord &r) const {
  r.device = device_fingerprint(device);
  r.software = software;
  r.problem = problem_class_key(problem_, class_pass(Pass::backward, deterministic_));
  r.config = to_stored(winner.outcome.config);
  r.shape = describe(problem_);
  r.median_ms = winner.outcome.median_ms;
  r.min_ms = winner.outcome.min_ms;
  r.max_ms = winner.outcome.max_ms;
  r.tflops = kBackwardFlopsFactor * problem_.forward_flops() / (r.median_ms * 1e-3) / 1e12;
  r.heuristic_config = to_stored(heuristic_config_);
  // Only a heuristic timed in the final round compares like for like.
  if (heuristic_index_ >= 0) {
    const CandidateOutcome &h = candidates_[heuristic_index_].outcome;
    if (std::isfinite(h.median_ms) && h.repeats >= winner.outcome.repeats)
      r.heuristic_ms = h.median_ms;
  }
  const LoadedKernel &main = winner.kernels->main();
  r.occupancy = winner.outcome.occupancy;
  r.registers = winner.outcome.registers;
  r.smem_bytes = main.dynamic_smem_bytes() + main.attributes().static_smem_bytes;
  r.spill_bytes = winner.outcome.spill_bytes;
  r.candidates_tried = int(candidates_.size());
  r.candidates_failed = 0;
  for (const Candidate &c : candidates_)
    if (!c.outcome.failure.empty()) ++r.candidates_failed;
  r.tuned_at = iso8601_utc_now();
  r.flashjit_version = FLASHJIT_VERSION;
  r.cubin_key = winner.outcome.cubin_key;
}

llvm::Expected<TuneOutcome> BackwardTune::run() {
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
  say("tuning the " + what() + " on device " + llvm::Twine(options_.device) + " (" +
      device->name + ")");

  const Clock::time_point compile_start = Clock::now();
  if (llvm::Error e = compile_and_load(*device)) return e;
  outcome.compile_s = seconds_since(compile_start);
  if (llvm::Error e = measure(*device, outcome)) return e;
  auto winner_index = pick_checked_winner(outcome);
  if (!winner_index) return winner_index.takeError();
  Candidate &winner = candidates_[*winner_index];
  winner.outcome.winner = true;

  TuningRecord &r = outcome.record;
  fill_record(*device, *software, winner, r);
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

llvm::Expected<TuneOutcome> tune_backward(const Problem &problem, bool deterministic,
                                          TuningDb &db, const TuneOptions &options) {
  return BackwardTune(problem, deterministic, db, options).run();
}

llvm::Expected<PrecompileOutcome> precompile_backward(const Problem &problem, bool deterministic,
                                                      const TargetArch &arch, int max_smem_bytes,
                                                      TuningDb &db, int threads) {
  if (llvm::Error e = validate_problem(problem)) return e;
  // Without NVRTC every candidate would fail alike: one clear error instead.
  if (auto version = nvrtc_version(); !version) return version.takeError();
  // The heuristic's config is the first candidate, so a fleet that never
  // tunes still starts with its default backward compiled. The winner's
  // check runs on the CPU reference: no other kernel is needed to tune.
  CandidateSet set = backward_candidates(problem, arch, max_smem_bytes, deterministic);
  if (set.configs.empty())
    return error(llvm::formatv("no backward config fits {0} on {1}: {2}", describe(problem),
                               arch.name(),
                               set.pruned.empty() ? std::string("no candidates")
                                                  : set.pruned.front().reason)
                     .str());
  PrecompileOutcome outcome;
  std::vector<KernelSpec> specs;
  for (const KernelConfig &config : set.configs) {
    auto spec = make_backward_spec(problem, config, arch, max_smem_bytes);
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
  return outcome;
}

}  // namespace flashjit
