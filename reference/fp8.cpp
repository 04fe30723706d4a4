#include "reference/fp8.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace flashjit {

namespace {

// e4m3: 1 sign, 4 exponent (bias 7), 3 mantissa bits; exponent 0 is
// subnormal (m * 2^-9).
constexpr int kBias = 7;
constexpr int kMantissaBits = 3;
constexpr uint8_t kNan = 0x7f;
constexpr uint8_t kMaxCode = 0x7e;  // 448

}  // namespace

float e4m3_bits_to_float(uint8_t bits) {
  const bool negative = bits & 0x80;
  const int exponent = (bits >> kMantissaBits) & 0xf;
  const int mantissa = bits & 0x7;
  float magnitude;
  if (exponent == 0xf && mantissa == 0x7)
    magnitude = NAN;
  else if (exponent == 0)
    magnitude = std::ldexp(float(mantissa), 1 - kBias - kMantissaBits);
  else
    magnitude = std::ldexp(float(8 + mantissa), exponent - kBias - kMantissaBits);
  return negative ? -magnitude : magnitude;
}

uint8_t float_to_e4m3_bits(float value) {
  const uint8_t sign = std::signbit(value) ? 0x80 : 0;
  if (std::isnan(value)) return sign | kNan;
  const double a = std::fabs(double(value));
  if (a >= kE4m3Max) return sign | kMaxCode;
  // The quantum of a's binade (the subnormals' below 2^-6): a / quantum is
  // exact in double, and nearbyint rounds it half to even, which is the
  // even mantissa (the quantum's multiple is the code's low bits).
  int exponent = 0;
  std::frexp(a, &exponent);  // a = f * 2^exponent, f in [0.5, 1)
  const int binade = std::max(exponent - 1, 1 - kBias);
  const double quantum = std::ldexp(1.0, binade - kMantissaBits);
  const double steps = std::nearbyint(a / quantum);
  const double rounded = steps * quantum;
  if (rounded >= kE4m3Max) return sign | kMaxCode;
  if (rounded == 0) return sign;
  // Encode the rounded value, which may have carried into the next binade.
  std::frexp(rounded, &exponent);
  const int e = exponent - 1 + kBias;
  if (e <= 0)  // subnormal: m * 2^-9
    return sign | uint8_t(std::lround(std::ldexp(rounded, kBias - 1 + kMantissaBits)));
  const int mantissa = int(std::lround(std::ldexp(rounded, kMantissaBits - (exponent - 1)))) - 8;
  return sign | uint8_t(e << kMantissaBits) | uint8_t(mantissa);
}

Fp8Tensor quantize_per_head(const Problem &p, Fp8Role role, llvm::ArrayRef<float> values,
                            int64_t rows) {
  const int64_t heads = role == Fp8Role::q ? p.heads_q : p.heads_kv;
  const int64_t dim = role == Fp8Role::v ? p.head_dim_v : p.head_dim_qk;
  const int64_t group = heads / p.heads_kv;  // heads sharing one descale
  Fp8Tensor out;
  out.codes.resize(values.size());
  out.dequantized.resize(values.size());
  out.descale.assign(size_t(p.batch * p.heads_kv), 0.f);
  auto index = [&](int64_t b, int64_t r, int64_t h) { return ((b * rows + r) * heads + h) * dim; };
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t h = 0; h < heads; ++h) {
        float &amax = out.descale[size_t(b * p.heads_kv + h / group)];
        for (int64_t d = 0; d < dim; ++d)
          amax = std::max(amax, std::fabs(values[size_t(index(b, r, h) + d)]));
      }
  for (float &d : out.descale) d = d > 0 ? d / kE4m3Max : 1.f;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t h = 0; h < heads; ++h) {
        const float descale = out.descale[size_t(b * p.heads_kv + h / group)];
        for (int64_t d = 0; d < dim; ++d) {
          const size_t i = size_t(index(b, r, h) + d);
          out.codes[i] = float_to_e4m3_bits(values[i] / descale);
          out.dequantized[i] = e4m3_bits_to_float(out.codes[i]) * descale;
        }
      }
  return out;
}

}  // namespace flashjit
