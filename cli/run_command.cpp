// `flashjit run`: the forward pass on the GPU with random inputs: check it
// against the GPU reference (--check) and time it. The backward (--pass bwd)
// is run_backward.cpp.
#include <algorithm>
#include <cmath>
#include <optional>
#include <thread>

#include "cli/commands.h"
#include "cli/random_inputs.h"
#include "cli/run_backward.h"
#include "cli/run_fp8.h"
#include "cli/run_report.h"
#include "cli/run_varlen.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"
#include "reference/accuracy.h"
#include "reference/gpu_reference.h"
#include "runtime/device.h"
#include "runtime/device_buffer.h"
#include "runtime/launch_forward.h"
#include "runtime/kernel_source.h"
#include "runtime/modifier_facts.h"
#include "tuner/kv_cache_inputs.h"
#include "tuner/modifier_inputs.h"

namespace cl = llvm::cl;

namespace flashjit::cli {

RunCommand::RunCommand(cl::OptionCategory &category)
    : check("check", cl::desc("Compare against the GPU reference (exit 1 when it fails)"),
            cl::cat(category), cl::sub(sub)),
      warmup("warmup", cl::desc("Untimed runs before timing"), cl::init(5), cl::cat(category),
             cl::sub(sub)),
      repeats("repeats", cl::desc("Timed runs (the median is reported)"), cl::init(20),
              cl::cat(category), cl::sub(sub)),
      seed("seed", cl::desc("Seed of the random inputs"), cl::init(0), cl::cat(category),
           cl::sub(sub)),
      modifiers(category, sub),
      aux_values("aux-value",
                 cl::desc("The value of a scalar aux field of --aux, e.g. prefix=1024 (pointer "
                          "fields get generated arrays)"),
                 cl::value_desc("NAME=VALUE"), cl::cat(category), cl::sub(sub)) {}

namespace {

struct InputSet {
  DeviceBuffer q, k, v, o, lse;
  KvCacheInputs cache;  // a KV-cache problem: lengths and pages of the keys
  ForwardArgs args;
};

// A KV cache as `run` draws it: each sequence a random length up to
// seqlen_k, and (paged) its pages at shuffled places of the cache, so the
// keys are uploaded in that physical order.
constexpr uint64_t kCacheSeed = 7;

// The dense [batch, seqlen_k, heads, dim] `logical` rows moved to the pages
// the table gives them (a paged problem): page table[i] holds logical page i.
std::vector<uint16_t> to_pages(const Problem &p, llvm::ArrayRef<uint16_t> logical, int dim,
                               const std::vector<int32_t> &table) {
  std::vector<uint16_t> physical(logical.size());
  const size_t page_elements = size_t(p.page_size) * p.heads_kv * dim;
  for (size_t i = 0; i < table.size(); ++i)
    std::copy_n(logical.begin() + i * page_elements, page_elements,
                physical.begin() + size_t(table[i]) * page_elements);
  return physical;
}

llvm::Expected<InputSet> make_input_set(const Problem &p, llvm::ArrayRef<uint16_t> q,
                                        llvm::ArrayRef<uint16_t> k, llvm::ArrayRef<uint16_t> v) {
  InputSet set;
  for (auto [buffer, host] : {std::pair{&set.q, q}, std::pair{&set.k, k}, std::pair{&set.v, v}}) {
    auto allocated = DeviceBuffer::allocate(host.size() * sizeof(uint16_t));
    if (!allocated) return allocated.takeError();
    *buffer = std::move(*allocated);
    if (auto error = buffer->upload(host.data(), host.size() * sizeof(uint16_t)))
      return error;
  }
  auto o = DeviceBuffer::allocate(o_elements(p) * sizeof(uint16_t));
  if (!o) return o.takeError();
  set.o = std::move(*o);
  auto lse = DeviceBuffer::allocate(lse_elements(p) * sizeof(float));
  if (!lse) return lse.takeError();
  set.lse = std::move(*lse);
  // NaN everywhere, so an element the kernel never writes cannot pass.
  if (auto error = set.o.fill_bytes(0xFF)) return error;
  if (auto error = set.lse.fill_bytes(0xFF)) return error;
  set.args = ForwardArgs::packed(p, set.q.data(), set.k.data(), set.v.data(), set.o.data(),
                                 static_cast<float *>(set.lse.data()));
  auto cache = make_kv_cache_inputs(p, set.args, KvCacheFill::random_shuffled, kCacheSeed);
  if (!cache) return cache.takeError();
  set.cache = std::move(*cache);
  return set;
}

// The reference of a KV-cache problem, one sequence at a time on the keys it
// has (`k`, `v`: the dense logical tensors on the device): outputs of a
// sequence without keys are 0 with LSE +inf, as the kernel's.
llvm::Expected<std::pair<AttentionOutputs, AttentionOutputs>> kv_cache_reference(
    const Problem &p, const InputSet &set, const DeviceBuffer &k, const DeviceBuffer &v) {
  AttentionOutputs exact, element;
  exact.out.assign(o_elements(p), 0.f);
  element.out = exact.out;
  exact.lse.assign(lse_elements(p), INFINITY);
  element.lse = exact.lse;
  const int64_t q_row = p.seqlen_q * p.heads_q * p.head_dim_qk;
  const int64_t o_row = p.seqlen_q * p.heads_q * p.head_dim_v;
  const int64_t lse_row = p.heads_q * p.seqlen_q;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t keys = set.cache.lengths.empty() ? p.seqlen_k : set.cache.lengths[b];
    if (keys == 0) continue;
    Problem one = p;
    one.batch = 1;
    one.seqlen_k = keys;
    one.seqused_k = false;
    one.page_size = 0;
    const auto *q = static_cast<const uint16_t *>(set.q.data()) + b * q_row;
    const auto *kb = static_cast<const uint16_t *>(k.data()) + b * p.seqlen_k * p.heads_kv * p.head_dim_qk;
    const auto *vb = static_cast<const uint16_t *>(v.data()) + b * p.seqlen_k * p.heads_kv * p.head_dim_v;
    const ForwardArgs args = ForwardArgs::packed(one, q, kb, vb, nullptr, nullptr);
    for (auto [precision, out] : {std::pair{ReferencePrecision::exact, &exact},
                                  std::pair{ReferencePrecision::element, &element}}) {
      auto r = gpu_reference_attention(one, args, precision);
      if (!r) return r.takeError();
      std::copy(r->out.begin(), r->out.end(), out->out.begin() + b * o_row);
      std::copy(r->lse.begin(), r->lse.end(), out->lse.begin() + b * lse_row);
    }
  }
  return std::pair{std::move(exact), std::move(element)};
}

llvm::Expected<AccuracyReport> check_against_reference(const Problem &p, const InputSet &set,
                                                       llvm::ArrayRef<uint16_t> k,
                                                       llvm::ArrayRef<uint16_t> v) {
  std::vector<uint16_t> o_bits(o_elements(p));
  std::vector<float> lse(lse_elements(p));
  if (auto error = set.o.download(o_bits.data(), o_bits.size() * sizeof(uint16_t)))
    return error;
  if (auto error = set.lse.download(lse.data(), lse.size() * sizeof(float)))
    return error;
  const std::vector<float> out = from_storage(p.dtype, o_bits);
  if (p.seqused_k || p.page_size > 0) {
    // The logical keys, densely, for the per-sequence reference.
    auto upload = [](llvm::ArrayRef<uint16_t> host) -> llvm::Expected<DeviceBuffer> {
      auto buffer = DeviceBuffer::allocate(host.size() * sizeof(uint16_t));
      if (!buffer) return buffer.takeError();
      if (auto error = buffer->upload(host.data(), host.size() * sizeof(uint16_t))) return error;
      return std::move(*buffer);
    };
    auto dense_k = upload(k);
    if (!dense_k) return dense_k.takeError();
    auto dense_v = upload(v);
    if (!dense_v) return dense_v.takeError();
    auto refs = kv_cache_reference(p, set, *dense_k, *dense_v);
    if (!refs) return refs.takeError();
    return check_forward_accuracy(out, refs->first.out, refs->second.out, lse,
                                  refs->first.lse);
  }
  auto exact = gpu_reference_attention(p, set.args, ReferencePrecision::exact);
  if (!exact) return exact.takeError();
  auto lowprec = gpu_reference_attention(p, set.args, ReferencePrecision::element);
  if (!lowprec) return lowprec.takeError();
  return check_forward_accuracy(out, exact->out, lowprec->out, lse, exact->lse);
}

// Enough copies of the inputs that one run's data has left the L2 by the
// time it is used again, so timings are of HBM-fed kernels as in a model.
size_t rotation_sets(const Problem &p, const DeviceInfo &device) {
  const double bytes = double(q_elements(p) + k_elements(p) + v_elements(p) + o_elements(p)) * 2;
  const size_t sets = size_t(std::ceil(2.0 * device.l2_bytes / std::max(bytes, 1.0)));
  return std::clamp<size_t>(sets, 1, 16);
}

}  // namespace

int RunCommand::run(const CommonOptions &common, const ProblemOptions &problem_options) const {
  if (warmup < 0) return report_error(kExitUsage, llvm::formatv("--warmup: expected an integer >= 0, got {0}", warmup.getValue()));
  if (repeats < 1) return report_error(kExitUsage, llvm::formatv("--repeats: expected an integer >= 1, got {0}", repeats.getValue()));
  // Flags first: a typo should be reported as such even on a machine with
  // no GPU.
  auto parsed = parse_problem_flags(problem_options.values());
  if (!parsed) return report_error(kExitUsage, parsed.takeError());
  auto requested_modifiers = modifiers.read(parsed->pass);
  if (!requested_modifiers) return report_error(kExitUsage, requested_modifiers.takeError());
  std::optional<ModifierInputs> modifier_inputs;
  if (!requested_modifiers->empty()) {
    const Problem &requested = parsed->problem;
    if (requested.varlen || requested.seqused_k || requested.page_size > 0)
      return report_error(kExitUsage,
                          "run: --score-mod, --mask-mod and --sinks run a dense batch (no "
                          "--varlen, --cache-seqlens or --page-size): drop those or the "
                          "modifiers");
    auto inputs = parse_modifier_inputs(*requested_modifiers, aux_values);
    if (!inputs) return report_error(kExitUsage, inputs.takeError());
    modifier_inputs.emplace(std::move(*inputs));
  } else if (!aux_values.empty()) {
    return report_error(kExitUsage, "--aux-value: given without --aux fields to set");
  }
  auto device = query_device(0);
  if (!device)
    return report_error(kExitFailure,
                        "run needs a GPU: " + llvm::toString(device.takeError()));
  int code = kExitOk;
  auto kernel = resolve_kernel(problem_options, "", code, modifier_inputs.has_value());
  if (!kernel) return report_error(code, kernel.takeError());
  if (modifier_inputs) {
    // As the calls compile them on this GPU (the kernel the report names).
    auto resolved =
        resolve_modifiers(modifier_inputs->modifiers, kernel->spec.pass, kernel->spec.arch,
                          process_tuning_db());
    if (!resolved) return report_error(kExitFailure, resolved.takeError());
    kernel->spec.modifiers = std::move(*resolved);
    if (llvm::Error e = upload_modifier_inputs(kernel->problem, *modifier_inputs))
      return report_error(kExitFailure, std::move(e));
  }
  if (kernel->problem.dtype == DType::e4m3 || kernel->problem.kv_dtype == KvDType::e4m3) {
    if (modifier_inputs)
      return report_error(kExitUsage, "run: fp8 inputs are drawn without modifiers; drop "
                                      "--score-mod, --mask-mod and --sinks");
    return run_fp8(*this, common, *kernel, *device);
  }
  if (kernel->problem.varlen) return run_varlen(*this, common, *kernel, *parsed, *device);
  if (kernel->spec.pass == Pass::backward)
    return run_backward(*this, common, *kernel, *device,
                        modifier_inputs ? &*modifier_inputs : nullptr);
  const Problem &p = kernel->problem;
  const KernelSpec &spec = kernel->spec;

  const std::vector<uint16_t> q = random_normal(p.dtype, q_elements(p), seed * 3 + 0);
  const std::vector<uint16_t> k = random_normal(p.dtype, k_elements(p), seed * 3 + 1);
  const std::vector<uint16_t> v = random_normal(p.dtype, v_elements(p), seed * 3 + 2);
  // A paged cache holds the keys at the pages its (shuffled) table names.
  std::vector<int32_t> table;
  if (p.page_size > 0) {
    ForwardArgs scratch;
    auto cache = make_kv_cache_inputs(p, scratch, KvCacheFill::random_shuffled, kCacheSeed);
    if (!cache) return report_error(kExitFailure, cache.takeError());
    table = cache->table;
  }
  // Dense K/V are uploaded as they are: no copy of them on the host.
  std::vector<uint16_t> k_pages, v_pages;
  if (p.page_size > 0) {
    k_pages = to_pages(p, k, p.head_dim_qk, table);
    v_pages = to_pages(p, v, p.head_dim_v, table);
  }
  const llvm::ArrayRef<uint16_t> k_stored = p.page_size > 0 ? k_pages : k;
  const llvm::ArrayRef<uint16_t> v_stored = p.page_size > 0 ? v_pages : v;
  std::vector<InputSet> sets;
  for (size_t i = 0, n = rotation_sets(p, *device); i < n; ++i) {
    auto set = make_input_set(p, q, k_stored, v_stored);
    if (!set) return report_error(kExitFailure, set.takeError());
    if (modifier_inputs) modifier_inputs->attach(set->args);
    sets.push_back(std::move(*set));
  }

  if (auto error = launch_forward(p, sets[0].args, nullptr, spec.config))
    return report_error(kExitFailure, std::move(error));
  if (auto error = synchronize()) return report_error(kExitFailure, std::move(error));
  std::optional<AccuracyReport> accuracy;
  if (check) {
    auto report = check_against_reference(p, sets[0], k, v);
    if (!report) return report_error(kExitFailure, report.takeError());
    accuracy = *report;
  }

  size_t next = 0;
  auto timing = time_on_stream(nullptr, warmup, repeats, [&]() -> llvm::Error {
    const ForwardArgs &args = sets[next++ % sets.size()].args;
    return launch_forward(p, args, nullptr, spec.config);
  });
  if (!timing) return report_error(kExitFailure, timing.takeError());
  // A KV cache's sequences attend to their own keys only: both rates count
  // the keys they hold.
  double key_share = 1.0;
  if (!sets[0].cache.lengths.empty()) {
    double keys = 0;
    for (int32_t n : sets[0].cache.lengths) keys += n;
    key_share = keys / (double(p.batch) * p.seqlen_k);
  }
  const double tflops = p.forward_flops() * key_share / (timing->median_ms * 1e-3) / 1e12;
  // K and V read once, 2 bytes an element: what bounds decode (few queries,
  // long keys), where FLOP/s say little.
  const double kv_bytes = double(k_elements(p) + v_elements(p)) * 2 * key_share;
  const double gbps = kv_bytes / (timing->median_ms * 1e-3) / 1e9;

  if (common.json) {
    llvm::json::Object o = run_json(spec, *device, p, *timing, repeats, sets.size());
    o["tflops"] = tflops;
    o["gbps"] = gbps;
    if (accuracy) o["check"] = accuracy_json(*accuracy);
    if (modifier_inputs) {
      llvm::json::Array aux;
      for (const std::string &line : modifier_inputs->lines) aux.push_back(line);
      o["aux"] = std::move(aux);
    }
    print_json(std::move(o));
  } else {
    llvm::raw_ostream &os = llvm::outs();
    print_run_head(os, spec, *device, p);
    os << llvm::formatv("config   {0}\n", describe(spec.config));
    if (modifier_inputs)
      for (const std::string &line : modifier_inputs->lines) os << "aux      " << line << "\n";
    if (accuracy) os << llvm::formatv("check    {0}\n", accuracy->describe());
    print_run_time(os, *timing, repeats, sets.size());
    os << llvm::formatv("perf     {0:f1} TFLOP/s, {1:f1} GB/s (K and V read once)\n", tflops,
                        gbps);
  }
  return accuracy && !accuracy->passed ? kExitFailure : kExitOk;
}

}  // namespace flashjit::cli
