// The host side of the tuner's timing sets: each tensor's bytes in the
// element type its problem names (Q in dtype, K and V in kv_element, O in
// out_element, plus the fp32 descales of the e4m3 ones) and random values
// stored in those types, e4m3 ones as the codes a per-head quantizer would
// give standard-normal values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "flashjit/problem.h"
#include "reference/packed_batch.h"

namespace flashjit {

// Irwin-Hall's bound, 2 sqrt(3) (random_storage's largest magnitude), over
// e4m3's largest value 448: the descale that spreads the values over e4m3's
// whole range, as amax / 448 does for a large standard-normal sample.
inline constexpr float kTimingE4m3Descale = 3.46410162f / 448.f;

// One timing set's bytes. descale: the [batch, heads_kv] fp32 factors of
// each e4m3 tensor among Q, K and V (none for a 16-bit problem).
struct TimingSetBytes {
  size_t q = 0, k = 0, v = 0, o = 0, lse = 0, descale = 0;
  size_t total() const { return q + k + v + o + lse + descale; }
};
TimingSetBytes timing_set_bytes(const Problem &problem, const TensorElements &elements);

// n approximately standard-normal values (Irwin-Hall of four uniforms:
// bounded by 2 sqrt(3), never all zero) in 16-bit `dtype`'s storage.
// splitmix64 rather than <random>: the timing sets of a large problem hold
// tens of millions of elements, generated on every tune.
std::vector<uint16_t> random_bits(DType dtype, size_t n, uint64_t seed);
// The same values stored as `element`: little-endian 16-bit storage, or
// e4m3 codes of value / kTimingE4m3Descale.
std::vector<uint8_t> random_storage(DType element, size_t n, uint64_t seed);

}  // namespace flashjit
