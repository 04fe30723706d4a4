#include "reference/cpu_attention.h"

#include "reference/fp8.h"

#include <bit>
#include <cassert>
#include <cmath>
#include <limits>
#include <random>

namespace flashjit {

uint16_t float_to_bf16_bits(float value) {
  uint32_t x = std::bit_cast<uint32_t>(value);
  // Quiet the NaN: truncation could otherwise turn a NaN into infinity.
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

float bf16_bits_to_float(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

uint16_t float_to_fp16_bits(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs_bits = x & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return sign | 0x7e00u;  // NaN
  // 65520 is halfway between fp16's largest finite value (65504, odd
  // mantissa) and 2^16, so it and everything above round to infinity.
  if (abs_bits >= 0x477ff000u) return sign | 0x7c00u;
  if (abs_bits < 0x38800000u) {
    // Subnormal (or zero): a multiple of 2^-24 below 2^-14; the scaled value
    // is exact in float, and nearbyint rounds half to even. A result of 1024
    // is the encoding of the smallest normal, as it should be.
    const float scaled = std::bit_cast<float>(abs_bits) * 16777216.0f;
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  uint32_t h = ((abs_bits >> 23) - 127 + 15) << 10 | ((abs_bits & 0x7fffffu) >> 13);
  const uint32_t rest = abs_bits & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry bumps the exponent
  return sign | static_cast<uint16_t>(h);
}

float fp16_bits_to_float(uint16_t bits) {
  const float sign = (bits & 0x8000u) ? -1.0f : 1.0f;
  const int exponent = (bits >> 10) & 0x1f;
  const int mantissa = bits & 0x3ff;
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -24);
  if (exponent == 31)
    return mantissa ? std::numeric_limits<float>::quiet_NaN()
                    : sign * std::numeric_limits<float>::infinity();
  return sign * std::ldexp(static_cast<float>(1024 + mantissa), exponent - 25);
}

uint16_t float_to_bits(DType dtype, float value) {
  if (dtype == DType::e4m3) return float_to_e4m3_bits(value);
  return dtype == DType::bf16 ? float_to_bf16_bits(value) : float_to_fp16_bits(value);
}

float bits_to_float(DType dtype, uint16_t bits) {
  if (dtype == DType::e4m3) return e4m3_bits_to_float(uint8_t(bits));
  return dtype == DType::bf16 ? bf16_bits_to_float(bits) : fp16_bits_to_float(bits);
}

float round_to(DType dtype, float value) { return bits_to_float(dtype, float_to_bits(dtype, value)); }

std::vector<float> random_values(DType dtype, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<float> v(n);
  for (float &x : v) x = round_to(dtype, dist(rng));
  return v;
}

std::vector<uint16_t> to_storage(DType dtype, llvm::ArrayRef<float> values) {
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) bits[i] = float_to_bits(dtype, values[i]);
  return bits;
}

std::vector<float> from_storage(DType dtype, llvm::ArrayRef<uint16_t> bits) {
  std::vector<float> values(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) values[i] = bits_to_float(dtype, bits[i]);
  return values;
}

void round_all(DType dtype, std::vector<float> &values) {
  for (float &x : values) x = round_to(dtype, x);
}

bool key_visible(const Problem &problem, int64_t i, int64_t j) {
  int64_t left = -1, right = -1;
  if (problem.mask == MaskKind::causal) {
    right = 0;
  } else if (problem.mask == MaskKind::window) {
    left = problem.window_left;
    right = problem.window_right;
  }
  const int64_t diagonal = i + problem.seqlen_k - problem.seqlen_q;
  if (left >= 0 && j < diagonal - left) return false;
  if (right >= 0 && j > diagonal + right) return false;
  if (const int64_t chunk = problem.attention_chunk; chunk > 0) {
    // The row's chunk, by floor division (its position is negative where
    // seqlen_q > seqlen_k).
    const int64_t row_chunk = diagonal >= 0 ? diagonal / chunk : -((-diagonal + chunk - 1) / chunk);
    if (j / chunk != row_chunk) return false;
  }
  return true;
}

size_t q_elements(const Problem &p) {
  return static_cast<size_t>(p.batch * p.seqlen_q * p.heads_q * p.head_dim_qk);
}
size_t k_elements(const Problem &p) {
  return static_cast<size_t>(p.batch * p.seqlen_k * p.heads_kv * p.head_dim_qk);
}
size_t v_elements(const Problem &p) {
  return static_cast<size_t>(p.batch * p.seqlen_k * p.heads_kv * p.head_dim_v);
}
size_t o_elements(const Problem &p) {
  return static_cast<size_t>(p.batch * p.seqlen_q * p.heads_q * p.head_dim_v);
}
size_t lse_elements(const Problem &p) {
  return static_cast<size_t>(p.batch * p.heads_q * p.seqlen_q);
}

AttentionOutputs cpu_attention(const Problem &p, llvm::ArrayRef<float> q, llvm::ArrayRef<float> k,
                               llvm::ArrayRef<float> v, ReferencePrecision precision,
                               const ReferenceModifiers &modifiers) {
  assert(q.size() == q_elements(p) && k.size() == k_elements(p) && v.size() == v_elements(p));
  assert(modifiers.sinks.empty() || modifiers.sinks.size() == size_t(p.heads_q));
  const int64_t dqk = p.head_dim_qk, dv = p.head_dim_v;
  const int64_t heads_per_kv = p.heads_q / p.heads_kv;
  const double scale =
      p.softmax_scale != 0.f ? double(p.softmax_scale) : 1.0 / std::sqrt(double(dqk));
  const double softcap = p.softcap;
  const bool element = precision == ReferencePrecision::element;
  // An fp8 problem's inputs are de-quantized values already; its element
  // variant rounds P and O to the output's 16-bit type (the fp8 criterion,
  // reference/accuracy.h, reads no baseline).
  const DType rounding = p.dtype == DType::e4m3 ? out_element(p) : p.dtype;
  const bool sinks = !modifiers.sinks.empty();

  AttentionOutputs result;
  result.out.assign(o_elements(p), 0.f);
  result.lse.assign(lse_elements(p), 0.f);
  std::vector<double> scores(static_cast<size_t>(p.seqlen_k));
  std::vector<double> acc(static_cast<size_t>(dv));

  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads_q; ++h) {
      const int64_t hk = h / heads_per_kv;
      for (int64_t i = 0; i < p.seqlen_q; ++i) {
        const float *qrow = &q[((b * p.seqlen_q + i) * p.heads_q + h) * dqk];
        double row_max = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < p.seqlen_k; ++j) {
          if (!key_visible(p, i, j) || (modifiers.visible && !modifiers.visible(b, h, i, j))) {
            scores[j] = -std::numeric_limits<double>::infinity();
            continue;
          }
          const float *krow = &k[((b * p.seqlen_k + j) * p.heads_kv + hk) * dqk];
          double dot = 0;
          for (int64_t d = 0; d < dqk; ++d) dot += double(qrow[d]) * double(krow[d]);
          double s = softcap > 0 ? softcap * std::tanh(dot * scale / softcap) : dot * scale;
          if (modifiers.score) s = modifiers.score(s, b, h, i, j);
          scores[j] = s;
          row_max = std::max(row_max, s);
        }
        float &lse = result.lse[(b * p.heads_q + h) * p.seqlen_q + i];
        float *orow = &result.out[((b * p.seqlen_q + i) * p.heads_q + h) * dv];
        // The sink takes part in the max, so exp never overflows.
        const double sink = sinks ? double(modifiers.sinks[h]) : 0.0;
        if (sinks) row_max = std::max(row_max, sink);
        if (row_max == -std::numeric_limits<double>::infinity()) {
          lse = std::numeric_limits<float>::infinity();
          continue;  // O stays 0
        }
        double sum = sinks ? std::exp(sink - row_max) : 0.0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j < p.seqlen_k; ++j) {
          if (scores[j] == -std::numeric_limits<double>::infinity()) continue;
          const double prob = std::exp(scores[j] - row_max);
          // The row sum stays unrounded, as a kernel keeps it in fp32
          // registers; only the P·V operand is in the element type.
          sum += prob;
          const double weight = element ? double(round_to(rounding, float(prob))) : prob;
          const float *vrow = &v[((b * p.seqlen_k + j) * p.heads_kv + hk) * dv];
          for (int64_t d = 0; d < dv; ++d) acc[d] += weight * double(vrow[d]);
        }
        for (int64_t d = 0; d < dv; ++d) {
          const float o = float(acc[d] / sum);
          orow[d] = element ? round_to(rounding, o) : o;
        }
        lse = float(row_max + std::log(sum));
      }
    }
  }
  return result;
}

}  // namespace flashjit
