// Runs one forward case against the reference with the accuracy criterion (reference/accuracy.h):
// max error <= 2 x that of the same reference in the kernel's precision +
// 1e-5. Inputs are random, tensors are strided views with NaN in every gap (a
// read outside the view poisons the result), outputs are poisoned before the
// run and the gaps of O must come back untouched. Shared by the forward
// correctness suites (dense, decode).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "gpu_environment.h"
#include "reference/accuracy.h"
#include "reference/gpu_reference.h"
#include "runtime/device.h"
#include "runtime/launch_forward.h"

namespace flashjit {
namespace testing {


inline constexpr uint16_t kNaNBits = 0x7fff;     // NaN in bf16 and fp16
inline constexpr uint16_t kCanaryBits = 0x7e7e;  // a NaN the kernel never writes

// A [batch, seq, heads, dim] view inside a larger buffer: `extra` elements of
// padding after each head, row and batch.
struct StridedLayout {
  int64_t batch, seq, heads, dim;
  TensorStrides strides;
  size_t storage_elements;

  static StridedLayout make(int64_t b, int64_t s, int64_t h, int64_t d, bool strided) {
    StridedLayout l{b, s, h, d, {}, 0};
    const int64_t pad = strided ? 8 : 0;  // strides stay multiples of 8 elements
    l.strides.head = d + pad;
    l.strides.seq = h * l.strides.head + pad;
    l.strides.batch = s * l.strides.seq + pad;
    l.storage_elements = static_cast<size_t>(b * l.strides.batch);
    return l;
  }
  size_t offset(int64_t b, int64_t s, int64_t h, int64_t d) const {
    return static_cast<size_t>(b * strides.batch + s * strides.seq + h * strides.head + d);
  }
  std::vector<uint16_t> scatter(DType dtype, const std::vector<float> &packed,
                                uint16_t gap) const {
    std::vector<uint16_t> out(storage_elements, gap);
    size_t i = 0;
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t s = 0; s < seq; ++s)
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t d = 0; d < dim; ++d) out[offset(b, s, h, d)] = float_to_bits(dtype, packed[i++]);
    return out;
  }
  // The view's elements, packed, and whether every gap still holds `gap`.
  std::vector<float> gather(DType dtype, const std::vector<uint16_t> &storage, uint16_t gap,
                            bool *gaps_intact) const {
    std::vector<float> packed;
    std::vector<bool> in_view(storage.size(), false);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t s = 0; s < seq; ++s)
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t d = 0; d < dim; ++d) {
            size_t o = offset(b, s, h, d);
            in_view[o] = true;
            packed.push_back(bits_to_float(dtype, storage[o]));
          }
    *gaps_intact = true;
    for (size_t o = 0; o < storage.size(); ++o)
      if (!in_view[o] && storage[o] != gap) *gaps_intact = false;
    return packed;
  }
};

struct Case {
  Problem problem;
  KernelConfig config{};  // zeros: the heuristic
  bool strided = false;
  std::string name() const {
    std::string s = describe(problem);
    if (config.block_m) s += " | " + describe(config);
    if (strided) s += " | strided";
    return s;
  }
};

inline void run_case(const Case &c, uint64_t seed) {
  SCOPED_TRACE(c.name());
  const Problem &p = c.problem;
  auto q_layout = StridedLayout::make(p.batch, p.seqlen_q, p.heads_q, p.head_dim_qk, c.strided);
  auto k_layout = StridedLayout::make(p.batch, p.seqlen_k, p.heads_kv, p.head_dim_qk, c.strided);
  auto v_layout = StridedLayout::make(p.batch, p.seqlen_k, p.heads_kv, p.head_dim_v, c.strided);
  auto o_layout = StridedLayout::make(p.batch, p.seqlen_q, p.heads_q, p.head_dim_v, c.strided);
  std::vector<float> q = random_values(p.dtype, q_elements(p), seed);
  std::vector<float> k = random_values(p.dtype, k_elements(p), seed + 1);
  std::vector<float> v = random_values(p.dtype, v_elements(p), seed + 2);

  auto dq = upload_bits(q_layout.scatter(p.dtype, q, kNaNBits));
  auto dk = upload_bits(k_layout.scatter(p.dtype, k, kNaNBits));
  auto dv = upload_bits(v_layout.scatter(p.dtype, v, kNaNBits));
  auto dout = DeviceBuffer::allocate(o_layout.storage_elements * 2);
  auto dlse = DeviceBuffer::allocate(lse_elements(p) * 4);
  FLASHJIT_ASSERT_OK(dq.takeError());
  FLASHJIT_ASSERT_OK(dk.takeError());
  FLASHJIT_ASSERT_OK(dv.takeError());
  FLASHJIT_ASSERT_OK(dout.takeError());
  FLASHJIT_ASSERT_OK(dlse.takeError());
  // O: NaN where the kernel must write, a canary in the gaps it must not.
  FLASHJIT_ASSERT_OK(
      dout->upload(o_layout.scatter(p.dtype, std::vector<float>(o_elements(p), NAN), kCanaryBits)
                       .data(),
                   o_layout.storage_elements * 2));
  FLASHJIT_ASSERT_OK(dlse->fill_bytes(0xff));

  ForwardArgs args;
  args.q = dq->data();
  args.k = dk->data();
  args.v = dv->data();
  args.o = dout->data();
  args.lse = static_cast<float *>(dlse->data());
  args.q_strides = q_layout.strides;
  args.k_strides = k_layout.strides;
  args.v_strides = v_layout.strides;
  args.o_strides = o_layout.strides;
  FLASHJIT_ASSERT_OK(launch_forward(p, args, nullptr, c.config));

  std::vector<uint16_t> o_storage(o_layout.storage_elements);
  std::vector<float> lse(lse_elements(p));
  FLASHJIT_ASSERT_OK(dout->download(o_storage.data(), o_storage.size() * 2));
  FLASHJIT_ASSERT_OK(dlse->download(lse.data(), lse.size() * 4));
  bool gaps_intact = false;
  std::vector<float> out = o_layout.gather(p.dtype, o_storage, kCanaryBits, &gaps_intact);
  EXPECT_TRUE(gaps_intact) << "the kernel wrote outside the output view";

  // Small problems: float64 on the CPU; large ones: fp32 on the GPU.
  const double work = double(p.batch) * p.heads_q * p.seqlen_q * p.seqlen_k * p.head_dim_qk;
  AttentionOutputs exact, element;
  if (work <= 2e8) {
    exact = cpu_attention(p, q, k, v, ReferencePrecision::exact);
    element = cpu_attention(p, q, k, v, ReferencePrecision::element);
  } else {
    auto e1 = gpu_reference_attention(p, args, ReferencePrecision::exact);
    auto e2 = gpu_reference_attention(p, args, ReferencePrecision::element);
    FLASHJIT_ASSERT_OK(e1.takeError());
    FLASHJIT_ASSERT_OK(e2.takeError());
    exact = std::move(*e1);
    element = std::move(*e2);
  }
  AccuracyReport report = check_forward_accuracy(out, exact.out, element.out, lse, exact.lse);
  EXPECT_TRUE(report.passed) << report.describe();
}

}  // namespace testing
}  // namespace flashjit
