#include "cli/run_fp8.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "cli/run_report.h"
#include "reference/accuracy.h"
#include "reference/cpu_attention.h"
#include "reference/fp8.h"
#include "reference/gpu_reference.h"
#include "runtime/device_buffer.h"
#include "runtime/launch_forward.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

namespace flashjit::cli {

namespace {

// One input tensor as the call takes it: e4m3 codes and their descales, or
// 16-bit storage; and the values the reference reads.
struct HostInput {
  std::vector<uint8_t> bytes;
  std::vector<float> descale;  // empty for a 16-bit tensor
  std::vector<float> values;   // de-quantized (or the 16-bit values)
};

HostInput make_input(const Problem &p, Fp8Role role, DType element, size_t n, int64_t rows,
                     uint64_t seed) {
  HostInput in;
  std::vector<float> normal = random_values(DType::bf16, n, seed);
  if (element == DType::e4m3) {
    Fp8Tensor t = quantize_per_head(p, role, normal, rows);
    in.bytes = std::move(t.codes);
    in.descale = std::move(t.descale);
    in.values = std::move(t.dequantized);
    return in;
  }
  const std::vector<uint16_t> bits = to_storage(element, normal);
  in.bytes.resize(bits.size() * 2);
  std::memcpy(in.bytes.data(), bits.data(), in.bytes.size());
  in.values = from_storage(element, bits);
  return in;
}

llvm::Expected<DeviceBuffer> upload(const void *host, size_t bytes) {
  auto buffer = DeviceBuffer::allocate(std::max<size_t>(bytes, 1));
  if (!buffer) return buffer.takeError();
  if (bytes)
    if (auto error = buffer->upload(host, bytes)) return error;
  return std::move(*buffer);
}

}  // namespace

int run_fp8(const RunCommand &command, const CommonOptions &common, const ResolvedKernel &kernel,
            const DeviceInfo &device) {
  const Problem &p = kernel.problem;
  const KernelSpec &spec = kernel.spec;
  if (p.varlen || p.seqused_k || p.page_size > 0)
    return report_error(kExitUsage,
                        "run: fp8 inputs (--dtype e4m3, --kv-dtype e4m3) are drawn for a dense "
                        "batch; drop --varlen, --cache-seqlens and --page-size (the tests cover "
                        "those layouts)");
  const uint64_t seed = command.seed;
  const DType kv = kv_element(p);
  const HostInput q = make_input(p, Fp8Role::q, p.dtype, q_elements(p), p.seqlen_q, seed * 3);
  const HostInput k = make_input(p, Fp8Role::k, kv, k_elements(p), p.seqlen_k, seed * 3 + 1);
  const HostInput v = make_input(p, Fp8Role::v, kv, v_elements(p), p.seqlen_k, seed * 3 + 2);

  std::vector<DeviceBuffer> buffers;
  auto device_copy = [&](const void *host, size_t bytes) -> llvm::Expected<void *> {
    auto buffer = upload(host, bytes);
    if (!buffer) return buffer.takeError();
    buffers.push_back(std::move(*buffer));
    return buffers.back().data();
  };
  const void *tensors[3] = {};
  const float *descales[3] = {};
  const HostInput *inputs[3] = {&q, &k, &v};
  for (int i = 0; i < 3; ++i) {
    auto data = device_copy(inputs[i]->bytes.data(), inputs[i]->bytes.size());
    if (!data) return report_error(kExitFailure, data.takeError());
    tensors[i] = *data;
    if (inputs[i]->descale.empty()) continue;
    auto factors = device_copy(inputs[i]->descale.data(), inputs[i]->descale.size() * 4);
    if (!factors) return report_error(kExitFailure, factors.takeError());
    descales[i] = static_cast<const float *>(*factors);
  }
  const size_t o_bytes = o_elements(p) * size_t(element_bytes(out_element(p)));
  auto o = DeviceBuffer::allocate(std::max<size_t>(o_bytes, 1));
  auto lse = DeviceBuffer::allocate(std::max<size_t>(lse_elements(p), 1) * sizeof(float));
  if (!o) return report_error(kExitFailure, o.takeError());
  if (!lse) return report_error(kExitFailure, lse.takeError());
  // NaN everywhere, so an element the kernel never writes cannot pass.
  if (auto error = o->fill_bytes(0xFF)) return report_error(kExitFailure, std::move(error));
  if (auto error = lse->fill_bytes(0xFF)) return report_error(kExitFailure, std::move(error));
  ForwardArgs args = ForwardArgs::packed(p, tensors[0], tensors[1], tensors[2], o->data(),
                                         static_cast<float *>(lse->data()));
  args.descale = {descales[0], descales[1], descales[2], p.heads_kv, 1};

  if (auto error = launch_forward(p, args, nullptr, spec.config))
    return report_error(kExitFailure, std::move(error));
  if (auto error = synchronize()) return report_error(kExitFailure, std::move(error));
  std::optional<AccuracyReport> accuracy;
  if (command.check) {
    std::vector<uint16_t> o_bits(o_elements(p));
    std::vector<float> lse_host(lse_elements(p));
    if (auto error = o->download(o_bits.data(), o_bits.size() * 2))
      return report_error(kExitFailure, std::move(error));
    if (auto error = lse->download(lse_host.data(), lse_host.size() * 4))
      return report_error(kExitFailure, std::move(error));
    // The reference reads the same e4m3 bytes times the same descales: the
    // de-quantized inputs.
    auto exact = gpu_reference_attention(p, args, ReferencePrecision::exact);
    if (!exact) return report_error(kExitFailure, exact.takeError());
    double v_max_abs = 0;
    for (float x : v.values) v_max_abs = std::max(v_max_abs, double(std::fabs(x)));
    accuracy = check_fp8_forward_accuracy(from_storage(out_element(p), o_bits), exact->out,
                                          v_max_abs, lse_host, exact->lse);
  }
  auto timing = time_on_stream(nullptr, command.warmup, command.repeats,
                               [&] { return launch_forward(p, args, nullptr, spec.config); });
  if (!timing) return report_error(kExitFailure, timing.takeError());
  const double tflops = p.forward_flops() / (timing->median_ms * 1e-3) / 1e12;
  const double kv_bytes = double(k_elements(p) + v_elements(p)) * element_bytes(kv);
  const double gbps = kv_bytes / (timing->median_ms * 1e-3) / 1e9;
  if (common.json) {
    llvm::json::Object out = run_json(spec, device, p, *timing, command.repeats, 1);
    out["tflops"] = tflops;
    out["gbps"] = gbps;
    if (accuracy) out["check"] = accuracy_json(*accuracy);
    print_json(std::move(out));
  } else {
    llvm::raw_ostream &os = llvm::outs();
    print_run_head(os, spec, device, p);
    os << llvm::formatv("config   {0}\n", describe(spec.config));
    os << llvm::formatv("inputs   e4m3 per (batch, KV head), descale = amax / 448\n");
    if (accuracy) os << llvm::formatv("check    {0}\n", accuracy->describe());
    print_run_time(os, *timing, command.repeats, 1);
    os << llvm::formatv("perf     {0:f1} TFLOP/s, {1:f1} GB/s (K and V read once)\n", tflops,
                        gbps);
  }
  return accuracy && !accuracy->passed ? kExitFailure : kExitOk;
}

}  // namespace flashjit::cli
