// The sequence lengths of a packed batch that `flashjit run --varlen` times:
// --seqlens-q/--seqlens-k as given, else drawn at random (seeded) up to the
// longest lengths, one sequence having them. Pure (no GPU): unit-tested.
// (`flashjit tune` times every sequence at the longest lengths instead:
// entry_packed_batch, tuner/plan.h.)
#pragma once

#include <cstdint>
#include <vector>

#include "cli/problem_flags.h"
#include "reference/packed_batch.h"

namespace flashjit::cli {

PackedBatch packed_lengths(const ParsedProblem &parsed, uint64_t seed);

}  // namespace flashjit::cli
