#include "cache/sha256.h"

#include <cstring>

#include "llvm/Support/SHA256.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace flashjit {
namespace {

#if defined(__x86_64__)

constexpr uint32_t kRoundConstants[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};

bool cpu_has_sha_extensions() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  const bool sha = ebx & (1u << 29);
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
  const bool ssse3 = ecx & (1u << 9), sse41 = ecx & (1u << 19);
  return sha && ssse3 && sse41;
}

// The state as the SHA instructions keep it: ABEF and CDGH, each word a lane.
// One call per 64-byte block; the message schedule is built four words at a
// time from the four previous groups (msg1 adds sigma0, msg2 sigma1).
__attribute__((target("sha,sse4.1,ssse3"))) void compress_blocks(uint32_t state[8],
                                                                  const uint8_t *blocks,
                                                                  size_t count) {
  const __m128i byte_swap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
  __m128i dcba = _mm_loadu_si128(reinterpret_cast<const __m128i *>(state));
  __m128i hgfe = _mm_loadu_si128(reinterpret_cast<const __m128i *>(state + 4));
  const __m128i cdab = _mm_shuffle_epi32(dcba, 0xB1);
  const __m128i efgh = _mm_shuffle_epi32(hgfe, 0x1B);
  __m128i abef = _mm_alignr_epi8(cdab, efgh, 8);
  __m128i cdgh = _mm_blend_epi16(efgh, cdab, 0xF0);

  for (size_t b = 0; b < count; ++b, blocks += 64) {
    const __m128i abef_in = abef, cdgh_in = cdgh;
    __m128i w[4];
    for (int group = 0; group < 16; ++group) {
      __m128i words;
      if (group < 4) {
        words = _mm_shuffle_epi8(
            _mm_loadu_si128(reinterpret_cast<const __m128i *>(blocks + 16 * group)), byte_swap);
      } else {
        // w[t] = sigma1(w[t-2]) + w[t-7] + sigma0(w[t-15]) + w[t-16]
        const __m128i &x0 = w[group % 4], &x1 = w[(group + 1) % 4];
        const __m128i &x2 = w[(group + 2) % 4], &x3 = w[(group + 3) % 4];
        words = _mm_sha256msg2_epu32(
            _mm_add_epi32(_mm_sha256msg1_epu32(x0, x1), _mm_alignr_epi8(x3, x2, 4)), x3);
      }
      w[group % 4] = words;
      __m128i message = _mm_add_epi32(
          words,
          _mm_loadu_si128(reinterpret_cast<const __m128i *>(kRoundConstants + 4 * group)));
      // Two rounds each: the result is the new ABEF, and the old ABEF is the
      // new CDGH, so the two registers trade roles twice in four rounds.
      cdgh = _mm_sha256rnds2_epu32(cdgh, abef, message);
      message = _mm_shuffle_epi32(message, 0x0E);
      abef = _mm_sha256rnds2_epu32(abef, cdgh, message);
    }
    abef = _mm_add_epi32(abef, abef_in);
    cdgh = _mm_add_epi32(cdgh, cdgh_in);
  }

  const __m128i feba = _mm_shuffle_epi32(abef, 0x1B);
  const __m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);
  dcba = _mm_blend_epi16(feba, dchg, 0xF0);
  hgfe = _mm_alignr_epi8(dchg, feba, 8);
  _mm_storeu_si128(reinterpret_cast<__m128i *>(state), dcba);
  _mm_storeu_si128(reinterpret_cast<__m128i *>(state + 4), hgfe);
}

std::array<uint8_t, 32> sha256_with_extensions(llvm::ArrayRef<uint8_t> bytes) {
  uint32_t state[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                       0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  const size_t whole = bytes.size() / 64;
  compress_blocks(state, bytes.data(), whole);

  // The tail, the 0x80 terminator and the length in bits (big-endian): one
  // or two more blocks.
  uint8_t tail[128] = {};
  const size_t rest = bytes.size() - whole * 64;
  if (rest) std::memcpy(tail, bytes.data() + whole * 64, rest);
  tail[rest] = 0x80;
  const size_t tail_blocks = rest + 1 + 8 <= 64 ? 1 : 2;
  const uint64_t bits = uint64_t(bytes.size()) * 8;
  for (int i = 0; i < 8; ++i) tail[tail_blocks * 64 - 1 - i] = uint8_t(bits >> (8 * i));
  compress_blocks(state, tail, tail_blocks);

  std::array<uint8_t, 32> digest;
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 4; ++j) digest[4 * i + j] = uint8_t(state[i] >> (24 - 8 * j));
  return digest;
}

#endif  // __x86_64__

}  // namespace

bool sha256_uses_cpu_extensions() {
#if defined(__x86_64__)
  static const bool has = cpu_has_sha_extensions();
  return has;
#else
  return false;
#endif
}

std::array<uint8_t, 32> sha256(llvm::ArrayRef<uint8_t> bytes) {
#if defined(__x86_64__)
  if (sha256_uses_cpu_extensions()) return sha256_with_extensions(bytes);
#endif
  return llvm::SHA256::hash(bytes);
}

}  // namespace flashjit
