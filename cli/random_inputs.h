// Random inputs for `flashjit run` (forward and backward).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "flashjit/problem.h"

namespace flashjit::cli {

// `n` standard normal values rounded to `dtype`, in 16-bit storage;
// deterministic for a seed.
std::vector<uint16_t> random_normal(DType dtype, size_t n, uint64_t seed);

}  // namespace flashjit::cli
