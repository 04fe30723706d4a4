// e4m3 (fp8, torch.float8_e4m3fn) on the host: bit-exact conversions and the
// per-(batch, KV head) quantization flashjit's fp8 calls take
// (ForwardArgs::descale: real value = stored code * descale), for the CLI's
// and the tests' inputs and for the float64 reference, which reads the
// de-quantized values, so that it and the kernel see the very same inputs.
#pragma once

#include <cstdint>
#include <vector>

#include "flashjit/problem.h"
#include "llvm/ADT/ArrayRef.h"

namespace flashjit {

// The largest finite e4m3 value: 1.75 * 2^8 (e4m3fn has no infinities; its
// only NaN codes are 0x7f and 0xff).
inline constexpr float kE4m3Max = 448.f;

// Round to nearest, ties to even mantissa; magnitudes beyond 448 (infinities
// too) saturate to +-448, as the kernels' cvt with .satfinite; NaN stays
// NaN (0x7f, the sign kept); -0 stays -0.
uint8_t float_to_e4m3_bits(float value);
float e4m3_bits_to_float(uint8_t bits);

// Tensor roles, for the grouping of query heads under their KV head.
enum class Fp8Role { q, k, v };

// A packed [batch, seqlen, heads, dim] tensor quantized per (batch, KV
// head): each group's amax over its rows, dims and (for Q) the query heads
// of its KV head gives descale = amax / 448 (1 for an all-zero group), and
// code = e4m3(value / descale). `dequantized` is code * descale: what the
// reference computes with.
struct Fp8Tensor {
  std::vector<uint8_t> codes;
  std::vector<float> descale;  // [batch, heads_kv]: strides (heads_kv, 1)
  std::vector<float> dequantized;
};
// `rows` is the tensor's seqlen (seqlen_q for Q, seqlen_k for K and V).
Fp8Tensor quantize_per_head(const Problem &problem, Fp8Role role, llvm::ArrayRef<float> values,
                            int64_t rows);

}  // namespace flashjit
