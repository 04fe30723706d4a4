#include "reference/forward_inputs.h"

#include <cstring>

#include "reference/cpu_attention.h"

namespace flashjit {

ForwardHostInput make_forward_input(const Problem &p, Fp8Role role, uint64_t seed) {
  ForwardHostInput in;
  in.element = role == Fp8Role::q ? p.dtype : kv_element(p);
  const size_t n = role == Fp8Role::q ? q_elements(p) : role == Fp8Role::k ? k_elements(p)
                                                                              : v_elements(p);
  const int64_t rows = role == Fp8Role::q ? p.seqlen_q : p.seqlen_k;
  // Values representable in bf16 either way, so that a 16-bit tensor and
  // an e4m3 one of the same seed start from the same numbers.
  std::vector<float> normal = random_values(DType::bf16, n, seed);
  if (in.element == DType::e4m3) {
    Fp8Tensor t = quantize_per_head(p, role, normal, rows);
    in.bytes = std::move(t.codes);
    in.descale = std::move(t.descale);
    in.values = std::move(t.dequantized);
    return in;
  }
  const std::vector<uint16_t> bits = to_storage(in.element, normal);
  in.bytes.resize(bits.size() * sizeof(uint16_t));
  std::memcpy(in.bytes.data(), bits.data(), in.bytes.size());
  in.values = from_storage(in.element, bits);
  return in;
}

ForwardHostInputs make_forward_inputs(const Problem &p, uint64_t seed) {
  return {make_forward_input(p, Fp8Role::q, seed * 3),
          make_forward_input(p, Fp8Role::k, seed * 3 + 1),
          make_forward_input(p, Fp8Role::v, seed * 3 + 2)};
}

namespace {

// An empty host array leaves the buffer empty (a null pointer).
llvm::Error upload_into(DeviceBuffer &buffer, const void *host, size_t bytes) {
  if (bytes == 0) return llvm::Error::success();
  auto copy = DeviceBuffer::allocate(bytes);
  if (!copy) return copy.takeError();
  if (auto error = copy->upload(host, bytes)) return error;
  buffer = std::move(*copy);
  return llvm::Error::success();
}

}  // namespace

Fp8Descales ForwardDeviceInputs::descale(const Problem &p) const {
  return {static_cast<const float *>(q_descale.data()),
          static_cast<const float *>(k_descale.data()),
          static_cast<const float *>(v_descale.data()), p.heads_kv, 1};
}

llvm::Expected<ForwardDeviceInputs> upload_forward_inputs(const ForwardHostInputs &in) {
  ForwardDeviceInputs out;
  const std::pair<const ForwardHostInput *, DeviceBuffer *> tensors[] = {
      {&in.q, &out.q}, {&in.k, &out.k}, {&in.v, &out.v}};
  DeviceBuffer *descales[] = {&out.q_descale, &out.k_descale, &out.v_descale};
  for (int i = 0; i < 3; ++i) {
    const ForwardHostInput &t = *tensors[i].first;
    if (auto error = upload_into(*tensors[i].second, t.bytes.data(), t.bytes.size()))
      return error;
    if (auto error = upload_into(*descales[i], t.descale.data(), t.descale.size() * 4))
      return error;
  }
  return out;
}

}  // namespace flashjit
