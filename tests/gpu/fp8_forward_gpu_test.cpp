// The e4m3 forward on the GPU (sm90): small irregular dense shapes against
// the exact GPU reference of the de-quantized inputs under the fp8
// criterion (reference/accuracy.h, reference/fp8_check.h), outputs
// poisoned with NaN first. Also compute-sanitizer's fp8 family
// (scripts/device-sanitize.sh: --gtest_filter='Fp8Forward*').
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "gpu_environment.h"
#include "reference/cpu_attention.h"
#include "reference/forward_inputs.h"
#include "reference/fp8_check.h"
#include "runtime/launch_forward.h"

namespace flashjit {
namespace {

struct Fp8Case {
  std::string name;
  Problem problem;
  KernelConfig config;  // path sm90, tiles from the heuristic
};

Problem fp8_problem(int64_t b, int64_t hq, int64_t hkv, int64_t sq, int64_t sk, int d, int dv,
                    MaskKind mask) {
  return testing::make_problem(DType::e4m3, b, hq, hkv, sq, sk, d, dv, mask);
}

std::vector<Fp8Case> fp8_cases() {
  std::vector<Fp8Case> cases;
  KernelConfig sm90;
  sm90.path = KernelPath::sm90;
  // Head dims 64 (tiled as 128), 128, 192/128 and 256; key lengths off
  // every tile; causal and not; GQA.
  cases.push_back({"d64 full", fp8_problem(2, 4, 4, 301, 405, 64, 64, MaskKind::none), sm90});
  cases.push_back(
      {"d128 causal gqa", fp8_problem(2, 8, 2, 201, 259, 128, 128, MaskKind::causal), sm90});
  cases.push_back(
      {"d192/128 causal", fp8_problem(1, 4, 4, 150, 200, 192, 128, MaskKind::causal), sm90});
  cases.push_back({"d256 full", fp8_problem(1, 4, 2, 97, 150, 256, 256, MaskKind::none), sm90});
  Problem window = fp8_problem(2, 4, 4, 333, 333, 128, 128, MaskKind::window);
  window.window_left = 64;
  window.window_right = 16;
  window.softcap = 30.f;
  window.out_dtype = OutDType::fp16;
  cases.push_back({"d128 window softcap fp16 out", window, sm90});
  // Decode with splits and packed heads.
  KernelConfig split = sm90;
  split.splits = 3;
  split.pack_gqa = GqaPacking::on;
  cases.push_back(
      {"decode split packed", fp8_problem(2, 16, 2, 1, 1000, 128, 128, MaskKind::none), split});
  // A query longer than the keys, every row of the first tile masked.
  cases.push_back(
      {"sq > sk causal", fp8_problem(1, 2, 2, 300, 77, 128, 128, MaskKind::causal), sm90});
  return cases;
}

TEST(Fp8Forward, MatchesTheReferenceOfTheDequantizedInputs) {
  FLASHJIT_REQUIRE_SM90();
  uint64_t seed = 1;
  for (const Fp8Case &c : fp8_cases()) {
    SCOPED_TRACE(c.name);
    const Problem &p = c.problem;
    const ForwardHostInputs in = make_forward_inputs(p, seed++);
    auto device_in = upload_forward_inputs(in);
    ASSERT_TRUE(static_cast<bool>(device_in)) << llvm::toString(device_in.takeError());
    auto o = DeviceBuffer::allocate(o_elements(p) * size_t(element_bytes(out_element(p))));
    auto lse = DeviceBuffer::allocate(lse_elements(p) * sizeof(float));
    ASSERT_TRUE(o && lse);
    FLASHJIT_ASSERT_OK(o->fill_bytes(0xFF));  // NaN: an unwritten element cannot pass
    FLASHJIT_ASSERT_OK(lse->fill_bytes(0xFF));
    ForwardArgs args =
        ForwardArgs::packed(p, device_in->q.data(), device_in->k.data(), device_in->v.data(),
                            o->data(), static_cast<float *>(lse->data()));
    args.descale = device_in->descale(p);
    FLASHJIT_ASSERT_OK(launch_forward(p, args, nullptr, c.config));
    ASSERT_EQ(cuda_driver()->cuCtxSynchronize(), CUDA_SUCCESS);
    auto report = check_fp8_forward_outputs(p, args, in, *o, *lse);
    ASSERT_TRUE(static_cast<bool>(report)) << llvm::toString(report.takeError());
    EXPECT_TRUE(report->passed) << report->describe();
    std::printf("fp8 %-28s %s\n", c.name.c_str(), report->describe().c_str());
  }
}

// A descale of zero for Q (every score 0: uniform weights) is served, not a
// NaN: P's 2^8 comes out of O and the sum, not the max.
TEST(Fp8Forward, ZeroDescaleGivesUniformWeights) {
  FLASHJIT_REQUIRE_SM90();
  const Problem p = fp8_problem(1, 2, 2, 64, 200, 128, 128, MaskKind::none);
  ForwardHostInputs in = make_forward_inputs(p, 99);
  std::fill(in.q.descale.begin(), in.q.descale.end(), 0.f);
  std::fill(in.q.values.begin(), in.q.values.end(), 0.f);  // what the reference sees
  auto device_in = upload_forward_inputs(in);
  ASSERT_TRUE(static_cast<bool>(device_in)) << llvm::toString(device_in.takeError());
  auto o = DeviceBuffer::allocate(o_elements(p) * size_t(element_bytes(out_element(p))));
  auto lse = DeviceBuffer::allocate(lse_elements(p) * sizeof(float));
  ASSERT_TRUE(o && lse);
  FLASHJIT_ASSERT_OK(o->fill_bytes(0xFF));
  FLASHJIT_ASSERT_OK(lse->fill_bytes(0xFF));
  ForwardArgs args =
      ForwardArgs::packed(p, device_in->q.data(), device_in->k.data(), device_in->v.data(),
                          o->data(), static_cast<float *>(lse->data()));
  args.descale = device_in->descale(p);
  KernelConfig sm90;
  sm90.path = KernelPath::sm90;
  FLASHJIT_ASSERT_OK(launch_forward(p, args, nullptr, sm90));
  ASSERT_EQ(cuda_driver()->cuCtxSynchronize(), CUDA_SUCCESS);
  auto report = check_fp8_forward_outputs(p, args, in, *o, *lse);
  ASSERT_TRUE(static_cast<bool>(report)) << llvm::toString(report.takeError());
  EXPECT_TRUE(report->passed) << report->describe();
}

}  // namespace
}  // namespace flashjit
