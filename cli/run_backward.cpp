#include "cli/run_backward.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "cli/random_inputs.h"
#include "cli/run_report.h"
#include "flashjit/backward.h"
#include "reference/backward_check.h"
#include "reference/cpu_attention.h"
#include "runtime/cuda_driver.h"
#include "runtime/device_buffer.h"
#include "runtime/launch_backward.h"
#include "runtime/launch_forward.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

namespace flashjit::cli {
namespace {

struct BackwardSet {
  DeviceBuffer q, k, v, o, lse, dout, dq, dk, dv, workspace, dsinks;
  BackwardArgs args;
};

llvm::Expected<DeviceBuffer> upload(const std::vector<uint16_t> &bits) {
  auto buffer = DeviceBuffer::allocate(bits.size() * sizeof(uint16_t));
  if (!buffer) return buffer.takeError();
  if (llvm::Error e = buffer->upload(bits.data(), bits.size() * sizeof(uint16_t))) return e;
  return std::move(*buffer);
}

// Inputs uploaded, then O and LSE written by the forward (the config a
// forward call would pick, with the modifiers when there are any),
// gradients poisoned with NaN.
llvm::Expected<BackwardSet> make_set(const Problem &p, const std::vector<uint16_t> &q,
                                     const std::vector<uint16_t> &k,
                                     const std::vector<uint16_t> &v,
                                     const std::vector<uint16_t> &dout,
                                     const ModifierInputs *modifiers) {
  BackwardSet set;
  const std::pair<DeviceBuffer *, const std::vector<uint16_t> *> inputs[] = {
      {&set.q, &q}, {&set.k, &k}, {&set.v, &v}, {&set.dout, &dout}};
  for (auto [into, bits] : inputs) {
    auto buffer = upload(*bits);
    if (!buffer) return buffer.takeError();
    *into = std::move(*buffer);
  }
  const std::pair<DeviceBuffer *, size_t> outputs[] = {
      {&set.o, o_elements(p) * 2},  {&set.lse, lse_elements(p) * 4},
      {&set.dq, q_elements(p) * 2}, {&set.dk, k_elements(p) * 2},
      {&set.dv, v_elements(p) * 2}, {&set.workspace, backward_workspace_bytes(p)},
      {&set.dsinks, modifiers && modifiers->modifiers.sinks ? size_t(p.heads_q) * 4 : 0}};
  for (auto [into, bytes] : outputs) {
    if (bytes == 0) continue;
    auto buffer = DeviceBuffer::allocate(bytes);
    if (!buffer) return buffer.takeError();
    if (llvm::Error e = buffer->fill_bytes(0xFF)) return e;
    *into = std::move(*buffer);
  }
  ForwardArgs forward =
      ForwardArgs::packed(p, set.q.data(), set.k.data(), set.v.data(), set.o.data(),
                          static_cast<float *>(set.lse.data()));
  if (modifiers) modifiers->attach(forward);
  if (llvm::Error e = launch_forward(p, forward, nullptr, KernelConfig{})) return e;
  set.args = BackwardArgs::packed(p, set.q.data(), set.k.data(), set.v.data(), set.o.data(),
                                  set.dout.data(), static_cast<const float *>(set.lse.data()),
                                  set.dq.data(), set.dk.data(), set.dv.data(),
                                  set.workspace.data(), set.workspace.size());
  if (modifiers) modifiers->attach(set.args, static_cast<float *>(set.dsinks.data()));
  return set;
}

// Enough sets that a run's tensors have left L2 before they are used again.
size_t rotation_sets(const Problem &p, const DeviceInfo &device) {
  const double bytes =
      double(2 * q_elements(p) + 2 * k_elements(p) + 2 * v_elements(p) + 2 * o_elements(p)) * 2 +
      double(backward_workspace_bytes(p));
  const size_t sets = size_t(std::ceil(2.0 * device.l2_bytes / std::max(bytes, 1.0)));
  return std::clamp<size_t>(sets, 1, 16);
}

}  // namespace

int run_backward(const RunCommand &command, const CommonOptions &common,
                 const ResolvedKernel &kernel, const DeviceInfo &device,
                 const ModifierInputs *modifiers) {
  const Problem &p = kernel.problem;
  const KernelSpec &spec = kernel.spec;
  const uint64_t seed = command.seed;

  std::optional<GradientAccuracyReport> accuracy;
  Problem checked;
  if (command.check) {
    // The reference is O(b·h·sq·sk·d) (float64 on the CPU; with modifiers
    // the GPU reference backward compiled with them): a small problem of the
    // class runs the same compiled program.
    checked = backward_accuracy_problem(p);
    auto launch = [&](const Problem &small, const BackwardArgs &args, CUstream stream) {
      return launch_backward(small, args, stream, spec.config);
    };
    auto report = [&]() -> llvm::Expected<GradientAccuracyReport> {
      if (!modifiers) return check_backward(checked, launch, nullptr, seed + 1);
      // The inputs were made for `p`; the check's problem is no larger, so
      // every index the snippets derive stays inside them.
      return check_modified_backward(checked, modifiers->reference_args(), launch, nullptr,
                                     nullptr, seed + 1);
    }();
    if (!report) return report_error(kExitFailure, report.takeError());
    accuracy = *report;
  }

  const std::vector<uint16_t> q = random_normal(p.dtype, q_elements(p), seed * 4 + 0);
  const std::vector<uint16_t> k = random_normal(p.dtype, k_elements(p), seed * 4 + 1);
  const std::vector<uint16_t> v = random_normal(p.dtype, v_elements(p), seed * 4 + 2);
  const std::vector<uint16_t> dout = random_normal(p.dtype, o_elements(p), seed * 4 + 3);
  std::vector<BackwardSet> sets;
  for (size_t i = 0, n = rotation_sets(p, device); i < n; ++i) {
    auto set = make_set(p, q, k, v, dout, modifiers);
    if (!set) return report_error(kExitFailure, set.takeError());
    sets.push_back(std::move(*set));
  }
  size_t next = 0;
  auto timing = time_on_stream(nullptr, command.warmup, command.repeats, [&]() -> llvm::Error {
    return launch_backward(p, sets[next++ % sets.size()].args, nullptr, spec.config);
  });
  if (!timing) return report_error(kExitFailure, timing.takeError());
  const double tflops =
      kBackwardFlopsFactor * p.forward_flops() / (timing->median_ms * 1e-3) / 1e12;

  BackwardRun run{spec, device, p, *timing, command.repeats, sets.size(), tflops, accuracy, checked};
  if (modifiers) run.aux_lines = &modifiers->lines;
  return report_backward_run(run, common.json);
}

}  // namespace flashjit::cli
