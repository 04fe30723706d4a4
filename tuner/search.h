// Successive halving over candidates: every survivor is timed with a few
// repeats, the slower half is dropped, and the repeats double, so time goes
// to the contenders. A candidate whose timing fails scores infinity and is
// recorded; it never aborts the search. The timer is an interface so the
// selection logic is tested with a fake one.
#pragma once

#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "llvm/Support/Error.h"

namespace flashjit {

struct CandidateScore {
  int index = 0;  // into the caller's candidate list
  double median_ms = std::numeric_limits<double>::infinity();
  double min_ms = std::numeric_limits<double>::infinity();
  double max_ms = std::numeric_limits<double>::infinity();
  int repeats = 0;      // of the last round it took part in
  int rounds = 0;       // rounds it was timed in
  bool finalist = false;  // timed in the final round
  int timed_runs = 0;     // total repeats over all its rounds
  std::string failure;    // empty unless it failed
};

struct Measurement {
  double median_ms = 0, min_ms = 0, max_ms = 0;
};

// Times candidate `index` with `repeats` runs (after its own warm-up).
using CandidateTimer = std::function<llvm::Expected<Measurement>(int index, int repeats)>;

struct HalvingOptions {
  int initial_repeats = 5;
  int final_repeats = 40;  // the finalists are timed with at least this many
  // Each round keeps at least this many (and at least 2 while more than one
  // is left); the final round comes when no more than max(2, keep_at_least)
  // are left.
  int keep_at_least = 1;
  // Indices that join the final round even when an earlier round dropped
  // them (the heuristic's config: the gain over it must be measured with the
  // same repeats as the winner's). Failed ones stay dropped.
  std::vector<int> always_final;
  // Soft limit on the time spent timing, estimated from the measurements
  // themselves (median x repeats); 0: none. When the next round would not
  // fit, repeats stop doubling or the search goes straight to a final of
  // the two best with as many repeats as are left (never fewer than the
  // last round's).
  double budget_ms = 0;
  // Optional: one line per round ("round 2: 6 left, 10 repeats").
  std::function<void(const std::string &)> progress;
};

// Scores for every index in [0, count): the winner (the fastest finalist)
// first, then the other finalists, then the rest by the last round they
// reached (later first), each group by median; ties by index. Failures last.
std::vector<CandidateScore> successive_halving(int count, const CandidateTimer &timer,
                                               const HalvingOptions &options = {});

}  // namespace flashjit
