#include "tuner/timing_inputs.h"

#include <cstring>

#include "reference/cpu_attention.h"
#include "reference/fp8.h"

namespace flashjit {
namespace {

// Calls store(i, value) for n Irwin-Hall values of variance 1.
template <class Store>
void irwin_hall(size_t n, uint64_t seed, Store store) {
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  auto next = [&state] {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  for (size_t i = 0; i < n; ++i) {
    const uint64_t r = next();
    float sum = 0;
    for (int j = 0; j < 4; ++j) sum += float((r >> (16 * j)) & 0xFFFF) / 65536.f;
    store(i, (sum - 2.f) * 1.7320508f);  // variance 4/12 -> 1
  }
}

}  // namespace

TimingSetBytes timing_set_bytes(const Problem &p, const TensorElements &n) {
  TimingSetBytes bytes;
  const DType kv = kv_element(p);
  bytes.q = n.q * size_t(element_bytes(p.dtype));
  bytes.k = n.k * size_t(element_bytes(kv));
  bytes.v = n.v * size_t(element_bytes(kv));
  bytes.o = n.o * size_t(element_bytes(out_element(p)));
  bytes.lse = n.lse * sizeof(float);
  const size_t fp8_tensors = (p.dtype == DType::e4m3 ? 1 : 0) + (kv == DType::e4m3 ? 2 : 0);
  bytes.descale = fp8_tensors * size_t(p.batch * p.heads_kv) * sizeof(float);
  return bytes;
}

std::vector<uint16_t> random_bits(DType dtype, size_t n, uint64_t seed) {
  std::vector<uint16_t> out(n);
  irwin_hall(n, seed, [&](size_t i, float x) { out[i] = float_to_bits(dtype, x); });
  return out;
}

std::vector<uint8_t> random_storage(DType element, size_t n, uint64_t seed) {
  if (element == DType::e4m3) {
    std::vector<uint8_t> codes(n);
    irwin_hall(n, seed, [&](size_t i, float x) {
      codes[i] = float_to_e4m3_bits(x / kTimingE4m3Descale);
    });
    return codes;
  }
  const std::vector<uint16_t> bits = random_bits(element, n, seed);
  std::vector<uint8_t> bytes(bits.size() * sizeof(uint16_t));
  std::memcpy(bytes.data(), bits.data(), bytes.size());
  return bytes;
}

}  // namespace flashjit
