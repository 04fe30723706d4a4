#include "cli/random_inputs.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "reference/cpu_attention.h"

namespace flashjit::cli {

// Standard normal values rounded to `dtype`, in 16-bit storage. SplitMix64 +
// Box-Muller in independent chunks: deterministic for a seed whatever the
// thread count, and fast enough for 8k-token tensors (100M+ elements).
std::vector<uint16_t> random_normal(DType dtype, size_t n, uint64_t seed) {
  std::vector<uint16_t> out(n);
  constexpr size_t kChunk = size_t(1) << 20;
  const size_t chunks = (n + kChunk - 1) / kChunk;
  auto fill = [&](size_t chunk) {
    uint64_t state = seed * 0x9E3779B97F4A7C15ull + chunk * 0xD1B54A32D192ED03ull + 1;
    auto next = [&state]() {
      uint64_t z = (state += 0x9E3779B97F4A7C15ull);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      return z ^ (z >> 31);
    };
    const size_t end = std::min(n, (chunk + 1) * kChunk);
    for (size_t i = chunk * kChunk; i < end; i += 2) {
      const double u1 = (double(next() >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]: log is finite
      const double u2 = double(next() >> 11) * 0x1.0p-53;
      const double r = std::sqrt(-2.0 * std::log(u1));
      out[i] = float_to_bits(dtype, float(r * std::cos(2 * M_PI * u2)));
      if (i + 1 < end) out[i + 1] = float_to_bits(dtype, float(r * std::sin(2 * M_PI * u2)));
    }
  };
  const size_t threads = std::max<size_t>(1, std::min<size_t>(chunks, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (size_t c = t; c < chunks; c += threads) fill(c);
    });
  for (std::thread &th : pool) th.join();
  return out;
}

}  // namespace flashjit::cli
