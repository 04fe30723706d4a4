// Shared by the GPU tests: why there is no GPU to test on (skip with that
// reason), problems from their sizes, and random 16-bit tensors on the device.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "reference/cpu_attention.h"
#include "reference/cpu_attention_backward.h"
#include "runtime/cuda_driver.h"
#include "runtime/device.h"
#include "runtime/device_buffer.h"

namespace flashjit::testing {

// Empty when a GPU is usable (and the current context is set); else why not.
inline std::string gpu_skip_reason() {
  auto driver = cuda_driver();
  if (!driver) return "no CUDA driver: " + llvm::toString(driver.takeError());
  auto count = device_count();
  if (!count) return "no CUDA device: " + llvm::toString(count.takeError());
  if (*count == 0) return "no CUDA device";
  auto context = current_or_primary_context();
  if (!context) return "no CUDA context: " + llvm::toString(context.takeError());
  return "";
}

#define FLASHJIT_REQUIRE_GPU()                                               \
  do {                                                                       \
    std::string reason_ = ::flashjit::testing::gpu_skip_reason();            \
    if (!reason_.empty()) GTEST_SKIP() << reason_;                           \
  } while (0)

// Empty when device 0 is an sm_90a part (the sm90 kernels' target); else
// why the sm90 tests skip.
inline std::string sm90_skip_reason() {
  std::string reason = gpu_skip_reason();
  if (!reason.empty()) return reason;
  auto device = query_device(0);
  if (!device) return llvm::toString(device.takeError());
  const TargetArch arch = device->target();
  if (!(arch.sm() == 90 && arch.arch_specific))
    return "the sm90 kernels need an sm_90a device, this is " + arch.name();
  return "";
}

#define FLASHJIT_REQUIRE_SM90()                                              \
  do {                                                                       \
    std::string reason_ = ::flashjit::testing::sm90_skip_reason();           \
    if (!reason_.empty()) GTEST_SKIP() << reason_;                           \
  } while (0)

#define FLASHJIT_ASSERT_OK(expr)                                             \
  do {                                                                       \
    if (llvm::Error err_ = (expr)) FAIL() << llvm::toString(std::move(err_)); \
  } while (0)

// Normal(0, 1) values rounded to a dtype (reference/cpu_attention.h).
using flashjit::random_values;

// A problem from its sizes (window bounds and softcap only where they apply).
inline Problem make_problem(DType dtype, int64_t b, int64_t hq, int64_t hkv, int64_t sq,
                            int64_t sk, int d, int dv, MaskKind mask, int64_t left = -1,
                            int64_t right = -1, float softcap = 0.f) {
  Problem p;
  p.dtype = dtype;
  p.batch = b;
  p.heads_q = hq;
  p.heads_kv = hkv;
  p.seqlen_q = sq;
  p.seqlen_k = sk;
  p.head_dim_qk = d;
  p.head_dim_v = dv;
  p.mask = mask;
  p.window_left = left;
  p.window_right = right;
  p.softcap = softcap;
  return p;
}

// Chunked attention (Problem::attention_chunk) over each built-in mask:
// chunks shorter and longer than a tile and not a multiple of it, lengths on
// both sides of each other (negative row positions), GQA, d 64 and 128.
inline std::vector<Problem> chunked_problems() {
  std::vector<Problem> problems;
  const std::pair<int64_t, int64_t> lengths[] = {{300, 300}, {113, 517}, {517, 113}};
  int i = 0;
  for (int chunk : {48, 200})
    for (MaskKind mask : {MaskKind::none, MaskKind::causal, MaskKind::window})
      for (auto [sq, sk] : lengths) {
        const int d = i % 3 ? 128 : 64;
        Problem p = make_problem(i % 2 ? DType::fp16 : DType::bf16, 2, 4, 2, sq, sk, d, d, mask,
                                 70, 9);
        p.attention_chunk = chunk;
        problems.push_back(p);
        ++i;
      }
  return problems;
}

// 16-bit elements, as stored, into a new device buffer.
inline llvm::Expected<DeviceBuffer> upload_bits(const std::vector<uint16_t> &bits) {
  auto buffer = DeviceBuffer::allocate(bits.size() * sizeof(uint16_t));
  if (!buffer) return buffer.takeError();
  if (auto e = buffer->upload(bits.data(), bits.size() * sizeof(uint16_t))) return e;
  return std::move(*buffer);
}

// Int32 values (offsets, key counts, page tables) into a new device buffer
// (DeviceBuffer::from_host: an empty list still has an address).
inline llvm::Expected<DeviceBuffer> upload_ints(const std::vector<int32_t> &values) {
  return DeviceBuffer::from_host(values.data(), values.size() * sizeof(int32_t));
}

inline llvm::Expected<DeviceBuffer> upload_values(DType dtype, const std::vector<float> &values) {
  return upload_bits(to_storage(dtype, values));
}

// The first `n` 16-bit elements of `buffer`, as floats.
inline llvm::Expected<std::vector<float>> download_values(DType dtype, const DeviceBuffer &buffer,
                                                          size_t n) {
  std::vector<uint16_t> bits(n);
  if (auto e = buffer.download(bits.data(), n * sizeof(uint16_t))) return e;
  return from_storage(dtype, bits);
}

// A backward's dq, dk and dv of `p` (16-bit, packed as the problem's
// tensors), as floats; dsinks left empty.
inline llvm::Expected<AttentionGradients> download_gradients(const Problem &p,
                                                             const DeviceBuffer &dq,
                                                             const DeviceBuffer &dk,
                                                             const DeviceBuffer &dv) {
  AttentionGradients g;
  auto gq = download_values(p.dtype, dq, q_elements(p));
  if (!gq) return gq.takeError();
  auto gk = download_values(p.dtype, dk, k_elements(p));
  if (!gk) return gk.takeError();
  auto gv = download_values(p.dtype, dv, v_elements(p));
  if (!gv) return gv.takeError();
  g.dq = std::move(*gq);
  g.dk = std::move(*gk);
  g.dv = std::move(*gv);
  return g;
}

}  // namespace flashjit::testing
