#include "tuner/search.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "llvm/Support/FormatVariadic.h"

namespace flashjit {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

class Halving {
 public:
  Halving(int count, const CandidateTimer &timer, const HalvingOptions &options)
      : timer_(timer), options_(options), scores_(count) {
    for (int i = 0; i < count; ++i) scores_[i].index = i;
  }

  std::vector<CandidateScore> run();

 private:
  // Times one candidate; false (and the candidate is dropped) when it fails.
  bool time(int index, int repeats);
  // Survivors of `alive` (failures removed), fastest first.
  std::vector<int> rank(const std::vector<int> &alive) const;
  double sum_medians(const std::vector<int> &indices, size_t first_n) const;
  bool failed(int index) const { return !scores_[index].failure.empty(); }

  const CandidateTimer &timer_;
  const HalvingOptions &options_;
  std::vector<CandidateScore> scores_;
  double spent_ms_ = 0;  // estimated: median x repeats of every timing so far
};

bool Halving::time(int index, int repeats) {
  CandidateScore &s = scores_[index];
  ++s.rounds;
  s.repeats = repeats;
  s.timed_runs += repeats;
  auto m = timer_(index, repeats);
  if (!m) {
    s.failure = llvm::toString(m.takeError());
  } else if (!std::isfinite(m->median_ms) || m->median_ms < 0) {
    // A timer that returns garbage is as useless as one that fails; scoring
    // it would let a NaN win every comparison it takes part in.
    s.failure = llvm::formatv("the timer returned a median of {0} ms", m->median_ms).str();
  } else {
    s.median_ms = m->median_ms;
    s.min_ms = m->min_ms;
    s.max_ms = m->max_ms;
    spent_ms_ += m->median_ms * repeats;
    return true;
  }
  s.median_ms = s.min_ms = s.max_ms = kInfinity;
  return false;
}

std::vector<int> Halving::rank(const std::vector<int> &alive) const {
  std::vector<int> out;
  for (int i : alive)
    if (!failed(i)) out.push_back(i);
  // Ties go to the lower index: the caller lists its preferred configs
  // first (the heuristic's), so a tie never moves away from it.
  std::stable_sort(out.begin(), out.end(), [&](int a, int b) {
    return scores_[a].median_ms < scores_[b].median_ms;
  });
  return out;
}

double Halving::sum_medians(const std::vector<int> &indices, size_t first_n) const {
  double sum = 0;
  for (size_t i = 0; i < indices.size() && i < first_n; ++i)
    sum += scores_[indices[i]].median_ms;
  return sum;
}

std::vector<CandidateScore> Halving::run() {
  const int count = static_cast<int>(scores_.size());
  const size_t keep_at_least = static_cast<size_t>(std::max(1, options_.keep_at_least));
  // Halving below two would decide on one noisy comparison; the final round
  // compares the last two (or keep_at_least) with the most repeats.
  const size_t final_size = std::max<size_t>(2, keep_at_least);
  const double budget = options_.budget_ms;
  int repeats = std::max(1, options_.initial_repeats);
  const int final_repeats = std::max(repeats, options_.final_repeats);

  std::vector<int> alive;
  for (int i = 0; i < count; ++i) alive.push_back(i);

  int round = 0;
  while (alive.size() > final_size) {
    ++round;
    if (options_.progress)
      options_.progress(llvm::formatv("round {0}: {1} left, {2} repeats", round, alive.size(),
                                      repeats)
                            .str());
    for (int i : alive) time(i, repeats);
    alive = rank(alive);
    const size_t n = alive.size();
    if (n <= final_size) break;
    size_t keep = std::max({(n + 1) / 2, keep_at_least, size_t(2)});
    alive.resize(std::min(keep, n));
    if (budget <= 0) {
      repeats *= 2;
      continue;
    }
    // What the rest would cost at the measured speeds: the next round at
    // doubled repeats, and a final of the best `final_size`.
    const double final_cost = sum_medians(alive, final_size) * final_repeats;
    const double round_cost = sum_medians(alive, alive.size()) * repeats;
    if (spent_ms_ + 2 * round_cost + final_cost <= budget)
      repeats *= 2;
    else if (spent_ms_ + round_cost + final_cost > budget && alive.size() > final_size)
      alive.resize(final_size);  // no room for another round: straight to the final
  }

  // The final round: the survivors plus those that must be measured alike.
  std::vector<int> finalists = alive;
  for (int i : options_.always_final)
    if (i >= 0 && i < count && !failed(i) &&
        std::find(finalists.begin(), finalists.end(), i) == finalists.end())
      finalists.push_back(i);
  int repeats_now = final_repeats;
  if (budget > 0) {
    // Finalists already timed tell what a repeat costs; never fewer repeats
    // than the last round's, so the final is at least as precise.
    const double per_repeat = sum_medians(finalists, finalists.size());
    if (per_repeat > 0 && std::isfinite(per_repeat)) {
      const double fit = std::floor((budget - spent_ms_) / per_repeat);
      repeats_now = static_cast<int>(std::clamp<double>(fit, repeats, final_repeats));
    }
  }
  if (options_.progress)
    options_.progress(llvm::formatv("final: {0} left, {1} repeats", finalists.size(),
                                    repeats_now)
                          .str());
  for (int i : finalists)
    if (time(i, repeats_now)) scores_[i].finalist = true;

  std::vector<CandidateScore> out = scores_;
  std::stable_sort(out.begin(), out.end(), [](const CandidateScore &a, const CandidateScore &b) {
    const bool fa = !a.failure.empty(), fb = !b.failure.empty();
    if (fa != fb) return fb;  // failures last
    if (fa) return a.index < b.index;
    if (a.finalist != b.finalist) return a.finalist;
    if (a.rounds != b.rounds) return a.rounds > b.rounds;
    if (a.median_ms != b.median_ms) return a.median_ms < b.median_ms;
    return a.index < b.index;
  });
  return out;
}

}  // namespace

std::vector<CandidateScore> successive_halving(int count, const CandidateTimer &timer,
                                               const HalvingOptions &options) {
  if (count <= 0) return {};
  return Halving(count, timer, options).run();
}

}  // namespace flashjit
