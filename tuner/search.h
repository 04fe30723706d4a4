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
  int rounds = 0;       // rounds survived
  std::string failure;  // empty unless it failed
};

struct Measurement {
  double median_ms = 0, min_ms = 0, max_ms = 0;
};

// Times candidate `index` with `repeats` runs (after its own warm-up).
using CandidateTimer = std::function<llvm::Expected<Measurement>(int index, int repeats)>;

struct HalvingOptions {
  int initial_repeats = 5;
  int final_repeats = 40;  // the finalists are timed with at least this many
  int keep_at_least = 1;
};

// Scores for every index in [0, count): the winner first, then by median.
std::vector<CandidateScore> successive_halving(int count, const CandidateTimer &timer,
                                               const HalvingOptions &options = {});

}  // namespace flashjit
