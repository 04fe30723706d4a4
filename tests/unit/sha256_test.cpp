// SHA-256 with the CPU's SHA extensions against LLVM's portable code: the
// cubins' integrity check must not change with the machine that reads them.
#include "cache/sha256.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/SHA256.h"

// Unoptimised or under the sanitizers this code is compiled so and LLVM's
// prebuilt copy is not: no speed to compare there.
#if defined(__SANITIZE_ADDRESS__) || !defined(__OPTIMIZE__)
#define FLASHJIT_UNTIMED_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(undefined_behavior_sanitizer)
#define FLASHJIT_UNTIMED_BUILD 1
#endif
#endif

namespace flashjit {
namespace {

std::string hex(llvm::ArrayRef<uint8_t> bytes) { return llvm::toHex(sha256(bytes), true); }

llvm::ArrayRef<uint8_t> text(llvm::StringRef s) {
  return {reinterpret_cast<const uint8_t *>(s.data()), s.size()};
}

TEST(Sha256, KnownDigests) {  // FIPS 180-2's examples
  EXPECT_EQ(hex(text("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex(text("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex(text("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  std::vector<uint8_t> million_a(1000000, 'a');
  EXPECT_EQ(hex(million_a), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Every length around the block and padding boundaries, and a cubin's size.
TEST(Sha256, MatchesLlvmAtEveryBoundary) {
  if (!sha256_uses_cpu_extensions())
    GTEST_SKIP() << "this CPU has no SHA extensions: sha256 is LLVM's code here";
  std::mt19937 random(7);
  std::vector<uint8_t> bytes(300000);
  for (uint8_t &b : bytes) b = uint8_t(random());
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 200; ++n) lengths.push_back(n);
  for (size_t n : {255u, 256u, 257u, 4095u, 4096u, 65537u, 300000u}) lengths.push_back(n);
  for (size_t n : lengths) {
    llvm::ArrayRef<uint8_t> data(bytes.data(), n);
    ASSERT_EQ(sha256(data), llvm::SHA256::hash(data)) << "length " << n;
  }
}

// The point of the extensions: a cubin's hash a few times faster than
// LLVM's (a ratio, so that it holds under the sanitizers' instrumentation).
TEST(Sha256, HashesACubinFasterThanLlvm) {
  if (!sha256_uses_cpu_extensions())
    GTEST_SKIP() << "this CPU has no SHA extensions: LLVM's code hashes instead";
#ifdef FLASHJIT_UNTIMED_BUILD
  GTEST_SKIP() << "an unoptimised or sanitizer build compiles this code so and not LLVM's "
                  "prebuilt copy: no speed to compare";
#endif
  std::vector<uint8_t> cubin(400 * 1024, 0x5a);
  auto best_ms = [&](auto hash) {
    double best = 1e9;
    for (int i = 0; i < 5; ++i) {
      const auto start = std::chrono::steady_clock::now();
      (void)hash(llvm::ArrayRef<uint8_t>(cubin));
      best = std::min(best, std::chrono::duration<double, std::milli>(
                                std::chrono::steady_clock::now() - start)
                                .count());
    }
    return best;
  };
  const double ours = best_ms([](llvm::ArrayRef<uint8_t> b) { return sha256(b); });
  const double llvm_ms = best_ms([](llvm::ArrayRef<uint8_t> b) { return llvm::SHA256::hash(b); });
  std::printf("sha256 of 400 KB: %.3f ms (LLVM's: %.3f ms)\n", ours, llvm_ms);
  EXPECT_LT(ours * 2, llvm_ms);  // 3.3-3.7x measured on an AMD EPYC
}

}  // namespace
}  // namespace flashjit
