// The checks of fp8 calls in front of a launch (runtime/element_checks.h and
// the element sizes of validate_forward_args): every refusal's exact
// message, on the CPU, since each comes before the driver is needed.
#include <gtest/gtest.h>

#include "c_api_test_util.h"

#include <string>

#include "flashjit/backward.h"
#include "flashjit/flashjit.h"
#include "flashjit/forward.h"
#include "runtime/element_checks.h"
#include "runtime/launch_forward.h"

namespace flashjit {
namespace {

Problem fp8_problem(DType dtype = DType::e4m3, KvDType kv = KvDType::same) {
  Problem p;
  p.dtype = dtype;
  p.kv_dtype = kv;
  p.batch = 2;
  p.heads_q = 8;
  p.heads_kv = 2;
  p.seqlen_q = 113;
  p.seqlen_k = 1023;
  p.head_dim_qk = 128;
  p.head_dim_v = 128;
  return p;
}

// Aligned, never dereferenced: these checks stop before the driver.
const void *fake(uintptr_t address) { return reinterpret_cast<const void *>(address); }
const float *fake_floats(uintptr_t address) { return reinterpret_cast<const float *>(address); }

// Element strides of densely packed tensors (ForwardArgs::packed counts
// elements, so they serve any element size), with the descales the
// problem's e4m3 tensors need, per (batch, KV head).
ForwardArgs fp8_args(const Problem &p) {
  ForwardArgs a = ForwardArgs::packed(p, fake(0x10000), fake(0x20000), fake(0x30000),
                                      const_cast<void *>(fake(0x40000)), nullptr);
  if (p.dtype == DType::e4m3) a.descale.q = fake_floats(0x50000);
  if (kv_element(p) == DType::e4m3) {
    a.descale.k = fake_floats(0x60000);
    a.descale.v = fake_floats(0x70000);
  }
  a.descale.batch_stride = p.heads_kv;
  a.descale.head_stride = 1;
  return a;
}

std::string message(llvm::Error e) { return e ? llvm::toString(std::move(e)) : "success"; }

// Past every host check, a call on this machine fails at the driver (or its
// fake pointers): anything but a layout or descale complaint.
void expect_past_host_checks(llvm::Error e) {
  const std::string text = message(std::move(e));
  EXPECT_EQ(text.find("stride"), std::string::npos) << text;
  EXPECT_EQ(text.find("descale"), std::string::npos) << text;
  EXPECT_EQ(text.find("aligned"), std::string::npos) << text;
}

TEST(ElementTypes, OutDtypeOfAnotherSixteenBitTypeIsRefused) {
  Problem p = fp8_problem(DType::bf16);
  p.out_dtype = OutDType::fp16;
  EXPECT_EQ(message(validate_element_types(p)),
            "out_dtype=fp16 with dtype=bf16: a 16-bit problem's output has its dtype; leave "
            "out_dtype auto");
  p.dtype = DType::fp16;
  p.out_dtype = OutDType::bf16;
  EXPECT_EQ(message(validate_element_types(p)),
            "out_dtype=bf16 with dtype=fp16: a 16-bit problem's output has its dtype; leave "
            "out_dtype auto");
  // Under an fp8 cache the output is Q's too.
  p.kv_dtype = KvDType::e4m3;
  EXPECT_NE(message(validate_element_types(p)), "success");
}

TEST(ElementTypes, ServableCombinationsPass) {
  for (OutDType out : {OutDType::automatic, OutDType::bf16, OutDType::fp16}) {
    Problem p = fp8_problem(DType::e4m3);
    p.out_dtype = out;
    EXPECT_EQ(message(validate_element_types(p)), "success") << to_string(out);
    p.kv_dtype = KvDType::e4m3;  // the same as `same` under e4m3 Q
    EXPECT_EQ(message(validate_element_types(p)), "success") << to_string(out);
  }
  Problem p = fp8_problem(DType::bf16, KvDType::e4m3);
  p.out_dtype = OutDType::bf16;  // what auto is
  EXPECT_EQ(message(validate_element_types(p)), "success");
}

TEST(ElementTypes, OutputElementFollowsTheProblem) {
  Problem p = fp8_problem(DType::e4m3);
  EXPECT_EQ(out_element(p), DType::bf16);
  p.out_dtype = OutDType::fp16;
  EXPECT_EQ(out_element(p), DType::fp16);
  p = fp8_problem(DType::fp16, KvDType::e4m3);
  EXPECT_EQ(out_element(p), DType::fp16);
  EXPECT_EQ(kv_element(p), DType::e4m3);
  p.kv_dtype = KvDType::same;
  EXPECT_EQ(kv_element(p), DType::fp16);
}

TEST(Fp8Descales, MissingDescalesAreNamed) {
  Problem p = fp8_problem();
  ForwardArgs a = fp8_args(p);
  a.descale.q = nullptr;
  EXPECT_EQ(message(validate_forward_args(p, a)),
            "argument q_descale is null: Q is e4m3 (dtype=e4m3); pass its fp32 dequantization "
            "factors on the device, [batch, heads_kv] or one for the tensor (strides 0)");
  a = fp8_args(p);
  a.descale.v = nullptr;
  EXPECT_EQ(message(validate_forward_args(p, a)),
            "argument v_descale is null: V is e4m3 (dtype=e4m3); pass its fp32 dequantization "
            "factors on the device, [batch, heads_kv] or one for the tensor (strides 0)");

  p = fp8_problem(DType::bf16, KvDType::e4m3);
  a = fp8_args(p);
  a.descale.k = nullptr;
  EXPECT_EQ(message(validate_forward_args(p, a)),
            "argument k_descale is null: K is e4m3 (kv_dtype=e4m3); pass its fp32 "
            "dequantization factors on the device, [batch, heads_kv] or one for the tensor "
            "(strides 0)");
}

TEST(Fp8Descales, DescaleOfASixteenBitTensorIsRefused) {
  Problem p = fp8_problem(DType::bf16, KvDType::e4m3);
  ForwardArgs a = fp8_args(p);
  a.descale.q = fake_floats(0x50000);
  EXPECT_EQ(message(validate_forward_args(p, a)),
            "argument q_descale: given, but Q is bf16: descales belong to e4m3 tensors "
            "(dtype=e4m3, or kv_dtype=e4m3 for K and V); pass null");
  p = fp8_problem(DType::fp16);
  a = fp8_args(p);
  a.descale.k = fake_floats(0x60000);
  EXPECT_EQ(message(validate_forward_args(p, a)),
            "argument k_descale: given, but K is fp16: descales belong to e4m3 tensors "
            "(dtype=e4m3, or kv_dtype=e4m3 for K and V); pass null");
}

TEST(Fp8Descales, StridesMustBeNonNegativeAndInRange) {
  const Problem p = fp8_problem();
  for (auto [batch, head] : {std::pair<int64_t, int64_t>{-2, 1}, {2, -1},
                             {int64_t(1) << 62, 1}}) {
    ForwardArgs a = fp8_args(p);
    a.descale.batch_stride = batch;
    a.descale.head_stride = head;
    EXPECT_EQ(message(validate_forward_args(p, a)),
              "descale strides (batch " + std::to_string(batch) + ", head " +
                  std::to_string(head) +
                  ") are invalid: expected element strides >= 0 into [batch=2, heads_kv=2] fp32 "
                  "factors below 2^60 (both 0: one factor for the tensor)");
  }
  // One factor per tensor, and a [heads_kv] factor shared by the batch.
  for (auto [batch, head] : {std::pair<int64_t, int64_t>{0, 0}, {0, 1}}) {
    ForwardArgs a = fp8_args(p);
    a.descale.batch_stride = batch;
    a.descale.head_stride = head;
    expect_past_host_checks(validate_forward_args(p, a));
  }
}

TEST(Fp8Descales, DescalesMustBeFloatAligned) {
  const Problem p = fp8_problem();
  ForwardArgs a = fp8_args(p);
  a.descale.k = fake_floats(0x60002);
  EXPECT_EQ(message(validate_forward_args(p, a)),
            "argument k_descale (0x0000000000060002) is not 4-byte aligned");
}

TEST(Fp8Layout, Fp8StridesStepWholeVectorsOfSixteenElements) {
  Problem p = fp8_problem();
  ForwardArgs a = fp8_args(p);
  a.q_strides.head = 136;  // 8 elements would do for a 16-bit Q
  EXPECT_EQ(message(validate_forward_args(p, a)),
            "argument q: head stride 136 is not a multiple of 16 elements: the kernel uses "
            "16-byte vector loads, so every row must start 16-byte aligned");
  a = fp8_args(p);
  a.v_strides.seq = 264;
  EXPECT_EQ(message(validate_forward_args(p, a)),
            "argument v: seq stride 264 is not a multiple of 16 elements: the kernel uses "
            "16-byte vector loads, so every row must start 16-byte aligned");
  // O is bf16: 8 elements are 16 bytes.
  a = fp8_args(p);
  a.o_strides.head = 136;
  expect_past_host_checks(validate_forward_args(p, a));
  p.out_dtype = OutDType::fp16;
  expect_past_host_checks(validate_forward_args(p, a));
}

TEST(Fp8Layout, AnFp8CacheUnderSixteenBitQueries) {
  Problem p = fp8_problem(DType::bf16, KvDType::e4m3);
  ForwardArgs a = fp8_args(p);
  a.q_strides.head = 136;
  a.o_strides.head = 136;
  expect_past_host_checks(validate_forward_args(p, a));
  a.k_strides.head = 136;
  EXPECT_EQ(message(validate_forward_args(p, a)),
            "argument k: head stride 136 is not a multiple of 16 elements: the kernel uses "
            "16-byte vector loads, so every row must start 16-byte aligned");

  // New keys to append come in Q's dtype (quantized into the cache).
  p.seqused_k = true;
  a = fp8_args(p);
  a.cache.cache_seqlens = reinterpret_cast<const int32_t *>(fake(0x80000));
  a.cache.k_new = fake(0x90000);
  a.cache.v_new = fake(0xa0000);
  a.cache.seqlen_new = 1;
  a.cache.k_new_strides = {8 * 2 * 128, 2 * 128, 136};
  a.cache.v_new_strides = {8 * 2 * 128, 2 * 128, 128};
  expect_past_host_checks(validate_forward_args(p, a));
  p.dtype = DType::e4m3;  // and e4m3 ones under e4m3 Q
  a.descale.q = fake_floats(0x50000);
  EXPECT_EQ(message(validate_forward_args(p, a)),
            "argument k_new: head stride 136 is not a multiple of 16 elements: the kernel uses "
            "16-byte vector loads, so every row must start 16-byte aligned");
}

TEST(Fp8Forward, OutDtypeIsRefusedBeforeTheDriver) {
  Problem p = fp8_problem(DType::fp16);
  p.out_dtype = OutDType::bf16;
  const Status status = forward(p, fp8_args(p));
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("): out_dtype=bf16 with dtype=fp16: a 16-bit problem's output "
                                  "has its dtype; leave out_dtype auto"),
            std::string::npos)
      << status.message();
}

constexpr const char *kNoFp8Backward =
    "the fp8 backward is not supported (FlashAttention-3 has none either); run the backward in "
    "bf16 or fp16";

TEST(Fp8Backward, IsRefusedByName) {
  EXPECT_EQ(message(refuse_fp8_backward(fp8_problem())), kNoFp8Backward);
  EXPECT_EQ(message(refuse_fp8_backward(fp8_problem(DType::bf16, KvDType::e4m3))),
            kNoFp8Backward);
  EXPECT_EQ(message(refuse_fp8_backward(fp8_problem(DType::fp16))), "success");
  for (const Problem &p : {fp8_problem(), fp8_problem(DType::fp16, KvDType::e4m3)}) {
    const Status status = backward(p, BackwardArgs{});
    ASSERT_FALSE(status.ok());
    EXPECT_NE(status.message().find(std::string("): ") + kNoFp8Backward), std::string::npos)
        << status.message();
  }
}

TEST(Fp8CApi, BackwardRefusesE4m3) {
  flashjit_backward_args args{};
  for (auto [dtype, kv] : {std::pair{FLASHJIT_E4M3, FLASHJIT_KV_SAME},
                           {FLASHJIT_BF16, FLASHJIT_KV_E4M3}}) {
    flashjit_problem p = testing_c_api::c_problem(dtype, FLASHJIT_MASK_NONE);
    p.kv_dtype = kv;
    EXPECT_NE(flashjit_backward(&p, &args, nullptr, nullptr), 0);
    EXPECT_NE(std::string(flashjit_last_error()).find(kNoFp8Backward), std::string::npos)
        << flashjit_last_error();
  }
}

// Every forward entry point hands the descales to the library: a q_descale
// under a bf16 problem comes back refused from each.
TEST(Fp8CApi, EveryForwardEntryPointPassesTheDescales) {
  const std::string refused = "argument q_descale: given, but Q is bf16";
  flashjit_forward_args args{};
  args.q_descale = fake_floats(0x50000);
  flashjit_kvcache_args cache{};
  flashjit_varlen_args varlen{};
  varlen.cu_seqlens_q = static_cast<const int32_t *>(fake(0x80000));
  varlen.cu_seqlens_k = static_cast<const int32_t *>(fake(0x90000));
  varlen.total_q = varlen.total_k = 17;
  const flashjit_problem dense = testing_c_api::c_problem(FLASHJIT_BF16, FLASHJIT_MASK_NONE);
  flashjit_problem packed = dense;
  packed.varlen = 1;
  flashjit_modifiers mods{};
  mods.score_mod = "score = score * 0.5f;";
  auto refused_by = [&](int code, const char *name) {
    EXPECT_NE(code, 0) << name;
    EXPECT_NE(std::string(flashjit_last_error()).find(refused), std::string::npos)
        << name << ": " << flashjit_last_error();
  };
  refused_by(flashjit_forward(&dense, &args, nullptr, nullptr), "flashjit_forward");
  refused_by(flashjit_forward_modified(&dense, &args, &mods, nullptr, nullptr),
                  "flashjit_forward_modified");
  refused_by(flashjit_forward_kvcache(&dense, &args, &cache, nullptr, nullptr),
                  "flashjit_forward_kvcache");
  refused_by(flashjit_forward_varlen(&packed, &args, &varlen, nullptr, nullptr),
                  "flashjit_forward_varlen");
  refused_by(
      flashjit_forward_varlen_kvcache(&packed, &args, &varlen, &cache, nullptr, nullptr),
      "flashjit_forward_varlen_kvcache");

  // The strides arrive too.
  flashjit_problem fp8_cache = dense;
  fp8_cache.kv_dtype = FLASHJIT_KV_E4M3;
  args.q_descale = nullptr;
  args.k_descale = args.v_descale = fake_floats(0x60000);
  args.descale_stride_batch = -3;
  EXPECT_NE(flashjit_forward(&fp8_cache, &args, nullptr, nullptr), 0);
  EXPECT_NE(std::string(flashjit_last_error()).find("descale strides (batch -3, head 0)"),
            std::string::npos)
      << flashjit_last_error();
}

}  // namespace
}  // namespace flashjit
