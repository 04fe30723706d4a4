#include "cli/run_fp8.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "cli/run_report.h"
#include "reference/accuracy.h"
#include "reference/cpu_attention.h"
#include "reference/fp8_check.h"
#include "reference/forward_inputs.h"
#include "runtime/device_buffer.h"
#include "runtime/launch_forward.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

namespace flashjit::cli {

int run_fp8(const RunCommand &command, const CommonOptions &common, const ResolvedKernel &kernel,
            const DeviceInfo &device) {
  const Problem &p = kernel.problem;
  const KernelSpec &spec = kernel.spec;
  if (p.varlen || p.seqused_k || p.page_size > 0)
    return report_error(kExitUsage,
                        "run: fp8 inputs (--dtype e4m3, --kv-dtype e4m3) are drawn for a dense "
                        "batch; drop --varlen, --cache-seqlens and --page-size (the tests cover "
                        "those layouts)");
  const DType kv = kv_element(p);
  const ForwardHostInputs in = make_forward_inputs(p, command.seed);
  auto device_in = upload_forward_inputs(in);
  if (!device_in) return report_error(kExitFailure, device_in.takeError());
  const size_t o_bytes = o_elements(p) * size_t(element_bytes(out_element(p)));
  auto o = DeviceBuffer::allocate(std::max<size_t>(o_bytes, 1));
  auto lse = DeviceBuffer::allocate(std::max<size_t>(lse_elements(p), 1) * sizeof(float));
  if (!o) return report_error(kExitFailure, o.takeError());
  if (!lse) return report_error(kExitFailure, lse.takeError());
  // NaN everywhere, so an element the kernel never writes cannot pass.
  if (auto error = o->fill_bytes(0xFF)) return report_error(kExitFailure, std::move(error));
  if (auto error = lse->fill_bytes(0xFF)) return report_error(kExitFailure, std::move(error));
  ForwardArgs args = ForwardArgs::packed(p, device_in->q.data(), device_in->k.data(),
                                         device_in->v.data(), o->data(),
                                         static_cast<float *>(lse->data()));
  args.descale = device_in->descale(p);

  if (auto error = launch_forward(p, args, nullptr, spec.config))
    return report_error(kExitFailure, std::move(error));
  if (auto error = synchronize()) return report_error(kExitFailure, std::move(error));
  std::optional<AccuracyReport> accuracy;
  if (command.check) {
    auto report = check_fp8_forward_outputs(p, args, in, *o, *lse);
    if (!report) return report_error(kExitFailure, report.takeError());
    accuracy = *report;
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
