// The host inputs of one forward call in the element types its problem
// names: e4m3 tensors as codes quantized per (batch, KV head) with their
// descales (reference/fp8.h), 16-bit ones as their storage; each with the
// float values the references read (de-quantized, or the 16-bit values), so
// that a reference and the kernel see the very same inputs. What `run`
// uploads for an fp8 problem and what the tuner checks an fp8 winner on.
#pragma once

#include <cstdint>
#include <vector>

#include "flashjit/forward.h"
#include "flashjit/problem.h"
#include "reference/fp8.h"
#include "runtime/device_buffer.h"
#include "llvm/Support/Error.h"

namespace flashjit {

struct ForwardHostInput {
  DType element = DType::bf16;
  std::vector<uint8_t> bytes;  // the tensor as the kernel reads it
  std::vector<float> descale;  // [batch, heads_kv] (strides heads_kv, 1); empty if 16-bit
  std::vector<float> values;   // what the reference computes with
};

struct ForwardHostInputs {
  ForwardHostInput q, k, v;
};

// Standard-normal values of a dense [batch, seqlen, heads, dim] tensor of
// `role` (Q in the problem's dtype, K and V in kv_element), quantized per
// (batch, KV head) where that element is e4m3.
ForwardHostInput make_forward_input(const Problem &problem, Fp8Role role, uint64_t seed);
// Q, K and V from seeds 3 seed, 3 seed + 1 and 3 seed + 2.
ForwardHostInputs make_forward_inputs(const Problem &problem, uint64_t seed);

// Their device copies: Q, K, V and the descales of the e4m3 ones.
struct ForwardDeviceInputs {
  DeviceBuffer q, k, v, q_descale, k_descale, v_descale;
  // ForwardArgs::descale over these buffers (null for a 16-bit tensor).
  Fp8Descales descale(const Problem &problem) const;
};
llvm::Expected<ForwardDeviceInputs> upload_forward_inputs(const ForwardHostInputs &inputs);

}  // namespace flashjit
