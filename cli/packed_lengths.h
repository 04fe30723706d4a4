// The sequence lengths of a packed batch that `flashjit run --varlen` times:
// --seqlens-q/--seqlens-k as given, else drawn at random (seeded) up to the
// longest lengths, one sequence having them. Pure (no GPU): unit-tested.
#pragma once

#include <cstdint>
#include <vector>

#include "cli/problem_flags.h"

namespace flashjit::cli {

struct PackedLengths {
  std::vector<int64_t> q, k;
};

PackedLengths packed_lengths(const ParsedProblem &parsed, uint64_t seed);

}  // namespace flashjit::cli
