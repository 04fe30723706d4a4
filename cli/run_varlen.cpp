#include "cli/run_varlen.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "cli/random_inputs.h"
#include "cli/run_report.h"
#include "cli/run_serving.h"
#include "reference/accuracy.h"
#include "reference/packed_check.h"
#include "runtime/launch_backward.h"
#include "runtime/launch_forward.h"
#include "tuner/backward_bench.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

namespace flashjit::cli {

namespace {

// The packed batch's random inputs: Q and dO per query token, K and V per
// key token (seeded as the dense run draws them).
struct PackedValues {
  std::vector<uint16_t> q, k, v, dout;
};

PackedValues packed_values(const Problem &p, const PackedBatch &lengths, uint64_t seed,
                           bool with_dout) {
  const size_t tq = size_t(lengths.total_q()), tk = size_t(lengths.total_k());
  PackedValues out;
  out.q = random_normal(p.dtype, tq * p.heads_q * p.head_dim_qk, seed * 4 + 0);
  out.k = random_normal(p.dtype, tk * p.heads_kv * p.head_dim_qk, seed * 4 + 1);
  out.v = random_normal(p.dtype, tk * p.heads_kv * p.head_dim_v, seed * 4 + 2);
  if (with_dout) out.dout = random_normal(p.dtype, tq * p.heads_q * p.head_dim_v, seed * 4 + 3);
  return out;
}

int run_varlen_forward(const RunCommand &command, const CommonOptions &common,
                       const ResolvedKernel &kernel, const PackedBatch &lengths,
                       const DeviceInfo &device) {
  const Problem &p = kernel.problem;
  const KernelSpec &spec = kernel.spec;
  const double flops = packed_forward_flops(p, lengths);
  const double kv_bytes =
      double(lengths.total_k()) * p.heads_kv * (p.head_dim_qk + p.head_dim_v) * 2;
  const PackedValues values = packed_values(p, lengths, command.seed, false);
  const double set_bytes = double(values.q.size() + values.k.size() + values.v.size()) * 2 +
                           double(lengths.total_q()) * p.heads_q * p.head_dim_v * 2;
  std::vector<PackedForwardInputs> sets;
  for (size_t i = 0, n = rotation_copies(set_bytes, device); i < n; ++i) {
    auto set = make_packed_forward_inputs(p, lengths, values.q, values.k, values.v);
    if (!set) return report_error(kExitFailure, set.takeError());
    sets.push_back(std::move(*set));
  }
  if (auto error = launch_forward(p, sets[0].args, nullptr, spec.config))
    return report_error(kExitFailure, std::move(error));
  if (auto error = synchronize()) return report_error(kExitFailure, std::move(error));
  std::optional<AccuracyReport> accuracy;
  if (command.check) {
    auto report = check_packed_forward_outputs(p, lengths, sets[0]);
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

  return report_packed_forward_run({spec, device, p, *timing, command.repeats, sets.size(), lengths,
                                    tflops, gbps, accuracy, ""},
                                   common.json);
}

// A set's O and LSE come from the forward a call would pick, as in
// training; its gradients are poisoned until the backward writes them.
llvm::Expected<PackedBackwardInputs> make_backward_set(const Problem &p,
                                                       const PackedBatch &lengths,
                                                       const PackedValues &values) {
  const size_t o_n = size_t(lengths.total_q() * p.heads_q * p.head_dim_v);
  const std::vector<uint16_t> o(o_n, 0);
  const std::vector<float> lse(size_t(lengths.total_q() * p.heads_q), 0.f);
  auto set = make_packed_backward_inputs(p, lengths, values.q, values.k, values.v, o,
                                         values.dout, lse);
  if (!set) return set.takeError();
  if (llvm::Error e = launch_forward(p, set->forward_args(p), nullptr, KernelConfig{})) return e;
  return set;
}

int run_varlen_backward(const RunCommand &command, const CommonOptions &common,
                        const ResolvedKernel &kernel, const PackedBatch &lengths,
                        const DeviceInfo &device) {
  const Problem &p = kernel.problem;
  const KernelSpec &spec = kernel.spec;
  const uint64_t seed = command.seed;

  std::optional<GradientAccuracyReport> accuracy;
  PackedBatch checked;
  Problem checked_problem;
  if (command.check) {
    // The CPU reference is float64: a few of the sequences, scaled down
    // together (irregular lengths kept), with the dense check's heads cut,
    // run the same compiled program.
    checked = backward_accuracy_packed_batch(lengths);
    checked_problem = resized_packed_problem(backward_accuracy_problem(p), checked);
    auto report = check_packed_backward(
        checked_problem, checked,
        [&](const Problem &small, const BackwardArgs &args, CUstream stream) {
          return launch_backward(small, args, stream, spec.config);
        },
        nullptr, seed + 1);
    if (!report) return report_error(kExitFailure, report.takeError());
    accuracy = *report;
  }

  const PackedValues values = packed_values(p, lengths, seed, true);
  const double set_bytes =
      double(2 * values.q.size() + 2 * values.k.size() + 2 * values.v.size() +
             2 * values.dout.size()) * 2 +
      double(backward_workspace_bytes(p, lengths.total_q()));
  std::vector<PackedBackwardInputs> sets;
  for (size_t i = 0, n = rotation_copies(set_bytes, device); i < n; ++i) {
    auto set = make_backward_set(p, lengths, values);
    if (!set) return report_error(kExitFailure, set.takeError());
    sets.push_back(std::move(*set));
  }
  if (auto error = synchronize()) return report_error(kExitFailure, std::move(error));
  size_t next = 0;
  auto timing = time_on_stream(nullptr, command.warmup, command.repeats, [&]() -> llvm::Error {
    return launch_backward(p, sets[next++ % sets.size()].args, nullptr, spec.config);
  });
  if (!timing) return report_error(kExitFailure, timing.takeError());
  const double tflops =
      kBackwardFlopsFactor * packed_forward_flops(p, lengths) / (timing->median_ms * 1e-3) / 1e12;

  return report_backward_run({spec, device, p, *timing, command.repeats, sets.size(), tflops,
                              accuracy, checked_problem, &lengths, &checked},
                             common.json);
}

}  // namespace

int run_varlen(const RunCommand &command, const CommonOptions &common,
               const ResolvedKernel &kernel, const ParsedProblem &parsed,
               const DeviceInfo &device) {
  const PackedBatch lengths = packed_lengths(parsed, command.seed);
  if (kernel.problem.seqused_k || kernel.problem.page_size > 0)
    return run_serving(command, common, kernel, lengths, device);
  if (kernel.spec.pass == Pass::backward)
    return run_varlen_backward(command, common, kernel, lengths, device);
  return run_varlen_forward(command, common, kernel, lengths, device);
}

}  // namespace flashjit::cli
