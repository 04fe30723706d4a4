// The checks in front of a launch, and the C API's argument handling: all of
// it runs before the driver is needed, so it is tested on the CPU.
#include <gtest/gtest.h>

#include "c_api_test_util.h"

#include <cstring>
#include <thread>

#include "flashjit/flashjit.h"
#include "flashjit/forward.h"
#include "runtime/launch_forward.h"

namespace flashjit {
namespace {

void expect_contains(const std::string &message, const char *needle) {
  EXPECT_NE(message.find(needle), std::string::npos) << "'" << needle << "' not in: " << message;
}

Problem small_problem() {
  Problem p;
  p.batch = 2;
  p.heads_q = 8;
  p.heads_kv = 2;
  p.seqlen_q = 113;
  p.seqlen_k = 1023;
  p.head_dim_qk = 128;
  p.head_dim_v = 64;
  return p;
}

// Aligned, never dereferenced: these checks stop before the driver.
const void *fake(uintptr_t address) { return reinterpret_cast<const void *>(address); }

ForwardArgs fake_args(const Problem &p) {
  return ForwardArgs::packed(p, fake(0x10000), fake(0x20000), fake(0x30000),
                             const_cast<void *>(fake(0x40000)), nullptr);
}

TEST(ForwardArgs, PackedStrides) {
  Problem p = small_problem();
  ForwardArgs a = fake_args(p);
  EXPECT_EQ(a.q_strides.head, 128);
  EXPECT_EQ(a.q_strides.seq, 8 * 128);
  EXPECT_EQ(a.q_strides.batch, 113 * 8 * 128);
  EXPECT_EQ(a.k_strides.seq, 2 * 128);
  EXPECT_EQ(a.k_strides.batch, 1023 * 2 * 128);
  EXPECT_EQ(a.v_strides.head, 64);
  EXPECT_EQ(a.v_strides.batch, 1023 * 2 * 64);
  EXPECT_EQ(a.o_strides.seq, 8 * 64);
  EXPECT_EQ(a.o_strides.batch, 113 * 8 * 64);
}

TEST(ValidateForwardArgs, NullPointerIsNamed) {
  Problem p = small_problem();
  ForwardArgs a = fake_args(p);
  a.v = nullptr;
  std::string message = llvm::toString(validate_forward_args(p, a));
  EXPECT_EQ(message, "argument v is null");
}

TEST(ValidateForwardArgs, MisalignedPointerExplainsVectorLoads) {
  Problem p = small_problem();
  ForwardArgs a = fake_args(p);
  a.k = fake(0x20008);
  std::string message = llvm::toString(validate_forward_args(p, a));
  expect_contains(message, "argument k");
  expect_contains(message, "16-byte aligned");
  expect_contains(message, "vector loads");
}

TEST(ValidateForwardArgs, StridesMustBeNonNegativeMultiplesOfEight) {
  Problem p = small_problem();
  ForwardArgs a = fake_args(p);
  a.q_strides.seq = -1024;
  std::string message = llvm::toString(validate_forward_args(p, a));
  expect_contains(message, "argument q: seq stride -1024 is negative");

  a = fake_args(p);
  a.o_strides.head = 68;
  message = llvm::toString(validate_forward_args(p, a));
  expect_contains(message, "argument o: head stride 68 is not a multiple of 8 elements");
}

TEST(ValidateForwardArgs, StrideOfASizeOneDimensionIsFree) {
  Problem p = small_problem();
  p.batch = 1;
  ForwardArgs a = fake_args(p);
  a.q_strides.batch = 3;  // PyTorch gives size-1 dimensions arbitrary strides
  llvm::Error e = validate_forward_args(p, a);
  // It gets past the layout checks: any error now is about the driver or the
  // (fake) pointers, not the stride.
  if (e) {
    std::string message = llvm::toString(std::move(e));
    EXPECT_EQ(message.find("stride"), std::string::npos) << message;
  }
}

TEST(Forward, StatusCarriesTheMessage) {
  Problem p = small_problem();
  ForwardArgs a = fake_args(p);
  a.q = nullptr;
  Status status = forward(p, a);
  ASSERT_FALSE(status.ok());
  expect_contains(status.message(), "argument q is null");
  expect_contains(status.message(), "hq=8");  // the problem is described
}

TEST(Forward, InvalidProblemIsRejectedBeforeTheDriver) {
  Problem p = small_problem();
  p.heads_q = 7;
  Status status = forward(p, fake_args(p));
  ASSERT_FALSE(status.ok());
  expect_contains(status.message(), "heads_q=7");
}

TEST(Version, MatchesTheCApi) {
  EXPECT_STREQ(version(), flashjit_version());
  EXPECT_GT(std::strlen(version()), 0u);
}

flashjit_problem c_problem() { return testing_c_api::c_problem(FLASHJIT_BF16, FLASHJIT_MASK_CAUSAL); }

TEST(CApi, NullProblem) {
  flashjit_forward_args args;
  std::memset(&args, 0, sizeof(args));
  EXPECT_NE(flashjit_forward(nullptr, &args, nullptr, nullptr), 0);
  expect_contains(flashjit_last_error(), "problem is NULL");
  flashjit_problem p = c_problem();
  EXPECT_NE(flashjit_forward(&p, nullptr, nullptr, nullptr), 0);
  expect_contains(flashjit_last_error(), "args is NULL");
}

TEST(CApi, OutOfRangeEnums) {
  flashjit_forward_args args;
  std::memset(&args, 0, sizeof(args));
  flashjit_problem p = c_problem();
  p.dtype = 7;
  EXPECT_NE(flashjit_forward(&p, &args, nullptr, nullptr), 0);
  expect_contains(flashjit_last_error(), "problem.dtype=7");

  p = c_problem();
  p.mask = -1;
  EXPECT_NE(flashjit_forward(&p, &args, nullptr, nullptr), 0);
  expect_contains(flashjit_last_error(), "problem.mask=-1");

  p = c_problem();
  p.dtype = 3;
  EXPECT_NE(flashjit_forward(&p, &args, nullptr, nullptr), 0);
  EXPECT_STREQ(flashjit_last_error(),
               "flashjit_forward: problem.dtype=3 is invalid: expected FLASHJIT_BF16 (0), "
               "FLASHJIT_FP16 (1) or FLASHJIT_E4M3 (2)");

  for (int32_t bad : {-1, 2}) {
    p = c_problem();
    p.kv_dtype = bad;
    EXPECT_NE(flashjit_forward(&p, &args, nullptr, nullptr), 0);
    EXPECT_EQ(std::string(flashjit_last_error()),
              "flashjit_forward: problem.kv_dtype=" + std::to_string(bad) +
                  " is invalid: expected FLASHJIT_KV_SAME (0) or FLASHJIT_KV_E4M3 (1)");
  }
  for (int32_t bad : {-1, 3}) {
    p = c_problem();
    p.out_dtype = bad;
    EXPECT_NE(flashjit_forward(&p, &args, nullptr, nullptr), 0);
    EXPECT_EQ(std::string(flashjit_last_error()),
              "flashjit_forward: problem.out_dtype=" + std::to_string(bad) +
                  " is invalid: expected FLASHJIT_OUT_AUTO (0), FLASHJIT_OUT_BF16 (1) or "
                  "FLASHJIT_OUT_FP16 (2)");
  }

  p = c_problem();
  flashjit_config config = {5, 0, 0, 0, 0, 0, 0, FLASHJIT_PACK_GQA_AUTO};
  EXPECT_NE(flashjit_forward(&p, &args, nullptr, &config), 0);
  expect_contains(flashjit_last_error(), "config.path=5");

  config = {0, 128, -64, 4, 2, 0, 0, FLASHJIT_PACK_GQA_AUTO};
  EXPECT_NE(flashjit_forward(&p, &args, nullptr, &config), 0);
  expect_contains(flashjit_last_error(), "config.block_n=-64");

  config = {0, 0, 0, 0, 0, 0, 0, 3};
  EXPECT_NE(flashjit_forward(&p, &args, nullptr, &config), 0);
  expect_contains(flashjit_last_error(), "config.pack_gqa=3");
}

// splits and pack_gqa were appended to flashjit_config: a zeroed struct
// means "heuristic" for both, as it did before they existed.
TEST(CApi, SplitsAndPackGqaAreValidated) {
  flashjit_forward_args args;
  std::memset(&args, 0, sizeof(args));
  flashjit_problem p = c_problem();
  flashjit_config config;
  std::memset(&config, 0, sizeof(config));
  EXPECT_EQ(config.splits, 0);
  EXPECT_EQ(config.pack_gqa, FLASHJIT_PACK_GQA_AUTO);

  for (int32_t splits : {-1, 257, INT32_MIN}) {
    config.splits = splits;
    EXPECT_NE(flashjit_forward(&p, &args, nullptr, &config), 0);
    EXPECT_EQ(std::string(flashjit_last_error()),
              "flashjit_forward: config.splits=" + std::to_string(splits) +
                  " is invalid: expected 0 (the heuristic chooses), 1 (off) or up to 256 "
                  "splits of the key range");
  }
  config.splits = 0;
  for (int32_t pack : {-1, 3}) {
    config.pack_gqa = pack;
    EXPECT_NE(flashjit_forward(&p, &args, nullptr, &config), 0);
    EXPECT_EQ(std::string(flashjit_last_error()),
              "flashjit_forward: config.pack_gqa=" + std::to_string(pack) +
                  " is invalid: expected FLASHJIT_PACK_GQA_AUTO (0), FLASHJIT_PACK_GQA_ON (1) or "
                  "FLASHJIT_PACK_GQA_OFF (2)");
  }
  // Valid values get past the C API's checks to the library's (null q).
  for (auto [splits, pack] : {std::pair{0, FLASHJIT_PACK_GQA_AUTO}, {1, FLASHJIT_PACK_GQA_OFF},
                              {256, FLASHJIT_PACK_GQA_ON}}) {
    config.splits = splits;
    config.pack_gqa = pack;
    EXPECT_NE(flashjit_forward(&p, &args, nullptr, &config), 0);
    EXPECT_NE(std::string(flashjit_last_error()).rfind("flashjit_forward: config.", 0), 0u)
        << flashjit_last_error();
  }
}

TEST(CApi, ErrorsFromTheLibraryPassThrough) {
  flashjit_forward_args args;
  std::memset(&args, 0, sizeof(args));
  flashjit_problem p = c_problem();
  EXPECT_NE(flashjit_forward(&p, &args, nullptr, nullptr), 0);
  expect_contains(flashjit_last_error(), "argument q is null");
}

TEST(CApi, LastErrorIsPerThread) {
  flashjit_forward_args args;
  std::memset(&args, 0, sizeof(args));
  EXPECT_NE(flashjit_forward(nullptr, &args, nullptr, nullptr), 0);
  std::string other;
  std::thread([&] { other = flashjit_last_error(); }).join();
  EXPECT_EQ(other, "");
  expect_contains(flashjit_last_error(), "problem is NULL");
}

}  // namespace
}  // namespace flashjit
