#include "cli/run_varlen.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>

#include "cli/random_inputs.h"
#include "cli/run_report.h"
#include "reference/accuracy.h"
#include "reference/gpu_reference.h"
#include "runtime/cuda_driver.h"
#include "runtime/device_buffer.h"
#include "runtime/launch_forward.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

namespace flashjit::cli {

namespace {

struct PackedInputs {
  DeviceBuffer q, k, v, o, lse, cu_q, cu_k;
  ForwardArgs args;
};

std::vector<int32_t> offsets(const std::vector<int64_t> &lengths) {
  std::vector<int32_t> cu{0};
  for (int64_t n : lengths) cu.push_back(cu.back() + static_cast<int32_t>(n));
  return cu;
}

llvm::Expected<DeviceBuffer> upload(const void *host, size_t bytes) {
  auto buffer = DeviceBuffer::allocate(std::max<size_t>(bytes, 16));
  if (!buffer) return buffer.takeError();
  if (bytes > 0)
    if (auto error = buffer->upload(host, bytes)) return error;
  return std::move(*buffer);
}

llvm::Expected<PackedInputs> make_packed_inputs(const Problem &p, const PackedLengths &lengths,
                                                llvm::ArrayRef<uint16_t> q,
                                                llvm::ArrayRef<uint16_t> k,
                                                llvm::ArrayRef<uint16_t> v) {
  PackedInputs in;
  const std::vector<int32_t> cu_q = offsets(lengths.q), cu_k = offsets(lengths.k);
  const int64_t total_q = cu_q.back(), total_k = cu_k.back();
  struct Upload {
    DeviceBuffer *buffer;
    const void *host;
    size_t bytes;
  };
  for (const Upload &u : {Upload{&in.q, q.data(), q.size() * 2}, Upload{&in.k, k.data(), k.size() * 2},
                          Upload{&in.v, v.data(), v.size() * 2},
                          Upload{&in.cu_q, cu_q.data(), cu_q.size() * 4},
                          Upload{&in.cu_k, cu_k.data(), cu_k.size() * 4}}) {
    auto buffer = upload(u.host, u.bytes);
    if (!buffer) return buffer.takeError();
    *u.buffer = std::move(*buffer);
  }
  auto o = DeviceBuffer::allocate(size_t(total_q) * p.heads_q * p.head_dim_v * 2);
  if (!o) return o.takeError();
  in.o = std::move(*o);
  auto lse = DeviceBuffer::allocate(size_t(total_q) * p.heads_q * 4);
  if (!lse) return lse.takeError();
  in.lse = std::move(*lse);
  // NaN everywhere, so an element the kernel never writes cannot pass.
  if (auto error = in.o.fill_bytes(0xFF)) return error;
  if (auto error = in.lse.fill_bytes(0xFF)) return error;
  ForwardArgs &a = in.args;
  a.q = in.q.data();
  a.k = in.k.data();
  a.v = in.v.data();
  a.o = in.o.data();
  a.lse = static_cast<float *>(in.lse.data());
  // Rows of every sequence in one [total, heads, dim] tensor: no batch stride.
  a.q_strides = {0, p.heads_q * p.head_dim_qk, p.head_dim_qk};
  a.k_strides = {0, p.heads_kv * p.head_dim_qk, p.head_dim_qk};
  a.v_strides = {0, p.heads_kv * p.head_dim_v, p.head_dim_v};
  a.o_strides = {0, p.heads_q * p.head_dim_v, p.head_dim_v};
  a.varlen = {static_cast<const int32_t *>(in.cu_q.data()),
              static_cast<const int32_t *>(in.cu_k.data()), total_q, total_k};
  return in;
}

// Sequence b alone, as a dense problem of one sequence.
Problem one_sequence(const Problem &p, int64_t lq, int64_t lk) {
  Problem one = p;
  one.varlen = false;
  one.batch = 1;
  one.seqlen_q = lq;
  one.seqlen_k = lk;
  return one;
}

// Each sequence against the GPU reference on its own rows; O and the LSE
// assembled in the packed layout ([total_q, heads, dv] and [heads, total_q]).
llvm::Expected<AccuracyReport> check_packed(const Problem &p, const PackedLengths &lengths,
                                            const PackedInputs &in) {
  const std::vector<int32_t> cu_q = offsets(lengths.q), cu_k = offsets(lengths.k);
  const int64_t total_q = cu_q.back();
  const int64_t o_row = p.heads_q * p.head_dim_v;
  std::vector<uint16_t> o_bits(size_t(total_q) * o_row);
  std::vector<float> lse(size_t(total_q) * p.heads_q);
  if (auto error = in.o.download(o_bits.data(), o_bits.size() * 2)) return error;
  if (auto error = in.lse.download(lse.data(), lse.size() * 4)) return error;
  AttentionOutputs exact, element;
  exact.out.assign(o_bits.size(), 0.f);
  element.out = exact.out;
  exact.lse.assign(lse.size(), INFINITY);  // a sequence without keys: O = 0, LSE = +inf
  element.lse = exact.lse;
  for (size_t b = 0; b < lengths.q.size(); ++b) {
    const int64_t lq = lengths.q[b], lk = lengths.k[b];
    if (lq == 0 || lk == 0) continue;
    const Problem one = one_sequence(p, lq, lk);
    const auto *q = static_cast<const uint16_t *>(in.q.data()) +
                    int64_t(cu_q[b]) * p.heads_q * p.head_dim_qk;
    const auto *k = static_cast<const uint16_t *>(in.k.data()) +
                    int64_t(cu_k[b]) * p.heads_kv * p.head_dim_qk;
    const auto *v = static_cast<const uint16_t *>(in.v.data()) +
                    int64_t(cu_k[b]) * p.heads_kv * p.head_dim_v;
    const ForwardArgs args = ForwardArgs::packed(one, q, k, v, nullptr, nullptr);
    for (auto [precision, out] : {std::pair{ReferencePrecision::exact, &exact},
                                  std::pair{ReferencePrecision::element, &element}}) {
      auto r = gpu_reference_attention(one, args, precision);
      if (!r) return r.takeError();
      std::copy(r->out.begin(), r->out.end(), out->out.begin() + int64_t(cu_q[b]) * o_row);
      // The reference's [1, heads, lq] into [heads, total_q].
      for (int64_t h = 0; h < p.heads_q; ++h)
        std::copy_n(r->lse.begin() + h * lq, lq, out->lse.begin() + h * total_q + cu_q[b]);
    }
  }
  return check_forward_accuracy(from_storage(p.dtype, o_bits), exact.out, element.out, lse,
                                exact.lse);
}

}  // namespace

int run_varlen(const RunCommand &command, const CommonOptions &common,
               const ResolvedKernel &kernel, const ParsedProblem &parsed,
               const DeviceInfo &device) {
  const Problem &p = kernel.problem;
  const KernelSpec &spec = kernel.spec;
  const PackedLengths lengths = packed_lengths(parsed, command.seed);
  int64_t total_q = 0, total_k = 0;
  double flops = 0, kv_bytes = 0;
  for (size_t b = 0; b < lengths.q.size(); ++b) {
    total_q += lengths.q[b];
    total_k += lengths.k[b];
    if (lengths.q[b] > 0 && lengths.k[b] > 0)
      flops += one_sequence(p, lengths.q[b], lengths.k[b]).forward_flops();
    kv_bytes += double(lengths.k[b]) * p.heads_kv * (p.head_dim_qk + p.head_dim_v) * 2;
  }
  const uint64_t seed = command.seed;
  const std::vector<uint16_t> q =
      random_normal(p.dtype, size_t(total_q) * p.heads_q * p.head_dim_qk, seed * 3 + 0);
  const std::vector<uint16_t> k =
      random_normal(p.dtype, size_t(total_k) * p.heads_kv * p.head_dim_qk, seed * 3 + 1);
  const std::vector<uint16_t> v =
      random_normal(p.dtype, size_t(total_k) * p.heads_kv * p.head_dim_v, seed * 3 + 2);
  // Enough copies that one run's data has left the L2 when it comes back.
  const double set_bytes = double(q.size() + k.size() + v.size()) * 2 +
                           double(total_q) * p.heads_q * p.head_dim_v * 2;
  const size_t copies =
      std::clamp<size_t>(size_t(std::ceil(2.0 * device.l2_bytes / std::max(set_bytes, 1.0))), 1, 16);
  std::vector<PackedInputs> sets;
  for (size_t i = 0; i < copies; ++i) {
    auto set = make_packed_inputs(p, lengths, q, k, v);
    if (!set) return report_error(kExitFailure, set.takeError());
    sets.push_back(std::move(*set));
  }
  auto synchronize = []() -> llvm::Error {
    auto driver = cuda_driver();
    if (!driver) return driver.takeError();
    return cuda_check(driver->cuCtxSynchronize(), "cuCtxSynchronize");
  };
  if (auto error = launch_forward(p, sets[0].args, nullptr, spec.config))
    return report_error(kExitFailure, std::move(error));
  if (auto error = synchronize()) return report_error(kExitFailure, std::move(error));
  std::optional<AccuracyReport> accuracy;
  if (command.check) {
    auto report = check_packed(p, lengths, sets[0]);
    if (!report) return report_error(kExitFailure, report.takeError());
    accuracy = *report;
  }
  size_t next = 0;
  auto timing = time_on_stream(nullptr, command.warmup, command.repeats, [&]() -> llvm::Error {
    return launch_forward(p, sets[next++ % sets.size()].args, nullptr, spec.config);
  });
  if (!timing) return report_error(kExitFailure, timing.takeError());
  const double tflops = flops / (timing->median_ms * 1e-3) / 1e12;
  const double gbps = kv_bytes / (timing->median_ms * 1e-3) / 1e9;

  if (common.json) {
    llvm::json::Array json_q, json_k;
    for (int64_t n : lengths.q) json_q.push_back(n);
    for (int64_t n : lengths.k) json_k.push_back(n);
    llvm::json::Object o = run_json(spec, device, p, *timing, command.repeats, sets.size());
    o["seqlens_q"] = std::move(json_q);
    o["seqlens_k"] = std::move(json_k);
    o["total_q"] = total_q;
    o["total_k"] = total_k;
    o["tflops"] = tflops;
    o["gbps"] = gbps;
    if (accuracy) o["check"] = accuracy_json(*accuracy);
    print_json(std::move(o));
  } else {
    llvm::raw_ostream &os = llvm::outs();
    print_run_head(os, spec, device, p);
    os << llvm::formatv("packed   {0} sequences, {1} queries and {2} keys in all\n",
                        lengths.q.size(), total_q, total_k);
    os << llvm::formatv("config   {0}\n", describe(spec.config));
    if (accuracy) os << llvm::formatv("check    {0}\n", accuracy->describe());
    print_run_time(os, *timing, command.repeats, sets.size());
    os << llvm::formatv("perf     {0:f1} TFLOP/s of the sequences' own work, {1:f1} GB/s (K and "
                        "V read once)\n",
                        tflops, gbps);
  }
  return accuracy && !accuracy->passed ? kExitFailure : kExitOk;
}

}  // namespace flashjit::cli
